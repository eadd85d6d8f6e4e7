package images

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/patchbot/patchbot/blame"
	"github.com/patchbot/patchbot/internal/testenv"
)

// These tests run real commands in the real sandbox (bwrap), cheaply: no
// kernel is built. The hostile patches in hostile_test.go go through the
// whole build path.

func needSandbox(t testing.TB) {
	t.Helper()
	testenv.Tools(t, "bwrap", "prlimit", "unshare", "setpriv", "make", "git", "perl")
}

// sandboxFixture is a cache-like directory closed to others, holding a
// tree (shown read-only at /build/tree, as a patched build's is shown at
// the base's path), its object tree (writable) and a secret beside them.
type sandboxFixture struct {
	dir, tree, out, secret string
	canary                 string
}

func newSandboxFixture(t *testing.T) *sandboxFixture {
	t.Helper()
	dir := t.TempDir()
	os.Chmod(dir, 0o700)
	f := &sandboxFixture{dir: dir, tree: filepath.Join(dir, "tree"), canary: fmt.Sprintf("CANARY-%d", time.Now().UnixNano())}
	f.out = filepath.Join(f.tree, outDir)
	f.secret = filepath.Join(dir, "state.db")
	if err := os.MkdirAll(f.out, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(f.tree, "Makefile"), []byte("all:\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	// A world-readable secret: only the sandbox's view hides it.
	if err := os.WriteFile(f.secret, []byte(f.canary+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return f
}

func (f *sandboxFixture) view() view {
	return view{
		mounts: []mount{
			{src: f.tree, dst: "/build/tree"},
			{src: f.out, dst: "/build/tree/" + outDir, rw: true},
		},
		dir:       "/build/tree",
		out:       f.out,
		untrusted: true,
	}
}

// runIn runs a shell script in the sandbox and returns its output (the
// build log) and rootCause's verdict.
func runIn(t *testing.T, ctx context.Context, sb *sandbox, f *sandboxFixture, script string) (string, error) {
	t.Helper()
	if err := sb.own(f.out); err != nil {
		t.Fatal(err)
	}
	logf, err := os.CreateTemp(t.TempDir(), "log")
	if err != nil {
		t.Fatal(err)
	}
	defer logf.Close()
	log := newBuildLog(logf, sb.limits.Log)
	o := sb.run(ctx, log, f.view(), []string{"PATH=/usr/bin:/bin", "LC_ALL=C"}, "/bin/sh", "-c", script)
	if err := log.finish(); err != nil {
		t.Fatal(err)
	}
	out, _ := os.ReadFile(logf.Name())
	return string(out), rootCause(o, logf.Name())
}

func testSandbox(t *testing.T, l Limits) *sandbox {
	t.Helper()
	needSandbox(t)
	sb, err := newSandbox(l, filepath.Join(t.TempDir(), "stage"))
	if err != nil {
		t.Fatal(err)
	}
	if sb.userns != nil {
		t.Skipf("this host gives no user namespaces: %v", sb.userns)
	}
	return sb
}

func TestSandboxIsolates(t *testing.T) {
	sb := testSandbox(t, Limits{})
	f := newSandboxFixture(t)
	ctx := context.Background()
	os.WriteFile("/var/tmp/patchbot-sandbox-canary", []byte(f.canary), 0o644)
	defer os.Remove("/var/tmp/patchbot-sandbox-canary")

	t.Run("namespaces", func(t *testing.T) {
		out, err := runIn(t, ctx, sb, f, `for ns in user mnt pid net ipc uts cgroup; do echo "ns $ns $(readlink /proc/self/ns/$ns)"; done
			echo "uid $(id -u)"; echo "host $(hostname)"; echo "procs $(ls -d /proc/[0-9]* | wc -l)"
			grep -E '^(CapEff|CapBnd|NoNewPrivs)' /proc/self/status
			tail -n +3 /proc/net/dev | cut -d: -f1 | sed 's/^ */if /'
			unshare --user --map-root-user id -u && echo "nested userns: $(echo yes)"
			ls /proc/self/fd | tr '\n' ' ' | sed 's/^/fds /'; echo`)
		if err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
		for _, ns := range []string{"user", "mnt", "pid", "net", "ipc", "uts", "cgroup"} {
			host, _ := os.Readlink("/proc/self/ns/" + ns)
			if strings.Contains(out, "ns "+ns+" "+host+"\n") {
				t.Errorf("the sandbox shares the %s namespace (%s)", ns, host)
			}
		}
		for _, want := range []string{"uid " + sandboxUID + "\n", "host patchbot-build\n", "CapEff:\t0000000000000000", "CapBnd:\t0000000000000000", "NoNewPrivs:\t1", "fds 0 1 2 3 \n"} {
			if !strings.Contains(out, want) {
				t.Errorf("output lacks %q", want)
			}
		}
		if strings.Contains(out, "nested userns: yes") {
			t.Error("a nested unshare --user worked")
		}
		for _, line := range strings.Split(out, "\n") {
			if strings.HasPrefix(line, "if ") && line != "if lo" {
				t.Errorf("network interface %q in the sandbox", line)
			}
			if n, ok := strings.CutPrefix(line, "procs "); ok {
				if n, _ := strconv.Atoi(n); n > 5 {
					t.Errorf("the sandbox's /proc shows %d processes: the host's?", n)
				}
			}
		}
		if t.Failed() {
			t.Log(out)
		}
	})

	t.Run("file system", func(t *testing.T) {
		// Each probe prints "probe N ok" when it succeeds (spelled so that
		// the script itself, logged as the command line, does not match).
		probes := []struct {
			name, cmd string
			want      bool
		}{
			{"read the tree", "cat /build/tree/Makefile", true},
			{"write the object tree", "touch /build/tree/.out/x", true},
			{"write /tmp", "touch /tmp/x", true},
			{"run the toolchain", "make -v", true},
			{"read the secret by its host path", "cat " + f.secret, false},
			{"see the cache", "ls " + f.dir, false},
			{"read a host file in /var/tmp", "cat /var/tmp/patchbot-sandbox-canary", false},
			{"read /etc/shadow", "cat /etc/shadow", false},
			{"read /etc/passwd", "cat /etc/passwd", false},
			{"see /home", "ls /home", false},
			{"see /root", "ls /root", false},
			{"see /run", "ls /run", false},
			{"see /sys", "ls /sys/fs", false},
			{"see /var", "ls /var", false},
			{"write the tree", "touch /build/tree/Makefile", false},
			{"add to the tree", "touch /build/tree/new", false},
			{"write /usr", "touch /usr/x", false},
			{"write /", "touch /x", false},
			{"write /dev", "touch /dev/x", false},
			{"write /etc", "touch /etc/x", false},
			{"remount the tree", "mount -o remount,rw /build/tree", false},
		}
		var script strings.Builder
		for i, p := range probes {
			fmt.Fprintf(&script, "%s >/dev/null 2>&1 && echo probe %d $(echo ok)\n", p.cmd, i)
		}
		script.WriteString("true\n")
		out, err := runIn(t, ctx, sb, f, script.String())
		if err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
		for i, p := range probes {
			if got := strings.Contains(out, fmt.Sprintf("probe %d ok\n", i)); got != p.want {
				t.Errorf("%s: %v, want %v", p.name, got, p.want)
			}
		}
		if strings.Contains(out, f.canary) {
			t.Error("the secret is in the build's output")
		}
		if data, _ := os.ReadFile(filepath.Join(f.tree, "Makefile")); string(data) != "all:\n" {
			t.Errorf("the tree's Makefile changed: %q", data)
		}
		if _, err := os.Stat(filepath.Join(f.out, "x")); err != nil {
			t.Errorf("the object tree's file is not on the host: %v", err)
		}
	})
}

func TestSandboxLimits(t *testing.T) {
	needSandbox(t)
	small := Limits{Memory: 256 << 20, Processes: 64, FileSize: 2 << 20, Tmp: 1 << 20}
	tests := []struct {
		name    string
		limits  Limits
		timeout time.Duration
		script  string
		want    error  // a sentinel for an InfraError; nil for success
		patch   bool   // want a *BuildError instead
		cgroups bool   // needs cgroup v1 (root)
		log     string // a line the build log must hold
	}{
		{name: "success", script: "echo fine"},
		{name: "compiler error", script: "echo 'x.c:1:1: error: nope' >&2; exit 2", patch: true},
		{name: "file size", limits: small, script: "dd if=/dev/zero of=/build/tree/.out/big bs=1M count=4", want: ErrLimit},
		{name: "full /tmp", limits: small, script: "dd if=/dev/zero of=/tmp/fill bs=64k count=64 || exit 2", want: ErrNoSpace},
		{name: "processes", limits: small, script: "for i in $(seq 100); do sleep 5 & done; wait; exit 2", want: ErrLimit},
		{name: "address space", limits: small, script: `perl -e '$x = "a" x (512 << 20)' || exit 2`, want: ErrOutOfMemory},
		{name: "memory of the whole build", cgroups: true, limits: Limits{Memory: 256 << 20},
			// Each under the per-process limit, together over the build's.
			script: `for i in 1 2 3 4; do perl -e '$x = "a" x (100 << 20); sleep 3' & done; wait; exit 2`, want: ErrOutOfMemory},
		// The bomb keeps the group at its limit while the build goes on
		// without a fork (exec): stopped at the first refused fork, not
		// when the build ends (61 s, and a success). At the default 512
		// processes: there an RLIMIT_NPROC equal to the group's limit
		// refused first, and the group never counted a refusal.
		{name: "fork bomb beside the build", cgroups: true,
			script: "f() { f | f & }; f; exec sleep 61", want: ErrLimit, log: "stopped the build at its first refused fork"},
		{name: "killed", script: "kill -9 $$", want: ErrKilled},
		// Many files, each under the file size limit, over the output's.
		{name: "output in all", limits: Limits{Output: 8 << 20},
			script: "for i in $(seq 64); do dd if=/dev/zero of=/build/tree/.out/f$i bs=1M count=1 2>/dev/null; sleep 0.05; done; sleep 5", want: ErrOutput},
		{name: "files in all", limits: Limits{Files: 500},
			script: "mkdir /build/tree/.out/d; cd /build/tree/.out/d; for i in $(seq 5000); do : >f$i; done; sleep 5", want: ErrOutput},
		{name: "time limit", timeout: time.Second, script: "sleep 61 & sleep 61", want: ErrTimeout},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sb := testSandbox(t, tt.limits)
			if tt.cgroups && !sb.cgroups {
				t.Skip("cgroup v1 memory and pids are not ours here (not root, or not mounted)")
			}
			f := newSandboxFixture(t)
			ctx := context.Background()
			if tt.timeout > 0 {
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, tt.timeout)
				defer cancel()
			}
			start := time.Now()
			out, err := runIn(t, ctx, sb, f, tt.script)
			var be *BuildError
			switch {
			case tt.patch:
				if !errors.As(err, &be) || blame.Of(err) != blame.Patch || len(be.Lines) == 0 {
					t.Errorf("error = %v, want a BuildError with its lines", err)
				}
			case tt.want == nil:
				if err != nil {
					t.Errorf("error = %v, want none", err)
				}
			default:
				var ie *InfraError
				if !errors.Is(err, tt.want) || !errors.As(err, &ie) || blame.Of(err) != blame.Infra {
					t.Errorf("error = %v (blame %q), want an InfraError wrapping %v", err, blame.Of(err), tt.want)
				}
			}
			if d := time.Since(start); d > 30*time.Second {
				t.Errorf("took %s", d)
			}
			if !strings.Contains(out, tt.log) {
				t.Errorf("the log lacks %q", tt.log)
			}
			if t.Failed() {
				t.Logf("output:\n%s", out)
			}
			// Nothing of the sandbox outlives it.
			if left := processesMatching("sleep 61"); len(left) > 0 {
				t.Errorf("processes left running: %v", left)
			}
		})
	}

	t.Run("canceled", func(t *testing.T) {
		sb := testSandbox(t, Limits{})
		ctx, cancel := context.WithCancel(context.Background())
		time.AfterFunc(300*time.Millisecond, cancel)
		_, err := runIn(t, ctx, sb, newSandboxFixture(t), "sleep 60")
		if !errors.Is(err, context.Canceled) || blame.Of(err) != blame.Infra {
			t.Errorf("error = %v, want context.Canceled, the machine's", err)
		}
	})

	t.Run("refused without user namespaces", func(t *testing.T) {
		sb := testSandbox(t, Limits{})
		sb.userns = fmt.Errorf("%w: (test) no user namespaces", ErrNoSandbox)
		_, err := runIn(t, context.Background(), sb, newSandboxFixture(t), "true")
		if !errors.Is(err, ErrNoSandbox) || blame.Of(err) != blame.Infra {
			t.Errorf("error = %v, want ErrNoSandbox", err)
		}
	})
}

// processesMatching lists the processes whose command line contains s.
func processesMatching(s string) []string {
	var found []string
	dirs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, d := range dirs {
		data, err := os.ReadFile(d)
		if err == nil && strings.Contains(strings.ReplaceAll(string(data), "\x00", " "), s) {
			found = append(found, d)
		}
	}
	return found
}

// The object tree's file system running full is seen as a fact (statfs),
// whatever the build printed.
func TestSandboxDiskFull(t *testing.T) {
	sb := testSandbox(t, Limits{})
	testenv.Root(t) // to mount a small file system
	f := newSandboxFixture(t)
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=8m", "tmpfs", f.out).CombinedOutput(); err != nil {
		t.Skipf("mount tmpfs: %v: %s", err, out)
	}
	defer syscall.Unmount(f.out, syscall.MNT_DETACH)
	out, err := runIn(t, context.Background(), sb, f, "cat /dev/zero > /build/tree/.out/fill 2>/dev/null; exit 2")
	if !errors.Is(err, ErrNoSpace) {
		t.Errorf("error = %v, want ErrNoSpace\n%s", err, out)
	}
}

// The CPU time a build spends in the sandbox reaches its log: a second of
// busy shell must show as about a second, not as what bwrap itself used.
// The loop is a count, not a time: on a loaded host a loop of wall time
// gets a fraction of a core (0.18 s of 1-2 s at load 10 on 2 cores).
func TestSandboxCountsTheBuildsCPU(t *testing.T) {
	sb := testSandbox(t, Limits{})
	if !sb.cgroups || !cpuacctOK {
		t.Skip("no cgroup v1 cpuacct controller of ours here")
	}
	out, err := runIn(t, context.Background(), sb, newSandboxFixture(t),
		`i=0; while [ $i -lt 1000000 ]; do i=$((i+1)); done`)
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`cpu user ([0-9.]+)s sys ([0-9.]+)s \(its cgroup\)`).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("the log gives no CPU time from the build's cgroup:\n%s", out)
	}
	user, _ := strconv.ParseFloat(m[1], 64)
	sys, _ := strconv.ParseFloat(m[2], 64)
	// A million turns of a shell loop: about a second of CPU here
	// (0.94 s user, measured with time(1) outside the sandbox).
	if user+sys < 0.3 {
		t.Errorf("a busy loop of a million turns counted %.2fs user + %.2fs sys", user, sys)
	}
	t.Logf("a busy loop of a million turns: %.2fs user + %.2fs sys, from the build's cgroup", user, sys)
}
