package suites

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/patchbot/patchbot/images/fsimage"
)

// ensureMounts mounts proc and sysfs when they are missing: in the guest
// the agent is PID 1 and the suites must not depend on what it set up.
func ensureMounts() error {
	os.MkdirAll(os.TempDir(), 0o1777) // the guest root may have no /tmp
	for _, m := range []struct{ dir, fstype, probe string }{
		{"/proc", "proc", "/proc/self"},
		{"/sys", "sysfs", "/sys/kernel"},
	} {
		if _, err := os.Stat(m.probe); err == nil {
			continue
		}
		os.MkdirAll(m.dir, 0o755)
		if err := unix.Mount(m.fstype, m.dir, m.fstype, 0, ""); err != nil {
			return fmt.Errorf("mounting %s on %s: %w", m.fstype, m.dir, err)
		}
	}
	return nil
}

// dropCaches writes back and drops the page, dentry and inode caches, so
// the next reads decompress again.
func dropCaches() error {
	unix.Sync()
	if err := os.WriteFile("/proc/sys/vm/drop_caches", []byte("3"), 0); err != nil {
		return fmt.Errorf("dropping caches (root needed): %w", err)
	}
	return nil
}

// Images are staged once per process into a tmpfs of their own (the seed
// measured an image in tmpfs, so that reads cost decompression, not I/O)
// and kept there across rounds; Release removes them.
var staged struct {
	sync.Mutex
	dir   string            // tmpfs mount point
	files map[string]string // source → staged copy
}

func stageImage(src string) (string, error) {
	staged.Lock()
	defer staged.Unlock()
	if p, ok := staged.files[src]; ok {
		return p, nil
	}
	if staged.dir == "" {
		dir, err := os.MkdirTemp("", "patchbot-stage-")
		if err != nil {
			return "", fmt.Errorf("staging image: %w", err)
		}
		if err := unix.Mount("tmpfs", dir, "tmpfs", 0, "mode=0755"); err != nil {
			os.Remove(dir)
			return "", fmt.Errorf("mounting tmpfs to stage the image (root needed): %w", err)
		}
		staged.dir = dir
		staged.files = map[string]string{}
	}
	in, err := os.Open(src)
	if err != nil {
		return "", fmt.Errorf("staging image: %w", err)
	}
	defer in.Close()
	dst := filepath.Join(staged.dir, fmt.Sprintf("image-%d.sqfs", len(staged.files)))
	out, err := os.Create(dst)
	if err != nil {
		return "", fmt.Errorf("staging image: %w", err)
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return "", fmt.Errorf("staging image %s into tmpfs: %w", src, err)
	}
	if err := out.Close(); err != nil {
		return "", fmt.Errorf("staging image: %w", err)
	}
	staged.files[src] = dst
	return dst, nil
}

// Release unmounts the staging tmpfs and removes the release trace's
// instruments. The guest agent never needs it (the VM goes away); --local
// and tests call it when done.
func Release() error {
	DisarmReleaseTrace()
	staged.Lock()
	defer staged.Unlock()
	if staged.dir == "" {
		return nil
	}
	if err := unix.Unmount(staged.dir, unix.MNT_DETACH); err != nil {
		return fmt.Errorf("unmounting staging tmpfs: %w", err)
	}
	os.Remove(staged.dir)
	staged.dir, staged.files = "", nil
	return nil
}

// mountedImage is a squashfs image mounted read-only through a loop device.
type mountedImage struct {
	dir  string
	loop *os.File
	// files are what the image holds, as its spec lists them (withImage).
	files []fsimage.File
}

// withImage is the runner of a suite that reads an image: the round's
// image (the request's "image", made from the suite's image spec) is
// staged and mounted before run, the time it takes counted as PhaseStage,
// and unmounted after.
func withImage(run func(r *round, img *mountedImage) error) func(*round) error {
	return func(r *round) error {
		var img *mountedImage
		err := r.timed(PhaseStage, func() (err error) {
			img, err = mountImage(r.params[ParamImage])
			return err
		})
		if err != nil {
			return err
		}
		defer img.close()
		img.files = r.cfg.Image.Files()
		return run(r, img)
	}
}

// mountImage stages src in tmpfs and mounts it read-only.
func mountImage(src string) (*mountedImage, error) {
	if src == "" {
		return nil, errors.New("no image given (request parameter \"image\")")
	}
	file, err := stageImage(src)
	if err != nil {
		return nil, err
	}
	loop, err := attachLoop(file)
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "patchbot-mnt-")
	if err != nil {
		detachLoop(loop)
		return nil, fmt.Errorf("creating mount point: %w", err)
	}
	if err := unix.Mount(loop.Name(), dir, "squashfs", unix.MS_RDONLY, ""); err != nil {
		detachLoop(loop)
		os.Remove(dir)
		return nil, fmt.Errorf("mounting squashfs %s (CONFIG_SQUASHFS? compressor built in?): %w", src, err)
	}
	return &mountedImage{dir: dir, loop: loop}, nil
}

func (m *mountedImage) close() error {
	err := unix.Unmount(m.dir, 0)
	if err != nil {
		err = unix.Unmount(m.dir, unix.MNT_DETACH)
	}
	detachLoop(m.loop)
	os.Remove(m.dir)
	if err != nil {
		return fmt.Errorf("unmounting %s: %w", m.dir, err)
	}
	return nil
}

// attachLoop binds file to a free loop device, read-only.
func attachLoop(file string) (*os.File, error) {
	ctl, err := os.OpenFile("/dev/loop-control", os.O_RDWR, 0)
	if err != nil {
		return nil, fmt.Errorf("opening /dev/loop-control (CONFIG_BLK_DEV_LOOP? devtmpfs?): %w", err)
	}
	defer ctl.Close()
	backing, err := os.Open(file)
	if err != nil {
		return nil, err
	}
	defer backing.Close()
	// Another process may take the free device between the two calls: retry.
	for attempt := 0; attempt < 10; attempt++ {
		n, err := unix.IoctlRetInt(int(ctl.Fd()), unix.LOOP_CTL_GET_FREE)
		if err != nil {
			return nil, fmt.Errorf("finding a free loop device: %w", err)
		}
		name := fmt.Sprintf("/dev/loop%d", n)
		loop, err := os.OpenFile(name, os.O_RDONLY, 0)
		if err != nil {
			return nil, fmt.Errorf("opening %s: %w", name, err)
		}
		err = unix.IoctlSetInt(int(loop.Fd()), unix.LOOP_SET_FD, int(backing.Fd()))
		if errors.Is(err, unix.EBUSY) {
			loop.Close()
			continue
		}
		if err != nil {
			loop.Close()
			return nil, fmt.Errorf("binding %s to %s: %w", file, name, err)
		}
		var info unix.LoopInfo64
		info.Flags = unix.LO_FLAGS_READ_ONLY | unix.LO_FLAGS_AUTOCLEAR
		copy(info.File_name[:], file)
		_, _, errno := unix.Syscall(unix.SYS_IOCTL, loop.Fd(), unix.LOOP_SET_STATUS64, uintptr(unsafe.Pointer(&info)))
		if errno != 0 {
			detachLoop(loop)
			return nil, fmt.Errorf("setting %s status: %w", name, errno)
		}
		return loop, nil
	}
	return nil, errors.New("no free loop device after 10 attempts")
}

func detachLoop(loop *os.File) {
	unix.IoctlSetInt(int(loop.Fd()), unix.LOOP_CLR_FD, 0)
	loop.Close()
}
