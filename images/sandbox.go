package images

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/user"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// BuildUser is the unprivileged account that kernel builds run as when
// patchbot runs as root. It is created on first use.
const BuildUser = "patchbot-build"

// sandbox runs untrusted code (the kernel's Makefiles, Kconfig and host
// tools, all of which a patch can change) with no network, as an
// unprivileged user, with a time limit.
type sandbox struct {
	uid, gid int  // the build user; meaningful when root
	root     bool // whether patchbot itself runs as root
}

// newSandbox finds or creates the build user. As a normal user the build
// runs in a new user namespace instead, mapped to that user.
func newSandbox() (*sandbox, error) {
	for _, tool := range []string{"unshare", "setpriv", "make", "git"} {
		if _, err := exec.LookPath(tool); err != nil {
			return nil, infra("looking for "+tool, err)
		}
	}
	if os.Geteuid() != 0 {
		return &sandbox{uid: os.Getuid(), gid: os.Getgid()}, nil
	}
	u, err := user.Lookup(BuildUser)
	if err != nil {
		out, cerr := exec.Command("useradd", "--system", "--no-create-home", "--home-dir", "/nonexistent",
			"--shell", "/usr/sbin/nologin", BuildUser).CombinedOutput()
		if u, err = user.Lookup(BuildUser); err != nil {
			// A machine without useradd still has nobody.
			if u, err = user.Lookup("nobody"); err != nil {
				return nil, infra("creating build user", fmt.Errorf("%v: %s", cerr, out))
			}
		}
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	return &sandbox{uid: uid, gid: gid, root: true}, nil
}

// own gives a directory the build user will write to (object tree, ccache).
func (s *sandbox) own(dir string) error {
	if !s.root {
		return nil
	}
	return infra("chown "+dir, os.Chown(dir, s.uid, s.gid))
}

// bind shows the directory From at the path To, inside the build's own
// mount namespace only. A patched build runs in the base build's path this
// way, so that the absolute paths the base's object tree recorded (objtool
// and other host tools are built with them) name the patched sources, and
// make rebuilds only what the series changed.
type bind struct{ From, To string }

// command wraps argv: unshare --net (and --mount for a bind) for no
// network, then setpriv to drop to the build user with no capabilities.
// env is the whole environment; dir the working directory.
func (s *sandbox) command(ctx context.Context, dir string, env []string, b *bind, argv ...string) *exec.Cmd {
	// A new PID namespace whose init dies with unshare (--kill-child), and
	// unshare dies with us (Pdeathsig): a killed patchbot or test binary
	// leaves no make running on in a directory the next build deletes.
	full := []string{"unshare", "--net", "--pid", "--fork", "--kill-child"}
	if !s.root {
		full = append(full, "--user", "--map-root-user")
	}
	if b != nil {
		// The mount and the cd happen inside the new namespace, before the
		// privileges go. unshare makes the namespace's mounts private.
		full = append(full, "--mount", "--", "sh", "-c", `mount --bind "$1" "$2" && cd "$3" && shift 3 && exec "$@"`,
			"sh", b.From, b.To, dir)
		dir = "/"
	} else {
		full = append(full, "--")
	}
	if s.root {
		full = append(full, "setpriv",
			"--reuid="+strconv.Itoa(s.uid), "--regid="+strconv.Itoa(s.gid), "--clear-groups",
			"--inh-caps=-all", "--bounding-set=-all", "--no-new-privs", "--")
	}
	full = append(full, argv...)
	cmd := exec.CommandContext(ctx, full[0], full[1:]...)
	cmd.Dir = dir
	cmd.Env = env
	// The whole process group goes when the time limit is reached, not only
	// unshare: make and the compilers beneath it too.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 10 * time.Second
	return cmd
}

// errTimeout marks a build stopped by its time limit.
var errTimeout = errors.New("time limit reached")

// run runs a sandboxed command, appending its output to log.
func (s *sandbox) run(ctx context.Context, log io.Writer, dir string, env []string, b *bind, argv ...string) error {
	cmd := s.command(ctx, dir, env, b, argv...)
	cmd.Stdout = log
	cmd.Stderr = log
	err := cmd.Run()
	if err != nil && ctx.Err() != nil {
		// Stopped by us (time limit, SIGINT): not the code's own failure.
		if ctx.Err() == context.DeadlineExceeded {
			return errTimeout
		}
		return ctx.Err()
	}
	return err
}

// git runs git as patchbot itself (trusted: no hooks run in our
// repositories) and returns its combined output.
func git(ctx context.Context, dir string, args ...string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, "git", args...)
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
