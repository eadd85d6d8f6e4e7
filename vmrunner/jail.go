package vmrunner

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// VMUser is the account QEMU runs as when patchbot runs as root. It is
// created on first use, with a group of its own.
const VMUser = "patchbot-vm"

// jail starts QEMU with as little as it needs: as an unprivileged user
// (setpriv, when patchbot is root), with limits (prlimit), and in new
// namespaces that show it only /usr, a fresh /proc and /dev, and the
// file descriptors it is handed (bwrap): no network, none of the host's
// files, processes or IPC. QEMU's own seccomp filter (-sandbox on) is
// added to its command line by the backend.
type jail struct {
	root     bool // patchbot runs as root: drop to uid/gid
	uid, gid int
	kvmGID   int // the group of /dev/kvm, kept for KVM; -1 if none
	setpriv  string
	prlimit  string
	bwrap    string
}

var (
	jailMu    sync.Mutex
	jailCache = map[string]*jail{} // by user, checked once per process
)

// newJail finds the tools and the user, and checks once that a jailed
// command runs on this host (user namespaces may be disabled).
func newJail(ctx context.Context, name string) (*jail, error) {
	if name == "" {
		name = VMUser
	}
	jailMu.Lock()
	defer jailMu.Unlock()
	if j, ok := jailCache[name]; ok {
		return j, nil
	}
	j := &jail{root: os.Geteuid() == 0, uid: os.Getuid(), gid: os.Getgid(), kvmGID: -1}
	for _, t := range []struct {
		dst *string
		bin string
		pkg string
	}{{&j.setpriv, "setpriv", "util-linux"}, {&j.prlimit, "prlimit", "util-linux"}, {&j.bwrap, "bwrap", "bubblewrap"}} {
		p, err := exec.LookPath(t.bin)
		if err != nil {
			return nil, &InfraError{Op: "sandbox for QEMU", Err: fmt.Errorf("%s not installed (Debian package %s): %w", t.bin, t.pkg, err)}
		}
		*t.dst = p
	}
	if j.root {
		u, err := vmUser(name)
		if err != nil {
			return nil, &InfraError{Op: "sandbox for QEMU: user " + name, Err: err}
		}
		j.uid, _ = strconv.Atoi(u.Uid)
		j.gid, _ = strconv.Atoi(u.Gid)
		if j.uid == 0 {
			return nil, &InfraError{Op: "sandbox for QEMU", Err: fmt.Errorf("user %s is root", name)}
		}
	}
	if st, err := os.Stat("/dev/kvm"); err == nil {
		if g, ok := statGID(st); ok {
			j.kvmGID = g
		}
	}
	// One jailed command proves the host allows it, with a clear error
	// now rather than a puzzling QEMU failure later.
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	argv := j.argv([]string{"/usr/bin/true"}, false, 256)
	var out bytes.Buffer
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return nil, &InfraError{Op: "sandbox for QEMU: trying " + shellQuote(argv), Err: err, Output: out.Bytes()}
	}
	jailCache[name] = j
	return j, nil
}

// vmUser looks the account up, creating it if it does not exist.
func vmUser(name string) (*user.User, error) {
	u, err := user.Lookup(name)
	if err == nil {
		return u, nil
	}
	out, cerr := exec.Command("useradd", "--system", "--user-group", "--no-create-home",
		"--home-dir", "/nonexistent", "--shell", "/usr/sbin/nologin", name).CombinedOutput()
	if u, err := user.Lookup(name); err == nil {
		return u, nil // made by us, or by another process meanwhile
	}
	return nil, fmt.Errorf("creating it: %v: %s", cerr, bytes.TrimSpace(out))
}

// argv wraps a command: setpriv (as root) drops to the VM user with no
// capabilities, no supplementary groups but /dev/kvm's for KVM, and no
// way to gain privileges; prlimit bounds the address space (guest RAM,
// QEMU and its translation cache), forbids writing files (QEMU writes
// none: the console is a pipe, the disks are read-only) and core dumps
// (they would hold guest memory); bwrap gives new user, mount, PID,
// network, IPC, UTS and cgroup namespaces with /usr read-only, and dies
// with its parent.
func (j *jail) argv(cmd []string, kvm bool, asMiB int) []string {
	var a []string
	if j.root {
		groups := "--clear-groups"
		if kvm && j.kvmGID >= 0 {
			groups = "--groups=" + strconv.Itoa(j.kvmGID)
		}
		a = append(a, j.setpriv, "--reuid="+strconv.Itoa(j.uid), "--regid="+strconv.Itoa(j.gid), groups,
			"--inh-caps=-all", "--bounding-set=-all", "--no-new-privs", "--")
	}
	a = append(a, j.prlimit, fmt.Sprintf("--as=%d", uint64(asMiB)<<20), "--fsize=0", "--core=0", "--")
	a = append(a, j.bwrap, "--unshare-all", "--die-with-parent", "--new-session",
		"--ro-bind", "/usr", "/usr", "--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp",
		"--ro-bind-try", "/etc/ld.so.cache", "/etc/ld.so.cache")
	// Merged /usr: /bin, /lib… are links into it; elsewhere directories.
	for _, d := range []string{"/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"} {
		if target, err := os.Readlink(d); err == nil {
			a = append(a, "--symlink", target, d)
		} else if st, err := os.Stat(d); err == nil && st.IsDir() {
			a = append(a, "--ro-bind", d, d)
		}
	}
	// A QEMU installed outside /usr (e.g. /opt/qemu/bin) needs its tree.
	if bin := cmd[0]; !strings.HasPrefix(bin, "/usr/") && filepath.IsAbs(bin) {
		prefix := filepath.Dir(filepath.Dir(bin))
		a = append(a, "--ro-bind", prefix, prefix)
	}
	if kvm {
		a = append(a, "--dev-bind", "/dev/kvm", "/dev/kvm")
	}
	a = append(a, "--chdir", "/", "--")
	return append(a, cmd...)
}

func statGID(st os.FileInfo) (int, bool) {
	sys, ok := st.Sys().(*syscall.Stat_t)
	if !ok {
		return 0, false
	}
	return int(sys.Gid), true
}
