package images

import (
	"context"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// The cache's disk budget. Everything a build leaves in the cache counts
// against Builder.CacheSize (kernel.cache_size): the kernels (a base
// build keeps its worktree and objects, 1.6 GB for the default kernel; a
// patched build its artifacts, 20-60 MB), the squashfs and initramfs
// images, the trees' repositories and ccache. After each new build the
// least recently used kernels and images are evicted until the cache fits
// (the trees' repositories and ccache are counted, never evicted: ccache
// has its own cap). A kernel in use is never evicted: a job holds each of
// its builds (a shared flock on kernels/KEY.use) from the build or cache
// hit until its run ends (Kernels.Done), and a build being made holds
// KEY.lock. An image is in use for moments (a VM copies it at its start):
// one used in the last imageGrace is kept.
//
// An older patchbot kept every patched build's tree (about 200 MB each):
// the first pass trims those trees, which nothing reads again, before it
// evicts anything whole. Entries made before the budget existed have no
// last-used stamp: their build record's time stands for it.

const (
	usedFile   = "last-used"  // in a kernel's directory: touched at each use
	sizeFile   = "disk-usage" // in a kernel's directory: its size, once complete
	imageGrace = 10 * time.Minute
	// DefaultCacheShare is the share of what the cache's file system could
	// give the cache (its free space and the cache's own size) that it
	// may take when kernel.cache_size says nothing.
	DefaultCacheShare = 0.5
)

// cacheEntry is one thing eviction may remove.
type cacheEntry struct {
	path   string // a kernel's directory, or an image file
	kernel bool
	repo   string // a kernel's repository (base builds: its worktree is registered there)
	size   int64
	used   time.Time
}

// touchUsed records that the kernel in dir was used now.
func touchUsed(dir string) {
	p := filepath.Join(dir, usedFile)
	now := time.Now()
	if err := os.Chtimes(p, now, now); err != nil {
		os.WriteFile(p, nil, 0o600)
	}
}

// lastUsed is when the kernel in dir was last used: its stamp, else its
// record's time.
func lastUsed(dir string) time.Time {
	for _, f := range []string{usedFile, infoFile} {
		if fi, err := os.Stat(filepath.Join(dir, f)); err == nil {
			return fi.ModTime()
		}
	}
	if fi, err := os.Stat(dir); err == nil {
		return fi.ModTime()
	}
	return time.Time{}
}

// pin holds the kernel in dir for the caller's run: a shared flock that
// eviction's exclusive one cannot take. Its release is Build.release.
func pin(dir string) *os.File {
	f, err := os.OpenFile(dir+".use", os.O_CREATE|os.O_RDONLY|syscall.O_NOFOLLOW, 0o600)
	if err != nil {
		return nil
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_SH); err != nil {
		f.Close()
		return nil
	}
	return f
}

// release lets eviction have the build again.
func (bd *Build) release() {
	if bd != nil && bd.pin != nil {
		bd.pin.Close()
		bd.pin = nil
	}
}

// tryLock takes an exclusive flock on path without waiting; nil when
// someone holds it.
func tryLock(path string) *os.File {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR|syscall.O_NOFOLLOW, 0o600)
	if err != nil {
		return nil
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		return nil
	}
	return f
}

// diskUsage is the space the tree at path takes, each inode once (a hard
// link counted where first met, across the calls that share seen).
func diskUsage(path string, seen map[[2]uint64]bool) int64 {
	var n int64
	filepath.WalkDir(path, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil
		}
		fi, err := d.Info()
		if err != nil {
			return nil
		}
		st, ok := fi.Sys().(*syscall.Stat_t)
		if !ok {
			return nil
		}
		if st.Nlink > 1 && !d.IsDir() {
			k := [2]uint64{st.Dev, st.Ino}
			if seen[k] {
				return nil
			}
			seen[k] = true
		}
		n += st.Blocks * 512
		return nil
	})
	return n
}

// kernelSize is a complete kernel's size, measured once and kept in its
// directory (a complete build does not change).
func kernelSize(dir string, seen map[[2]uint64]bool) int64 {
	if data, err := os.ReadFile(filepath.Join(dir, sizeFile)); err == nil {
		if n, err := strconv.ParseInt(strings.TrimSpace(string(data)), 10, 64); err == nil {
			return n
		}
	}
	n := diskUsage(dir, seen)
	if _, err := os.Stat(filepath.Join(dir, infoFile)); err == nil {
		os.WriteFile(filepath.Join(dir, sizeFile), []byte(strconv.FormatInt(n, 10)+"\n"), 0o600)
	}
	return n
}

// sizeMemo keeps the size of what eviction counts but never removes (the
// trees' repositories, ccache) for a while: they change by fetches and
// base builds, and walking 80,000 files after every build would cost more
// than the build.
var sizeMemo struct {
	sync.Mutex
	at   map[string]time.Time
	size map[string]int64
}

func memoUsage(path string) int64 {
	sizeMemo.Lock()
	defer sizeMemo.Unlock()
	if sizeMemo.at == nil {
		sizeMemo.at, sizeMemo.size = map[string]time.Time{}, map[string]int64{}
	}
	if t, ok := sizeMemo.at[path]; ok && time.Since(t) < 10*time.Minute {
		return sizeMemo.size[path]
	}
	n := diskUsage(path, map[[2]uint64]bool{})
	sizeMemo.at[path], sizeMemo.size[path] = time.Now(), n
	return n
}

// Eviction is what one pass found and did.
type Eviction struct {
	Cap, Before, After int64
	Evicted            []string // what was removed, least recently used first
	Trimmed            int      // old patched builds' trees removed
	Kept               int      // entries in use, kept though over the cap
}

// cacheCap is the cache's size cap: CacheSize, or DefaultCacheShare of the
// cache's size and its file system's free space.
func (b *Builder) cacheCap(total int64) int64 {
	if b.CacheSize > 0 {
		return b.CacheSize
	}
	return int64(DefaultCacheShare * float64(total+freeBytes(b.Cache)))
}

// Evict removes the least recently used kernels and images until the
// cache fits its cap, never one in use. It runs after each new build; a
// person may run it any time.
func (b *Builder) Evict(ctx context.Context) (*Eviction, error) {
	kernels := filepath.Join(b.Cache, "kernels")
	unlock, err := lockFile(ctx, filepath.Join(b.Cache, "evict.lock"), nil)
	if err != nil {
		return nil, err
	}
	defer unlock()
	ev := &Eviction{}
	var entries []cacheEntry
	seen := map[[2]uint64]bool{}
	var fixed int64 // counted, never evicted
	for _, d := range []string{"trees", "ccache"} {
		fixed += memoUsage(filepath.Join(b.Cache, d))
	}
	dirs, _ := os.ReadDir(kernels)
	for _, d := range dirs {
		if !d.IsDir() {
			continue
		}
		dir := filepath.Join(kernels, d.Name())
		e := cacheEntry{path: dir, kernel: true, used: lastUsed(dir)}
		if rec, err := loadBuild(dir); err == nil {
			e.repo = rec.Repo
			if rec.Series > 0 {
				ev.Trimmed += b.trim(dir, rec)
			}
		}
		e.size = kernelSize(dir, seen)
		entries = append(entries, e)
	}
	for _, sub := range []string{"fsimage", "initramfs"} {
		files, _ := os.ReadDir(filepath.Join(b.Cache, sub))
		for _, f := range files {
			fi, err := f.Info()
			if err != nil || !fi.Mode().IsRegular() {
				continue
			}
			p := filepath.Join(b.Cache, sub, f.Name())
			entries = append(entries, cacheEntry{path: p, size: fi.Size(), used: fi.ModTime()})
		}
	}
	total := fixed
	for _, e := range entries {
		total += e.size
	}
	ev.Cap, ev.Before, ev.After = b.cacheCap(total), total, total
	sort.SliceStable(entries, func(i, j int) bool { return entries[i].used.Before(entries[j].used) })
	for _, e := range entries {
		if ev.After <= ev.Cap {
			break
		}
		if err := ctx.Err(); err != nil {
			return ev, err
		}
		if !b.remove(ctx, e) {
			ev.Kept++
			continue
		}
		ev.After -= e.size
		ev.Evicted = append(ev.Evicted, e.path)
	}
	if len(ev.Evicted) > 0 || ev.Trimmed > 0 {
		fmt.Fprintf(progressOr(b.Progress), "cache: %s over a cap of %s: evicted %d, trimmed %d old trees; now %s\n",
			formatBytes(ev.Before), formatBytes(ev.Cap), len(ev.Evicted), ev.Trimmed, formatBytes(ev.After))
	}
	return ev, nil
}

// remove evicts one entry unless it is in use, and says whether it did.
func (b *Builder) remove(ctx context.Context, e cacheEntry) bool {
	if !e.kernel {
		if time.Since(e.used) < imageGrace {
			return false
		}
		return os.Remove(e.path) == nil
	}
	lock := tryLock(e.path + ".lock")
	if lock == nil {
		return false // being built
	}
	defer lock.Close()
	use := tryLock(e.path + ".use")
	if use == nil {
		return false // a run holds it
	}
	defer use.Close()
	if err := os.RemoveAll(e.path); err != nil {
		return false
	}
	if e.repo != "" {
		// A base build's worktree was registered in its repository.
		git(ctx, "", "--git-dir="+e.repo, "worktree", "prune")
	}
	os.Remove(e.path + ".lock")
	os.Remove(e.path + ".use")
	return true
}

// trim removes a complete patched build's tree, which an older patchbot
// kept: nothing reads it again. It says whether it did.
func (b *Builder) trim(dir string, rec *Build) int {
	tree := filepath.Join(dir, treeDir)
	if _, err := os.Lstat(tree); err != nil {
		return 0
	}
	lock := tryLock(dir + ".lock")
	if lock == nil {
		return 0
	}
	defer lock.Close()
	if os.RemoveAll(tree) != nil {
		return 0
	}
	os.Remove(filepath.Join(dir, sizeFile))
	git(context.Background(), "", "--git-dir="+rec.Repo, "worktree", "prune")
	return 1
}

// Done ends a run's hold on its kernels: the base and the whole series'
// build stay in the cache (for the next run, until evicted); the builds
// of the series' shorter prefixes, made to find the patch that breaks the
// build or moves a metric, are removed. builds are the prefix builds in
// order, the whole series last; nil entries (a prefix that failed) are
// skipped.
func (k *Kernels) Done(base *Build, builds ...*Build) {
	base.release()
	last := -1
	for i, bd := range builds {
		if bd != nil {
			last = i
		}
	}
	for i, bd := range builds {
		if bd == nil {
			continue
		}
		bd.release()
		if i != last && bd != base && bd.Series > 0 {
			k.Builder.remove(context.Background(), cacheEntry{path: bd.Dir, kernel: true})
		}
	}
}
