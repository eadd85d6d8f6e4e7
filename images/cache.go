package images

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"syscall"
	"time"
)

// CacheDir is where patchbot keeps kernel trees, builds and ccache:
// $PATCHBOT_CACHE, else /var/cache/patchbot for root, else
// ~/.cache/patchbot.
func CacheDir() (string, error) {
	if d := os.Getenv("PATCHBOT_CACHE"); d != "" {
		return filepath.Abs(d)
	}
	if os.Geteuid() == 0 {
		return "/var/cache/patchbot", nil
	}
	d, err := os.UserCacheDir()
	if err != nil {
		return "", infra("finding the cache directory", err)
	}
	return filepath.Join(d, "patchbot"), nil
}

// lockFile takes an exclusive flock on path, waiting until it is free or
// ctx ends. Several test binaries may ask for the same build at once: one
// builds, the others wait here and then find the result in the cache.
func lockFile(ctx context.Context, path string, progress io.Writer) (unlock func(), err error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, infra("creating lock directory", err)
	}
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR|syscall.O_NOFOLLOW, 0o600)
	if err != nil {
		return nil, infra("opening lock file", err)
	}
	if progress == nil {
		progress = io.Discard
	}
	said := false
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			return func() { f.Close() }, nil
		}
		if err != syscall.EWOULDBLOCK {
			f.Close()
			return nil, infra("locking "+path, err)
		}
		if !said {
			fmt.Fprintf(progress, "waiting for another build holding %s\n", path)
			said = true
		}
		select {
		case <-ctx.Done():
			f.Close()
			return nil, ctx.Err()
		case <-time.After(300 * time.Millisecond):
		}
	}
}

// stages prints a line per finished stage with its elapsed time, so that a
// person at a terminal sees where a build is; the kernel's own output goes
// to the build log instead.
type stages struct {
	w     io.Writer
	name  string
	start time.Time
}

func newStages(w io.Writer, name string) *stages {
	if w == nil {
		w = io.Discard
	}
	return &stages{w: w, name: name, start: time.Now()}
}

// run runs one stage and reports how long it took.
func (s *stages) run(stage string, f func() error) error {
	t := time.Now()
	fmt.Fprintf(s.w, "[%s] %s ...\n", s.name, stage)
	err := f()
	status := "done"
	if err != nil {
		status = "failed"
	}
	fmt.Fprintf(s.w, "[%s] %s %s in %.1fs (total %.1fs)\n", s.name, stage, status,
		time.Since(t).Seconds(), time.Since(s.start).Seconds())
	return err
}
