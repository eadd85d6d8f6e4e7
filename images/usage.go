package images

import (
	"errors"
	"io/fs"
	"path/filepath"
	"sync"
	"syscall"
	"time"
)

// Usage is what a build used, as measured: the object tree's size and
// files at the end (or when the build was stopped), how much it grew
// while the build ran, the room its file system had then, the build's peak
// memory (its cgroup, as root) and its wall time. A base build keeps its
// usage in its record: a patched build that stops at a limit is compared
// with it (blame by comparison, limits.go).
type Usage struct {
	Output      int64         `json:",omitempty"` // bytes on disk in the object tree
	Files       int           `json:",omitempty"`
	Grew        int64         `json:",omitempty"` // bytes the object tree gained during the command
	FreeAtStart int64         `json:",omitempty"` // free bytes of its file system when the command started
	Memory      int64         `json:",omitempty"` // peak bytes of the build's memory cgroup; 0 unknown
	Duration    time.Duration `json:",omitempty"`
}

// treeUse is the disk use (allocated blocks) and the number of entries of
// the tree at dir, counting at most maxFiles+1 entries: a tree of a
// million files costs what maxFiles of them do.
func treeUse(dir string, maxFiles int) (bytes int64, files int) {
	filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil
		}
		files++
		if files > maxFiles {
			return filepath.SkipAll
		}
		if fi, err := d.Info(); err == nil {
			if st, ok := fi.Sys().(*syscall.Stat_t); ok {
				bytes += st.Blocks * 512
			}
		}
		return nil
	})
	return bytes, files
}

func freeBytes(dir string) int64 {
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		return 0
	}
	return int64(st.Bavail) * int64(st.Bsize)
}

// watchdog stops a build whose object tree passes its output limit: it
// measures the tree every second (longer when a walk takes long, so that
// watching costs at most a tenth of a core) and calls kill the first time
// the tree holds more than maxBytes or maxFiles. RLIMIT_FSIZE bounds one
// file; this bounds them all. A build can write between two looks: the
// limit may be passed by what the disk takes in a second.
type watchdog struct {
	stop  chan struct{}
	done  chan struct{}
	mu    sync.Mutex
	over  bool
	bytes int64
	files int
}

var watchEvery = time.Second

func watchOutput(dir string, maxBytes int64, maxFiles int, kill func()) *watchdog {
	w := &watchdog{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(w.done)
		wait := watchEvery
		for {
			select {
			case <-w.stop:
				return
			case <-time.After(wait):
			}
			start := time.Now()
			b, f := treeUse(dir, maxFiles)
			if b > maxBytes || f > maxFiles {
				w.mu.Lock()
				w.over, w.bytes, w.files = true, b, f
				w.mu.Unlock()
				kill()
				return
			}
			wait = max(watchEvery, 10*time.Since(start))
		}
	}()
	return w
}

// finish stops the watchdog and says whether it stopped the build, and at
// what size.
func (w *watchdog) finish() (over bool, bytes int64, files int) {
	close(w.stop)
	<-w.done
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.over, w.bytes, w.files
}

// ErrOutput: the build's object tree passed its size or file limit
// (Limits.Output, Limits.Files).
var ErrOutput = errors.New("build output over its limit")
