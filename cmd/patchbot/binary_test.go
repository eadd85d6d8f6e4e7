package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/patchbot/patchbot/internal/testenv"
	"github.com/patchbot/patchbot/store/pgtest"
)

// These tests run the patchbot binary, built into a temporary directory,
// as its users start it: every documented command's -h, and each
// documented shape of patchbot.yaml (the example file, one host on
// SQLite, one host on PostgreSQL, a fleet's coordinator and worker, the
// dashboard alone) started, answering, and stopped with SIGTERM.

var (
	binOnce sync.Once
	binDir  string // removed by TestMain
	binPath string
	binErr  error
)

func TestMain(m *testing.M) {
	code := m.Run()
	if binDir != "" {
		os.RemoveAll(binDir)
	}
	os.Exit(code)
}

// buildBinary builds cmd/patchbot into a temporary directory, once for
// the tests of this binary.
func buildBinary(t *testing.T) string {
	t.Helper()
	gobin := testenv.Tool(t, "go")
	binOnce.Do(func() {
		if binDir, binErr = os.MkdirTemp("", "patchbot-bin-"); binErr != nil {
			return
		}
		binPath = filepath.Join(binDir, "patchbot")
		if out, err := exec.Command(gobin, "build", "-o", binPath, ".").CombinedOutput(); err != nil {
			binErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if binErr != nil {
		t.Fatal(binErr)
	}
	return binPath
}

// result is how a run of the binary ended.
type result struct {
	code           int
	stdout, stderr string
}

// runBinary runs the binary to its end, within a minute.
func runBinary(t *testing.T, bin string, env []string, args ...string) result {
	t.Helper()
	return runBinaryIn(t, "", bin, env, args...)
}

// runBinaryIn is runBinary in the working directory dir ("": the test's).
func runBinaryIn(t *testing.T, dir, bin string, env []string, args ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	code := 0
	if err != nil {
		ee, ok := err.(*exec.ExitError)
		if !ok || ctx.Err() != nil {
			t.Fatalf("patchbot %s: %v (%v)", strings.Join(args, " "), err, ctx.Err())
		}
		code = ee.ExitCode()
	}
	return result{code, out.String(), errOut.String()}
}

// wantUsageError checks git's manners for bad input: exit status 2, one
// line on stderr that says what, nothing on stdout.
func wantUsageError(t *testing.T, r result, what string, says ...string) {
	t.Helper()
	if r.code != exitUsage || strings.Count(r.stderr, "\n") != 1 || r.stdout != "" {
		t.Errorf("%s: exit %d, stdout %q, stderr %q; want exit 2 and one line on stderr", what, r.code, r.stdout, r.stderr)
		return
	}
	for _, s := range says {
		if !strings.Contains(r.stderr, s) {
			t.Errorf("%s: stderr %q does not say %q", what, r.stderr, s)
		}
	}
}

// readmeCommands are the commands the README's "Commands" block names:
// "patchbot jobs unpark ID" is "jobs unpark".
func readmeCommands(t *testing.T) []string {
	t.Helper()
	b, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(b), "## Commands\n")
	if !ok {
		t.Fatal("README.md has no ## Commands section")
	}
	_, block, _ := strings.Cut(rest, "```\n")
	block, _, _ = strings.Cut(block, "```")
	word := regexp.MustCompile(`^[a-z]+$`)
	seen := map[string]bool{}
	var names []string
	for _, use := range strings.Split(block, "patchbot ")[1:] {
		var words []string
		for _, w := range strings.Fields(use) {
			if !word.MatchString(w) || len(words) == 2 {
				break
			}
			words = append(words, w)
		}
		if len(words) == 0 {
			continue // patchbot --version
		}
		name := strings.Join(words, " ")
		if commands[name] == nil {
			name = words[0]
		}
		if !seen[name] {
			seen[name] = true
			names = append(names, name)
		}
	}
	return names
}

// Every command the binary has answers -h (and help CMD) with its usage
// and an example, exit 0, and refuses a flag it does not have with one
// line and exit 2; the README's list of commands is the binary's.
func TestBinaryCommands(t *testing.T) {
	bin := buildBinary(t)
	documented := readmeCommands(t)
	inReadme := map[string]bool{}
	for _, name := range documented {
		inReadme[name] = true
		if commands[name] == nil && name != "help" {
			t.Errorf("the README documents 'patchbot %s', which the binary does not have", name)
		}
	}
	var names []string
	for name := range commands {
		names = append(names, name)
		if !inReadme[name] {
			t.Errorf("'patchbot %s' is not in the README's list of commands", name)
		}
	}
	sort.Strings(names)
	list := runBinary(t, bin, nil, "help")
	for _, name := range names {
		args := strings.Fields(name)
		h := runBinary(t, bin, nil, append(args, "-h")...)
		if h.code != 0 || h.stderr != "" || !strings.HasPrefix(h.stdout, "usage: patchbot "+name) || !strings.Contains(h.stdout, "\nexample:\n") {
			t.Errorf("patchbot %s -h: exit %d, stderr %q, stdout:\n%s", name, h.code, h.stderr, h.stdout)
		}
		if help := runBinary(t, bin, nil, append([]string{"help"}, args...)...); help.code != 0 || help.stdout != h.stdout {
			t.Errorf("patchbot help %s: exit %d, and not what -h says", name, help.code)
		}
		wantUsageError(t, runBinary(t, bin, nil, append(args, "--no-such-flag")...), name+" --no-such-flag",
			"patchbot "+name+":", "-no-such-flag")
		if !regexp.MustCompile(`(?m)^  ` + regexp.QuoteMeta(name) + `  +\S`).MatchString(list.stdout) {
			t.Errorf("patchbot help does not list %q apart from its summary:\n%s", name, list.stdout)
		}
	}
	if r := runBinary(t, bin, nil, "--version"); r.code != 0 || !strings.HasPrefix(r.stdout, "patchbot ") {
		t.Errorf("patchbot --version: exit %d, %q", r.code, r.stdout)
	}
	wantUsageError(t, runBinary(t, bin, nil, "no-such-command"), "no-such-command", `"no-such-command" is not a command`)
}

// shape is one documented way to start patchbot: its config and command.
type shape struct {
	name string
	// args start it; CONFIG in them is the config file's path, ADDR a free
	// loopback address for HTTP.
	args []string
	// config is the YAML of the config file (STATE, ADDR, DB and SECRETS
	// replaced); "" for a command started without one.
	config string
	// ready is the path the started process must answer 200 on, with a
	// body that contains readyBody.
	ready, readyBody string
	// started is a line its log must show once it has started.
	started string
	// bare: start it with nothing on PATH and a kernel cache that does
	// not exist, which it must not create: it needs no build tools, VM or
	// kernel tree.
	bare bool
}

// TestBinaryConfigShapes starts the built binary with each documented
// shape of config: it must answer on its HTTP address and log that it
// started, stop at SIGTERM with exit status 0, answer -h, and refuse an
// unknown config key and a bad flag with one line and exit 2.
func TestBinaryConfigShapes(t *testing.T) {
	bin := buildBinary(t)
	example, err := os.ReadFile("../../patchbot.example.yaml")
	if err != nil {
		t.Fatal(err)
	}
	// The example as shipped, with this machine's paths and a free port
	// for its own: /var/lib/patchbot and /etc/patchbot are the test's.
	exampleYAML := strings.NewReplacer("/var/lib/patchbot", "STATE", "/etc/patchbot/", "SECRETS/",
		"127.0.0.1:9187", "ADDR").Replace(string(example))
	if strings.Count(exampleYAML, "SECRETS/") < 3 || !strings.Contains(exampleYAML, "http: ADDR") {
		t.Fatalf("patchbot.example.yaml no longer names /etc/patchbot/ secrets and http: 127.0.0.1:9187; adapt this test:\n%s", example)
	}
	pg := pgtest.Start(t)
	fleetDB, err := pg.NewDB()
	if err != nil {
		t.Fatal(err)
	}
	hostDB, err := pg.NewDB()
	if err != nil {
		t.Fatal(err)
	}
	mbox, err := filepath.Abs("../../testdata/mbox/squashfs-thundering-herd.mbox")
	if err != nil {
		t.Fatal(err)
	}
	source := fmt.Sprintf("sources:\n  - name: seed\n    mbox: %s\n    poll: 1s\n", mbox)
	shapes := []shape{
		{name: "example", args: []string{"watch", "--config", "CONFIG"}, config: exampleYAML,
			ready: "/healthz", started: `"msg":"watching"`},
		{name: "one host, SQLite", args: []string{"watch", "--config", "CONFIG"},
			config: "state_dir: STATE\nhttp: ADDR\n" + source,
			ready:  "/healthz", started: `"msg":"watching"`},
		{name: "one host, PostgreSQL", args: []string{"watch", "--config", "CONFIG"},
			config: "state_dir: STATE\ndatabase: " + hostDB + "\nhttp: ADDR\n" + source,
			ready:  "/healthz", started: `"database":"postgres"`},
		{name: "coordinator", args: []string{"watch", "--config", "CONFIG"},
			config: "state_dir: STATE\ndatabase: " + fleetDB + "\nfleet: {local_worker: false}\nhttp: ADDR\n" + source,
			ready:  "/healthz", started: `"local_worker":false`, bare: true},
		{name: "worker", args: []string{"worker", "--config", "CONFIG", "--name", "w1", "--http", "ADDR"},
			config: "state_dir: STATE\ndatabase: " + fleetDB + "\nfleet: {local_worker: false}\n",
			ready:  "/healthz", started: `"msg":"worker started"`},
		{name: "serve, a state directory", args: []string{"serve", "--state", "STATE", "--http", "ADDR"},
			ready: "/", readyBody: "patchbot", started: "serving the dashboard of"},
		{name: "serve, the fleet's config", args: []string{"serve", "--config", "CONFIG", "--http", "ADDR"},
			config: "state_dir: STATE\ndatabase: " + fleetDB + "\n",
			ready:  "/", readyBody: "w1", started: "serving the dashboard of"},
	}
	for _, sh := range shapes {
		t.Run(sh.name, func(t *testing.T) {
			dir := t.TempDir()
			state := filepath.Join(dir, "state")
			if err := os.Mkdir(state, 0o700); err != nil {
				t.Fatal(err)
			}
			addr := freeAddr(t)
			env := []string{"PATCHBOT_CACHE=" + filepath.Join(dir, "cache"), "HOME=" + dir}
			if sh.bare {
				empty := filepath.Join(dir, "empty-path")
				os.Mkdir(empty, 0o755)
				env = append(env, "PATH="+empty)
			}
			cfgPath := filepath.Join(dir, "patchbot.yaml")
			if sh.config != "" {
				secrets := filepath.Join(dir, "secrets")
				os.Mkdir(secrets, 0o700)
				for _, f := range []string{"imap-password", "smtp-password", "db-password", "dashboard-token", "github-token"} {
					if err := os.WriteFile(filepath.Join(secrets, f), []byte("test-secret-of-some-length\n"), 0o600); err != nil {
						t.Fatal(err)
					}
				}
				cfg := strings.NewReplacer("STATE", state, "ADDR", addr, "SECRETS", secrets).Replace(sh.config)
				if err := os.WriteFile(cfgPath, []byte(cfg), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			args := make([]string, len(sh.args))
			for i, a := range sh.args {
				args[i] = strings.NewReplacer("CONFIG", cfgPath, "STATE", state, "ADDR", addr).Replace(a)
			}

			// Started as a user starts it, it answers, and stops at SIGTERM.
			p := startBinary(t, bin, env, args...)
			body, err := p.waitHTTP("http://"+addr+sh.ready, sh.readyBody, time.Minute)
			if err != nil {
				t.Fatalf("%s: %v\n%s", strings.Join(args, " "), err, p.log())
			}
			if !strings.Contains(body, sh.readyBody) {
				t.Errorf("GET %s lacks %q", sh.ready, sh.readyBody)
			}
			if err := p.waitLog(sh.started, 30*time.Second); err != nil {
				t.Errorf("%v\n%s", err, p.log())
			}
			code, err := p.stop(30 * time.Second)
			if err != nil || code != 0 {
				t.Errorf("after SIGTERM: exit %d, %v; want exit 0\n%s", code, err, p.log())
			}
			log := p.log()
			// No error, even from the example's sources on hosts this machine
			// cannot reach: those are warnings, retried.
			if strings.Contains(log, "panic") || strings.Contains(log, `"level":"ERROR"`) {
				t.Errorf("its log has a panic or an error:\n%s", log)
			}
			if sh.bare {
				if _, err := os.Stat(filepath.Join(dir, "cache")); err == nil {
					t.Errorf("it made a kernel cache at %s", filepath.Join(dir, "cache"))
				}
			}

			// -h answers without the config; bad input is refused.
			if h := runBinary(t, bin, env, sh.args[0], "-h"); h.code != 0 || !strings.HasPrefix(h.stdout, "usage: patchbot "+sh.args[0]) {
				t.Errorf("%s -h: exit %d, %q", sh.args[0], h.code, h.stdout)
			}
			wantUsageError(t, runBinary(t, bin, env, append(args, "--no-such-flag")...), "a bad flag", "-no-such-flag")
			if sh.config != "" {
				cfg, _ := os.ReadFile(cfgPath)
				if err := os.WriteFile(cfgPath, append(cfg, "\nno_such_key: 1\n"...), 0o600); err != nil {
					t.Fatal(err)
				}
				wantUsageError(t, runBinary(t, bin, env, args...), "an unknown config key", cfgPath, "no_such_key")
			}
		})
	}
}

// process is a started binary.
type process struct {
	t    *testing.T
	cmd  *exec.Cmd
	out  *os.File
	done chan error
}

func startBinary(t *testing.T, bin string, env []string, args ...string) *process {
	t.Helper()
	out, err := os.Create(filepath.Join(t.TempDir(), "log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &process{t: t, cmd: cmd, out: out, done: make(chan error, 1)}
	go func() { p.done <- cmd.Wait() }()
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			<-p.done
		}
		out.Close()
	})
	return p
}

func (p *process) log() string {
	b, _ := os.ReadFile(p.out.Name())
	return string(b)
}

// waitHTTP waits until url answers 200 with a body holding want.
func (p *process) waitHTTP(url, want string, timeout time.Duration) (string, error) {
	client := &http.Client{Timeout: 5 * time.Second}
	deadline := time.Now().Add(timeout)
	var last error
	for time.Now().Before(deadline) {
		select {
		case err := <-p.done:
			p.done <- err
			return "", fmt.Errorf("exited (%v) before answering on %s", err, url)
		default:
		}
		resp, err := client.Get(url)
		if err == nil {
			var b bytes.Buffer
			b.ReadFrom(resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK && strings.Contains(b.String(), want) {
				return b.String(), nil
			}
			err = fmt.Errorf("%s: %s", url, resp.Status)
		}
		last = err
		time.Sleep(100 * time.Millisecond)
	}
	return "", fmt.Errorf("no answer on %s within %s: %v", url, timeout, last)
}

// waitLog waits until the log holds a line with want.
func (p *process) waitLog(want string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		sc := bufio.NewScanner(strings.NewReader(p.log()))
		for sc.Scan() {
			if strings.Contains(sc.Text(), want) {
				return nil
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	return fmt.Errorf("no log line with %s within %s", want, timeout)
}

// stop sends SIGTERM and waits for the exit status.
func (p *process) stop(timeout time.Duration) (int, error) {
	p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-p.done:
		if err == nil {
			return 0, nil
		}
		if ee, ok := err.(*exec.ExitError); ok {
			return ee.ExitCode(), nil
		}
		return -1, err
	case <-time.After(timeout):
		return -1, fmt.Errorf("still running %s after SIGTERM", timeout)
	}
}

func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}
