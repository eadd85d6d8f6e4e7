package images

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"
)

// fakeKernel makes a complete kernel entry of about size bytes in cache,
// last used at used.
func fakeKernel(t *testing.T, cache, key string, series int, size int, used time.Time, withTree bool) string {
	t.Helper()
	dir := filepath.Join(cache, "kernels", key)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	img := filepath.Join(dir, imageFile)
	if err := os.WriteFile(img, make([]byte, size), 0o600); err != nil {
		t.Fatal(err)
	}
	if withTree {
		os.MkdirAll(filepath.Join(dir, treeDir, outDir), 0o755)
		os.WriteFile(filepath.Join(dir, treeDir, outDir, "x.o"), make([]byte, 4<<20), 0o644)
	}
	rec, _ := json.Marshal(&Build{BzImage: img, Dir: dir, Key: key, Series: series})
	if err := os.WriteFile(filepath.Join(dir, infoFile), rec, 0o600); err != nil {
		t.Fatal(err)
	}
	touchUsed(dir)
	os.Chtimes(filepath.Join(dir, usedFile), used, used)
	return dir
}

func exists(p string) bool { _, err := os.Stat(p); return err == nil }

// The cache is held to its cap by evicting the least recently used
// kernels and images, never one a run holds or one being built, nor an
// image just used; an older patchbot's patched trees are trimmed first.
func TestEvictLeastRecentlyUsed(t *testing.T) {
	cache := t.TempDir()
	now := time.Now()
	const mb = 1 << 20
	oldest := fakeKernel(t, cache, "oldest", 1, 4*mb, now.Add(-5*time.Hour), false)
	pinned := fakeKernel(t, cache, "pinned", 0, 4*mb, now.Add(-4*time.Hour), false)
	building := fakeKernel(t, cache, "building", 1, 4*mb, now.Add(-4*time.Hour), false)
	older := fakeKernel(t, cache, "older", 1, 4*mb, now.Add(-3*time.Hour), false)
	recent := fakeKernel(t, cache, "recent", 1, 4*mb, now.Add(-time.Hour), false)
	withTree := fakeKernel(t, cache, "with-tree", 1, 1*mb, now, true)
	os.MkdirAll(filepath.Join(cache, "fsimage"), 0o700)
	oldImage := filepath.Join(cache, "fsimage", "old.sqfs")
	newImage := filepath.Join(cache, "fsimage", "new.sqfs")
	os.WriteFile(oldImage, make([]byte, 2*mb), 0o600)
	os.Chtimes(oldImage, now.Add(-6*time.Hour), now.Add(-6*time.Hour))
	os.WriteFile(newImage, make([]byte, 2*mb), 0o600)

	hold := pin(pinned)
	defer hold.Close()
	lock := tryLock(building + ".lock")
	defer lock.Close()

	b := &Builder{Cache: cache, CacheSize: 17 * mb}
	ev, err := b.Evict(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%+v", ev)
	if ev.Trimmed != 1 || exists(filepath.Join(withTree, treeDir)) || !exists(filepath.Join(withTree, imageFile)) {
		t.Errorf("the old patched tree was not trimmed (trimmed %d)", ev.Trimmed)
	}
	want := []string{oldImage, oldest, older}
	if !slices.Equal(ev.Evicted, want) {
		t.Errorf("evicted %v, want %v (least recently used first, none in use)", ev.Evicted, want)
	}
	for _, p := range want {
		if exists(p) {
			t.Errorf("%s is still there", p)
		}
	}
	for _, p := range []string{pinned, building, recent, newImage, withTree} {
		if !exists(p) {
			t.Errorf("%s was evicted", p)
		}
	}
	if ev.After > ev.Cap || ev.Kept != 2 {
		t.Errorf("after %d over the cap %d, or kept %d (want the pinned and the building one)", ev.After, ev.Cap, ev.Kept)
	}

	// Released, the pinned one goes at the next pass over the cap.
	hold.Close()
	fakeKernel(t, cache, "new", 1, 4*mb, now, false)
	ev, err = b.Evict(context.Background())
	if err != nil || !slices.Contains(ev.Evicted, pinned) {
		t.Errorf("second pass: %+v, %v; want the released kernel evicted", ev, err)
	}
}

// A run's end removes the builds of its series' shorter prefixes and
// keeps the base and the whole series, released.
func TestDoneDropsPrefixBuilds(t *testing.T) {
	cache := t.TempDir()
	now := time.Now()
	dir := func(key string, series int) *Build {
		d := fakeKernel(t, cache, key, series, 1<<10, now, false)
		return &Build{Dir: d, Series: series, pin: pin(d)}
	}
	base, p1, p2, p3 := dir("base", 0), dir("p1", 1), dir("p2", 2), dir("p3", 3)
	k := &Kernels{Builder: &Builder{Cache: cache}}
	k.Done(base, base, p1, nil, p3)
	if exists(p1.Dir) || !exists(p3.Dir) || !exists(base.Dir) {
		t.Errorf("after Done: p1 %v, p3 %v, base %v; want only p1 gone", exists(p1.Dir), exists(p3.Dir), exists(base.Dir))
	}
	if !exists(p2.Dir) {
		t.Error("p2 was not the run's and was removed")
	}
	if base.pin != nil || p3.pin != nil {
		t.Error("the holds were not released")
	}
}

// BuildAt finds the build record beside a cached bzImage (what `suite run
// --vs` reads for the changed lines), and refuses a record of another
// image.
func TestBuildAt(t *testing.T) {
	root := t.TempDir()
	dir := fakeKernel(t, root, "k1", 2, 1<<10, time.Now(), false)
	b, err := BuildAt(filepath.Join(dir, imageFile))
	if err != nil || b.Series != 2 || b.Key != "k1" {
		t.Fatalf("BuildAt: %+v, %v", b, err)
	}
	other := filepath.Join(dir, "other-bzImage")
	os.WriteFile(other, nil, 0o600)
	if _, err := BuildAt(other); err == nil {
		t.Error("a record of another image was taken for it")
	}
	if _, err := BuildAt(filepath.Join(t.TempDir(), "bzImage")); err == nil {
		t.Error("a bzImage with no record beside it has one")
	}
}
