package vmrunner

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// defaultRunDir is where host facts are kept until reboot: /run is a
// tmpfs only root writes, cleared at boot; a user's runtime directory is
// theirs alone.
func defaultRunDir() string {
	if os.Geteuid() == 0 {
		return "/run/patchbot"
	}
	if d := os.Getenv("XDG_RUNTIME_DIR"); d != "" {
		return filepath.Join(d, "patchbot")
	}
	if d, err := os.UserCacheDir(); err == nil {
		return filepath.Join(d, "patchbot", "run")
	}
	return ""
}

// privateDir makes dir (mode 0700) if needed and checks that nobody but
// us can change what is in it: it is ours, not a link, and neither it
// nor any parent is writable by others (a sticky /tmp aside).
func privateDir(dir string) error {
	if dir == "" {
		return fmt.Errorf("no directory")
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	st, err := os.Lstat(dir)
	if err != nil {
		return err
	}
	sys := st.Sys().(*syscall.Stat_t)
	if !st.IsDir() || int(sys.Uid) != os.Geteuid() || st.Mode().Perm()&0o022 != 0 {
		return fmt.Errorf("%s is not a directory of our own that only we can write (%s, uid %d)", dir, st.Mode(), sys.Uid)
	}
	for p := filepath.Dir(dir); ; p = filepath.Dir(p) {
		st, err := os.Stat(p)
		if err != nil {
			return err
		}
		sys := st.Sys().(*syscall.Stat_t)
		if st.Mode().Perm()&0o002 != 0 && st.Mode()&os.ModeSticky == 0 || sys.Uid != 0 && int(sys.Uid) != os.Geteuid() {
			return fmt.Errorf("%s lies under %s, which others can change", dir, p)
		}
		if p == "/" || p == "." {
			return nil
		}
	}
}

// bootID names this boot of the host: a verdict is for this boot only.
func bootID() string {
	id, _ := os.ReadFile("/proc/sys/kernel/random/boot_id")
	return strings.TrimSpace(string(id))
}

// readPrivate reports whether path is a regular file of ours (not a
// link, not writable by others); anything else is ignored as planted.
func readPrivate(path string) bool {
	st, err := os.Lstat(path)
	if err != nil || !st.Mode().IsRegular() || st.Mode().Perm()&0o022 != 0 {
		return false
	}
	return int(st.Sys().(*syscall.Stat_t).Uid) == os.Geteuid()
}

// writePrivate writes a small file 0600 without following a link.
func writePrivate(path string, data []byte) error {
	fd, err := unix.Open(path, unix.O_WRONLY|unix.O_CREAT|unix.O_TRUNC|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return &os.PathError{Op: "create", Path: path, Err: err}
	}
	f := os.NewFile(uintptr(fd), path)
	_, err = f.Write(data)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}
