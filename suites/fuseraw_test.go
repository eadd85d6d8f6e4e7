package suites

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// TestRawClient runs the raw client's phases on a plain directory: what
// it creates, reads and deletes is what bonnieOp would, and a failed
// system call ends the phase with the file and the error.
func TestRawClient(t *testing.T) {
	dir := t.TempDir()
	files := []string{filepath.Join(dir, "a"), filepath.Join(dir, "b"), filepath.Join(dir, "c")}
	sizes := []int{0, 1, 1}
	c, err := startRawClient(bonnieSpec{Files: files, Sizes: sizes, MaxBytes: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer c.close()

	elapsed, lat, err := c.phase("create", []int{0, 1, 2})
	if err != nil {
		t.Fatal(err)
	}
	if len(lat) != 3 || elapsed <= 0 || lat.max() > elapsed {
		t.Errorf("create: %d latencies (max %v) in %v, want 3 within the phase", len(lat), lat.max(), elapsed)
	}
	// The client runs on the first CPU this process may use, every thread.
	want, _ := rawCPUs()
	tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", c.cmd.Process.Pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, task := range tasks {
		tid, _ := strconv.Atoi(task.Name())
		var set unix.CPUSet
		if err := unix.SchedGetaffinity(tid, &set); err != nil {
			t.Fatal(err)
		}
		if set.Count() != 1 || !set.IsSet(want) {
			t.Errorf("client thread %d may run on %d CPUs (CPU %d: %v), want CPU %d only", tid, set.Count(), want, set.IsSet(want), want)
		}
	}
	for i, f := range files {
		st, err := os.Stat(f)
		if err != nil {
			t.Fatal(err)
		}
		if st.Size() != int64(sizes[i]) || st.Mode().Perm() != 0o644&^umask() {
			t.Errorf("%s: size %d mode %v, want %d bytes and 0644 less the umask", f, st.Size(), st.Mode(), sizes[i])
		}
	}
	if _, lat, err := c.phase("read", []int{2, 0, 1}); err != nil || len(lat) != 3 {
		t.Errorf("read: %d latencies, %v", len(lat), err)
	}
	// O_EXCL: a second create of a file fails, and says which.
	if _, _, err := c.phase("create", []int{1}); err == nil || !strings.Contains(err.Error(), files[1]) ||
		!strings.Contains(err.Error(), syscall.EEXIST.Error()) {
		t.Errorf("second create of %s: %v, want its EEXIST", files[1], err)
	}
	if _, _, err := c.phase("delete", []int{0, 1, 2}); err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		if _, err := os.Stat(f); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s after delete: %v, want it gone", f, err)
		}
	}
	if _, _, err := c.phase("read", []int{0}); err == nil || !strings.Contains(err.Error(), syscall.ENOENT.Error()) {
		t.Errorf("read of a deleted file: %v, want ENOENT", err)
	}
	// A file outside the spec is refused, not read past the end.
	if _, _, err := c.phase("read", []int{3}); err == nil {
		t.Error("read of file 3 of 3: no error")
	}
	// The client lives on after an error.
	if _, _, err := c.phase("create", []int{2}); err != nil {
		t.Errorf("create after errors: %v", err)
	}
}

// A spec whose sizes are out of its bounds is refused, naming the file,
// and no client is started.
func TestRawClientRefusesBadSizes(t *testing.T) {
	f := filepath.Join(t.TempDir(), "a")
	for _, spec := range []bonnieSpec{
		{Files: []string{f}, Sizes: []int{-1}, MaxBytes: 1},
		{Files: []string{f}, Sizes: []int{2}, MaxBytes: 1},
	} {
		c, err := startRawClient(spec)
		if err == nil {
			c.close()
			t.Errorf("sizes %v of at most %d: started", spec.Sizes, spec.MaxBytes)
		} else if !strings.Contains(err.Error(), f) {
			t.Errorf("sizes %v: %v, want the file named", spec.Sizes, err)
		}
	}
	if _, err := startRawClient(bonnieSpec{Files: []string{f}, Sizes: nil, MaxBytes: 1}); err == nil {
		t.Error("no sizes for one file: started")
	}
}

func umask() os.FileMode {
	m := unix.Umask(0)
	unix.Umask(m)
	return os.FileMode(m)
}

// TestRawFuseServer mounts the raw server on a directory, with one server
// thread and with four, and checks the passthrough through the kernel's
// FUSE client: what is written through it is in the backing directory and
// reads back, attributes and errors pass through, and unmounting ends the
// server cleanly. The raw client then runs bonnie's phases on it.
func TestRawFuseServer(t *testing.T) {
	needLocal(t, "fuse")
	for _, threads := range []int{1, 4} {
		backing, mnt := t.TempDir(), t.TempDir()
		stop, err := startFuseServer(backing, mnt, threads, true)
		if err != nil {
			t.Fatal(err)
		}
		stopped := false
		defer func() {
			if !stopped {
				stop()
			}
		}()
		var st unix.Statfs_t
		if err := unix.Statfs(mnt, &st); err != nil || st.Type != unix.FUSE_SUPER_MAGIC {
			t.Fatalf("%d threads: statfs of the mount: type %#x, %v; want FUSE's", threads, st.Type, err)
		}

		if err := os.Mkdir(filepath.Join(mnt, "d"), 0o750); err != nil {
			t.Fatal(err)
		}
		f := filepath.Join(mnt, "d", "f")
		if err := os.WriteFile(f, []byte("hello"), 0o600); err != nil {
			t.Fatal(err)
		}
		if b, err := os.ReadFile(filepath.Join(backing, "d", "f")); err != nil || string(b) != "hello" {
			t.Errorf("%d threads: the backing file holds %q (%v), want what was written through FUSE", threads, b, err)
		}
		if b, err := os.ReadFile(f); err != nil || string(b) != "hello" {
			t.Errorf("%d threads: read back %q (%v)", threads, b, err)
		}
		if err := os.Truncate(f, 2); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(f, 0o640); err != nil {
			t.Fatal(err)
		}
		if fi, err := os.Stat(f); err != nil || fi.Size() != 2 || fi.Mode().Perm() != 0o640 {
			t.Errorf("%d threads: after truncate and chmod: %v %v, want 2 bytes, 0640", threads, fi, err)
		}
		if _, err := unix.Getxattr(f, "user.none", make([]byte, 16)); !errors.Is(err, unix.ENODATA) && !errors.Is(err, unix.ENOTSUP) {
			t.Errorf("%d threads: getxattr of a missing attribute: %v, want the backing file system's ENODATA or ENOTSUP", threads, err)
		}
		if n, err := unix.Listxattr(f, make([]byte, 256)); err != nil && !errors.Is(err, unix.ENOTSUP) || n < 0 {
			t.Errorf("%d threads: listxattr: %d, %v", threads, n, err)
		}
		if _, err := os.OpenFile(f, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600); !errors.Is(err, os.ErrExist) {
			t.Errorf("%d threads: O_EXCL create of an existing file: %v, want EEXIST", threads, err)
		}
		if err := os.Remove(f); err != nil {
			t.Fatal(err)
		}
		if _, err := os.Stat(f); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%d threads: stat after remove: %v, want ENOENT", threads, err)
		}
		// A new file at the removed one's path is a new file.
		if err := os.WriteFile(f, []byte("x"), 0o600); err != nil {
			t.Fatal(err)
		}
		if b, err := os.ReadFile(f); err != nil || string(b) != "x" {
			t.Errorf("%d threads: the file made again reads %q (%v)", threads, b, err)
		}
		if err := os.Remove(f); err != nil {
			t.Fatal(err)
		}
		if err := os.Remove(filepath.Join(mnt, "d")); err != nil {
			t.Fatal(err)
		}

		files := []string{filepath.Join(mnt, "a"), filepath.Join(mnt, "b")}
		c, err := startRawClient(bonnieSpec{Files: files, Sizes: []int{1, 0}, MaxBytes: 1})
		if err != nil {
			t.Fatal(err)
		}
		for _, op := range []string{"create", "read", "delete"} {
			if _, lat, err := c.phase(op, []int{1, 0}); err != nil || len(lat) != 2 {
				t.Errorf("%d threads: %s through FUSE: %d latencies, %v", threads, op, len(lat), err)
			}
		}
		c.close()

		stopped = true
		if err := stop(); err != nil {
			t.Errorf("%d threads: the server's exit: %v", threads, err)
		}
		if err := unix.Statfs(mnt, &st); err != nil || st.Type == unix.FUSE_SUPER_MAGIC {
			t.Errorf("%d threads: still FUSE after stop (%v)", threads, err)
		}
	}
}
