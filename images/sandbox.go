package images

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/user"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// BuildUser is the unprivileged account that kernel builds run as when
// patchbot runs as root. It is created on first use.
const BuildUser = "patchbot-build"

// Every make and merge_config.sh run, base or patched, goes through one
// sandbox made with Debian's bubblewrap (bwrap): the Makefiles, Kconfig,
// host tools and #include lines all come from the tree, and a patched
// tree is anyone's code. The command gets:
//
//   - new user, mount, PID, network (only lo), IPC, UTS and cgroup
//     namespaces, with nested user namespaces disabled, so that no process
//     in it ever holds a capability that matters;
//   - /usr (and the /bin, /lib... links to it) and the few files of /etc
//     the toolchain reads, read-only; a fresh /proc; a minimal /dev; a
//     private, bounded /tmp; a read-only root;
//   - its source tree read-only and its object tree writable, at the
//     paths the base build used; the compiler cache writable for a base
//     build and absent from a patched one;
//   - nothing else: no state directory, config, password file, home, /var,
//     /run, /sys, other builds or the cache around it;
//   - limits (Limits) on memory, processes, file size, /tmp and wall time;
//     the sandbox dies with patchbot.
//
// As root, the command runs as BuildUser: a root-made private mount
// namespace first shows the build's directories at a neutral path, so
// that the cache itself stays 0700 and closed to that user too, joins the
// build's cgroup v1 memory and pids groups, drops to BuildUser, and only
// then starts bwrap. As a normal user, bwrap runs as that user, and the
// limits are rlimits only.

// Limits bound what one build may use. A zero field takes its value from
// DefaultLimits.
type Limits struct {
	// Memory is the memory of the whole build (a cgroup v1 memory limit,
	// when patchbot runs as root and the host mounts the controller) and
	// the address space of each of its processes (RLIMIT_AS).
	Memory int64
	// Processes counts processes and threads at once (cgroup v1 pids when
	// root, RLIMIT_NPROC inside the sandbox always: at twice it behind a
	// pids group). A build stops at its first fork the group refuses.
	Processes int
	// FileSize is the largest file the build may write (RLIMIT_FSIZE).
	FileSize int64
	// Tmp is the size of the private /tmp.
	Tmp int64
	// Log is how much of the build's output the build log keeps; the rest
	// is counted and dropped.
	Log int64
	// Output bounds the object tree in all (a patched build's starts as a
	// copy of the base's, 180 MB for the default kernel), and Files the
	// entries in it: a watchdog stops a build that passes either
	// (RLIMIT_FSIZE bounds one file only).
	Output int64
	Files  int
}

// DefaultLimits fit the default kernel on two cores with room to spare:
// its cold build peaks at well under 1 GiB, 30 processes, a 60 MB vmlinux
// and a 1 MB log.
var DefaultLimits = Limits{
	Memory:    4 << 30,
	Processes: 512,
	FileSize:  4 << 30,
	Tmp:       512 << 20,
	Log:       16 << 20,
	Output:    8 << 30,
	Files:     200_000,
}

func (l Limits) withDefaults() Limits {
	d := DefaultLimits
	return Limits{
		Memory:    positiveOr(l.Memory, d.Memory),
		Processes: positiveOr(l.Processes, d.Processes),
		FileSize:  positiveOr(l.FileSize, d.FileSize),
		Tmp:       positiveOr(l.Tmp, d.Tmp),
		Log:       positiveOr(l.Log, d.Log),
		Output:    positiveOr(l.Output, d.Output),
		Files:     positiveOr(l.Files, d.Files),
	}
}

// positiveOr is v when it is set (above zero), else the default d.
func positiveOr[T int | int64](v, d T) T {
	if v > 0 {
		return v
	}
	return d
}

// sandboxUID is the build's user and group id inside its user namespace.
const sandboxUID = "1000"

// sandbox runs commands of a build in bwrap.
type sandbox struct {
	root     bool  // patchbot runs as root: stage the mounts, drop to the build user
	uid, gid int   // who bwrap runs as: the build user, or patchbot's own ids
	userns   error // nil when bwrap can make user namespaces here, else why not
	cgroups  bool  // the cgroup v1 memory and pids controllers are ours
	limits   Limits
	stage    string // root: an empty directory of patchbot's own, a mount point in private namespaces
	// bare runs the command with only the bind mount a patched build
	// needs, as patchbot itself: the benchmark's "without the sandbox".
	bare bool
}

var (
	probeOnce sync.Once
	probeErr  error
)

// newSandbox finds the tools and the build user (creating it as root) and
// checks once per process that this host gives bwrap user namespaces.
// stage is a directory the sandbox may use as a mount point.
func newSandbox(limits Limits, stage string) (*sandbox, error) {
	for _, tool := range []string{"bwrap", "prlimit", "unshare", "setpriv", "make", "git"} {
		if _, err := exec.LookPath(tool); err != nil {
			return nil, infra("looking for "+tool+" (scripts/install-deps.sh installs it)", err)
		}
	}
	s := &sandbox{limits: limits.withDefaults(), stage: stage, uid: os.Getuid(), gid: os.Getgid()}
	if os.Geteuid() == 0 {
		uid, gid, err := buildUser()
		if err != nil {
			return nil, err
		}
		s.root, s.uid, s.gid = true, uid, gid
		s.cgroups = cgroupsUsable()
		if err := os.MkdirAll(stage, 0o700); err != nil {
			return nil, infra("creating the sandbox's mount point", err)
		}
	}
	probeOnce.Do(func() { probeErr = s.probe() })
	s.userns = probeErr
	return s, nil
}

// buildUser finds or creates BuildUser.
func buildUser() (uid, gid int, err error) {
	u, err := user.Lookup(BuildUser)
	if err != nil {
		out, cerr := exec.Command("useradd", "--system", "--no-create-home", "--home-dir", "/nonexistent",
			"--shell", "/usr/sbin/nologin", BuildUser).CombinedOutput()
		if u, err = user.Lookup(BuildUser); err != nil {
			return 0, 0, infra("creating build user "+BuildUser, fmt.Errorf("%v: %s", cerr, out))
		}
	}
	uid, _ = strconv.Atoi(u.Uid)
	gid, _ = strconv.Atoi(u.Gid)
	if uid == 0 {
		return 0, 0, infra("checking build user", fmt.Errorf("%s has uid 0", BuildUser))
	}
	return uid, gid, nil
}

// probe runs the smallest sandbox once: on a host without unprivileged
// user namespaces bwrap says why, and that is what an untrusted build is
// refused with.
func (s *sandbox) probe() error {
	cmd := exec.Command("bwrap", append(append(s.namespaceArgs(), systemArgs()...), "--", "/usr/bin/true")...)
	if s.root {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{
			Uid: uint32(s.uid), Gid: uint32(s.gid), Groups: []uint32{}}}
	}
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("%w: bwrap cannot make a user namespace here (%v: %s); allow unprivileged user namespaces (sysctl user.max_user_namespaces, kernel.unprivileged_userns_clone=1, kernel.apparmor_restrict_unprivileged_userns=0)",
			ErrNoSandbox, err, bytes.TrimSpace(out))
	}
	return nil
}

func (s *sandbox) namespaceArgs() []string {
	return []string{"--unshare-all", "--unshare-user", "--disable-userns", "--die-with-parent", "--new-session",
		"--uid", sandboxUID, "--gid", sandboxUID, "--hostname", "patchbot-build"}
}

// own gives a directory the build writes to (object tree, ccache) to the
// user the sandbox runs as.
func (s *sandbox) own(dir string) error {
	if !s.root {
		return nil
	}
	return infra("chown "+dir, os.Chown(dir, s.uid, s.gid))
}

// mount shows the host directory src at dst inside the sandbox.
type mount struct {
	src, dst string
	rw       bool
}

// view is what one sandboxed command sees of the build's own files.
type view struct {
	mounts []mount
	dir    string // working directory, a path inside
	// out is the host path of the object tree: when a build fails, its
	// file system is checked for room.
	out string
	// untrusted marks a patched build: refused without user namespaces.
	untrusted bool
}

// systemArgs show the toolchain: /usr and the top-level links or
// directories beside it, and the few files of /etc that the dynamic
// linker and Debian's alternatives (awk) need.
func systemArgs() []string {
	args := []string{"--ro-bind", "/usr", "/usr"}
	for _, d := range []string{"/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"} {
		fi, err := os.Lstat(d)
		switch {
		case err != nil:
		case fi.Mode()&os.ModeSymlink != 0:
			if target, err := os.Readlink(d); err == nil {
				args = append(args, "--symlink", target, d)
			}
		case fi.IsDir():
			args = append(args, "--ro-bind", d, d)
		}
	}
	for _, p := range []string{"/etc/alternatives", "/etc/ld.so.cache", "/etc/ld.so.conf", "/etc/ld.so.conf.d"} {
		args = append(args, "--ro-bind-try", p, p)
	}
	return args
}

// stageScript runs as root in a new private mount namespace: it mounts a
// small tmpfs on the stage directory, binds each of the build's
// directories into it, moves it to /tmp (where the build user can reach
// it; the cache above stays 0700), joins the cgroups and execs the rest.
// Arguments: stage, the number of directories, the directories, the
// cgroup.procs files, "--", the command.
const stageScript = `set -eu
stage=$1; n=$2; shift 2
mount -t tmpfs -o mode=0755,size=64k,nosuid,nodev patchbot-stage "$stage"
i=0
while [ "$i" -lt "$n" ]; do
	mkdir "$stage/$i"
	mount --bind "$1" "$stage/$i"
	shift; i=$((i + 1))
done
mount --move "$stage" /tmp
while [ "$1" != -- ]; do echo $$ > "$1"; shift; done
shift
exec "$@"`

// command builds the command line for argv in view v. env is the whole
// environment; status, when set, is given to bwrap as --json-status-fd 3.
func (s *sandbox) command(ctx context.Context, v view, env []string, cg *cgroup, argv []string) (*exec.Cmd, error) {
	if s.bare {
		return s.bareCommand(ctx, v, env, argv), nil
	}
	if s.userns != nil {
		return nil, infra("sandboxing the build", s.userns)
	}
	bw := append([]string{"bwrap"}, s.namespaceArgs()...)
	bw = append(bw, systemArgs()...)
	bw = append(bw, "--proc", "/proc", "--dev", "/dev",
		"--size", "16777216", "--tmpfs", "/dev/shm", "--remount-ro", "/dev")
	var staged []string
	for i, m := range v.mounts {
		src := m.src
		if s.root {
			src = "/tmp/" + strconv.Itoa(i)
			staged = append(staged, m.src)
		}
		op := "--ro-bind"
		if m.rw {
			op = "--bind"
		}
		bw = append(bw, op, src, m.dst)
	}
	// /tmp after the mounts: as root the staged directories are under the
	// host side's /tmp until bwrap has bound them.
	bw = append(bw, "--size", strconv.FormatInt(s.limits.Tmp, 10), "--tmpfs", "/tmp",
		"--remount-ro", "/", "--chdir", v.dir, "--json-status-fd", "3", "--")
	bw = append(bw, s.limitArgs(cg)...)
	bw = append(bw, argv...)

	full := bw
	if s.root {
		full = []string{"unshare", "--mount", "--propagation", "private", "--", "/bin/sh", "-c", stageScript, "sh",
			s.stage, strconv.Itoa(len(staged))}
		full = append(full, staged...)
		if cg != nil {
			full = append(full, cg.procs()...)
		}
		full = append(full, "--", "setpriv", "--reuid="+strconv.Itoa(s.uid), "--regid="+strconv.Itoa(s.gid),
			"--clear-groups", "--")
		full = append(full, bw...)
	}
	cmd := exec.CommandContext(ctx, full[0], full[1:]...)
	cmd.Dir = "/"
	cmd.Env = env
	// The whole process group goes when the time limit is reached; bwrap
	// takes the sandbox with it (--die-with-parent, and the end of its PID
	// namespace). Pdeathsig covers patchbot itself being killed.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 10 * time.Second
	return cmd, nil
}

// limitArgs wrap the command in prlimit, inside the sandbox: RLIMIT_NPROC
// then counts the processes of the sandbox's own user namespace only.
// With a pids group (cg), the group is the process limit and RLIMIT_NPROC,
// at twice it, only a second wall: the kernel checks the rlimit first, and
// a fork it refuses is one the group's counter, which stops the build at
// once (cgroup.watchForks), never sees.
func (s *sandbox) limitArgs(cg *cgroup) []string {
	nproc := int64(s.limits.Processes)
	if cg != nil {
		nproc *= 2
	}
	lim := func(name string, res int, want int64) string {
		var cur syscall.Rlimit
		if err := syscall.Getrlimit(res, &cur); err == nil && cur.Max != ^uint64(0) && int64(cur.Max) < want {
			want = int64(cur.Max) // a limit cannot be raised past the hard one
		}
		return fmt.Sprintf("--%s=%d:%d", name, want, want)
	}
	return []string{"prlimit",
		lim("as", syscall.RLIMIT_AS, s.limits.Memory),
		lim("nproc", 6 /* RLIMIT_NPROC */, nproc),
		lim("fsize", syscall.RLIMIT_FSIZE, s.limits.FileSize),
		"--core=0", "--"}
}

// bareCommand is the benchmark's baseline: the bind mounts a patched build
// needs (its tree on the base's path) and a /tmp like the sandbox's.
func (s *sandbox) bareCommand(ctx context.Context, v view, env []string, argv []string) *exec.Cmd {
	// A tmpfs on /tmp, as the sandbox gives the build, so that gcc's
	// temporary files do not go to the host's disk in the baseline alone.
	script := `while [ "$1" != -- ]; do mount --bind "$1" "$2"; shift 2; done; shift; mount -t tmpfs patchbot-bare-tmp /tmp; cd "$1"; shift; exec "$@"`
	full := []string{"unshare", "--mount", "--", "/bin/sh", "-euc", script, "sh"}
	for _, m := range v.mounts {
		if m.src != m.dst {
			full = append(full, m.src, m.dst)
		}
	}
	full = append(append(full, "--", v.dir), argv...)
	cmd := exec.CommandContext(ctx, full[0], full[1:]...)
	cmd.Env = env
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 10 * time.Second
	return cmd
}

// bwrapStatus is what bwrap's --json-status-fd said.
type bwrapStatus struct {
	ran  bool // the command was started: the sandbox was set up
	exit int  // its exit status, 128+N for signal N
}

// readStatus decodes bwrap's JSON status stream, bounded.
func readStatus(r io.Reader) bwrapStatus {
	var st bwrapStatus
	dec := json.NewDecoder(io.LimitReader(r, 64<<10))
	for {
		var doc map[string]any
		if err := dec.Decode(&doc); err != nil {
			return st
		}
		if code, ok := doc["exit-code"].(float64); ok {
			st.ran, st.exit = true, int(code)
		}
	}
}

// run runs argv in the sandbox with view v, streaming its output into log,
// and returns what happened, for rootCause to judge.
func (s *sandbox) run(ctx context.Context, log *buildLog, v view, env []string, argv ...string) *outcome {
	o := &outcome{op: strings.Join(argv, " "), limits: s.limits}
	if v.untrusted && s.userns != nil {
		o.err = s.userns
		return o
	}
	var cg *cgroup
	if s.cgroups && !s.bare {
		var err error
		if cg, err = newCgroup(s.limits); err != nil {
			o.err = err
			return o
		}
		defer cg.remove()
	}
	cmd, err := s.command(ctx, v, env, cg, argv)
	if err != nil {
		o.err = err
		return o
	}
	statusR, statusW, err := os.Pipe()
	if err != nil {
		o.err = err
		return o
	}
	defer statusR.Close()
	cmd.ExtraFiles = []*os.File{statusW}
	var startBytes int64
	if v.out != "" {
		startBytes, _ = treeUse(v.out, s.limits.Files)
		o.usage.FreeAtStart = freeBytes(v.out)
	}
	closeInherited()
	scan := log.begin()
	cmd.Stdout = log
	cmd.Stderr = log
	log.note("+ " + shellQuote(cmd.Args))
	err = cmd.Start()
	statusW.Close()
	if err != nil {
		o.err = err
		return o
	}
	status := make(chan bwrapStatus, 1)
	go func() { status <- readStatus(statusR) }()
	started := time.Now()
	stopBuild := func() { syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	var dog *watchdog
	if v.out != "" {
		dog = watchOutput(v.out, s.limits.Output, s.limits.Files, stopBuild)
	}
	forks := func() bool { return false }
	if cg != nil {
		forks = cg.watchForks(stopBuild)
	}
	o.wait = cmd.Wait()
	if dog != nil {
		o.overOutput, o.usage.Output, o.usage.Files = dog.finish()
	}
	o.overForks = forks()
	log.flushLine()
	if o.overForks {
		log.note(fmt.Sprintf("patchbot: stopped the build at its first refused fork (its process limit, %d)", s.limits.Processes))
	}
	if ps := cmd.ProcessState; ps != nil {
		// The CPU time of the command's whole tree. Bare, the processes
		// patchbot waited for are that tree. Through bwrap they are not
		// (bwrap exits without reaping its sandbox), so it is the build's
		// cpuacct group that says, where there is one.
		user, sys, how := ps.UserTime(), ps.SystemTime(), ""
		if cg != nil {
			if u, sy, ok := cg.cpuTime(); ok {
				user, sys, how = u, sy, " (its cgroup)"
			} else {
				how = " (what bwrap reaped: not the build's)"
			}
		}
		log.note(fmt.Sprintf("patchbot: %s after %.1fs, cpu user %.2fs sys %.2fs%s", ps, time.Since(started).Seconds(),
			user.Seconds(), sys.Seconds(), how))
	}
	o.ctx = ctx.Err()
	o.scan = scan
	if s.bare {
		o.status = bwrapStatus{ran: true}
		if exit, ok := o.wait.(*exec.ExitError); ok {
			o.status.exit = exit.ExitCode()
		}
	} else {
		select {
		case o.status = <-status:
		case <-time.After(5 * time.Second):
		}
	}
	if cg != nil {
		o.oomKills, o.pidsMax = cg.facts()
		o.usage.Memory = cg.peakMemory()
	}
	if v.out != "" {
		if !o.overOutput {
			o.usage.Output, o.usage.Files = treeUse(v.out, s.limits.Files)
		}
		o.usage.Grew = o.usage.Output - startBytes
	}
	o.usage.Duration = time.Since(started)
	log.record(o.usage)
	if o.wait != nil && v.out != "" {
		o.diskFull = diskFull(v.out)
	}
	return o
}

// closeInherited marks every file descriptor patchbot was started with
// (beyond 0, 1, 2) close-on-exec: Go's own are already, but one left open
// by whoever started patchbot would reach the sandbox through bwrap,
// which passes descriptors on.
func closeInherited() {
	entries, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return
	}
	for _, e := range entries {
		if fd, err := strconv.Atoi(e.Name()); err == nil && fd > 2 {
			syscall.CloseOnExec(fd)
		}
	}
}

// diskFull reports whether the file system holding dir has no room left
// for the build user: under 64 MiB or 1 % of it free.
func diskFull(dir string) bool {
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		return false
	}
	free := st.Bavail * uint64(st.Bsize)
	size := st.Blocks * uint64(st.Bsize)
	return free < 64<<20 || free < size/100
}

// shellQuote writes argv as one line a person can paste into a shell.
func shellQuote(argv []string) string {
	var b strings.Builder
	for i, a := range argv {
		if i > 0 {
			b.WriteByte(' ')
		}
		if a != "" && strings.IndexFunc(a, func(r rune) bool {
			return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("-_./=:,+@%", r))
		}) < 0 {
			b.WriteString(a)
			continue
		}
		b.WriteString("'" + strings.ReplaceAll(a, "'", `'\''`) + "'")
	}
	return b.String()
}

// git runs git as patchbot itself (trusted: no hooks run in our
// repositories) and returns its combined output. Automatic gc and
// maintenance are off: they would run beside a measurement (issue 15).
func git(ctx context.Context, dir string, args ...string) ([]byte, error) {
	full := append([]string{"-c", "gc.auto=0", "-c", "maintenance.auto=false"}, args...)
	cmd := exec.CommandContext(ctx, "git", full...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(),
		"GIT_AUTHOR_NAME=patchbot", "GIT_AUTHOR_EMAIL=patchbot@localhost",
		"GIT_COMMITTER_NAME=patchbot", "GIT_COMMITTER_EMAIL=patchbot@localhost",
		"GIT_TERMINAL_PROMPT=0")
	var out bytes.Buffer
	cmd.Stdout = &out
	cmd.Stderr = &out
	if err := cmd.Run(); err != nil {
		return out.Bytes(), fmt.Errorf("git %s: %w: %s", subcommand(args), err, bytes.TrimSpace(out.Bytes()))
	}
	return out.Bytes(), nil
}

// privateDir makes dir (and its parents) and closes it to everyone but
// patchbot: 0700. The sandbox never needs a path into the cache.
func privateDir(dir string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return infra("creating "+dir, err)
	}
	fi, err := os.Stat(dir)
	if err != nil {
		return infra("checking "+dir, err)
	}
	if fi.Mode().Perm()&0o077 != 0 {
		return infra("closing "+dir+" to others", os.Chmod(dir, fi.Mode().Perm()&0o700))
	}
	return nil
}

// subcommand is the git command of args, past "-c name=value" pairs and
// other options before it: the word an error names.
func subcommand(args []string) string {
	for i := 0; i < len(args); i++ {
		switch a := args[i]; {
		case a == "-c" || a == "-C":
			i++
		case strings.HasPrefix(a, "-"):
		default:
			return a
		}
	}
	return "(no command)"
}
