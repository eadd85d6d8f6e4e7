package images

import (
	"context"
	"fmt"
	"io"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"

	"github.com/patchbot/patchbot/blame"
)

// TreeConfig names the base tree (the `kernel:` part of patchbot.yaml).
// An empty Tree is Debian's linux-source-6.1, imported once into the
// cache; otherwise Tree is a git repository and Base a ref in it.
type TreeConfig struct {
	Tree string `yaml:"tree"`
	Base string `yaml:"base"`
	// MaxPatches is the longest series patchbot builds (each patch is a
	// build of its own, prefix by prefix): a longer one is answered at
	// once, before any build. 0: DefaultMaxPatches.
	MaxPatches int `yaml:"max_patches"`
	// CacheSize caps the cache (kernels, images): after each build the
	// least recently used entries are evicted until the cache fits.
	// Written "10GiB", "500MiB" or in bytes; 0: DefaultCacheShare of
	// what the cache's file system could give it (its free space and the
	// cache's own size).
	CacheSize Size `yaml:"cache_size"`
}

// DefaultMaxPatches is the longest series built when the config says
// nothing: kernel series are rarely longer, and each patch costs a build.
const DefaultMaxPatches = 50

// Validate checks the limits.
func (c TreeConfig) Validate() error {
	if c.MaxPatches < 0 {
		return fmt.Errorf("kernel.max_patches %d: negative", c.MaxPatches)
	}
	if c.CacheSize < 0 {
		return fmt.Errorf("kernel.cache_size %d: negative", c.CacheSize)
	}
	return nil
}

func (c TreeConfig) maxPatches() int {
	if c.MaxPatches > 0 {
		return c.MaxPatches
	}
	return DefaultMaxPatches
}

// TooManyPatchesError says that a series is longer than the configured
// cap: it is answered once, not built patch by patch. It is the
// series' (blame.Patch): retrying changes nothing.
type TooManyPatchesError struct {
	Patches, Max int
}

func (e *TooManyPatchesError) Error() string {
	return fmt.Sprintf("the series has %d patches; patchbot builds series of at most %d (kernel.max_patches), one build a patch", e.Patches, e.Max)
}

// Blame: the series is too long for this patchbot.
func (e *TooManyPatchesError) Blame() blame.Blame { return blame.Patch }

// OpenTree opens the base a config names: the Debian import (into cache)
// or the ref in the operator's tree (HEAD when no ref is given). A ref with
// no tree is looked up in the Debian import, whose commit ids are the same
// on every machine.
func OpenTree(ctx context.Context, cache string, c TreeConfig, progress io.Writer) (Base, error) {
	if c.Tree == "" {
		b, err := ImportDebian(ctx, cache, progress)
		if err != nil || c.Base == "" {
			return b, err
		}
		return resolve(ctx, b.Repo, c.Base)
	}
	ref := c.Base
	if ref == "" {
		ref = "HEAD"
	}
	return OpenBase(ctx, c.Tree, ref)
}

// Kernels chooses the base of a test and builds its kernels: the base
// (see Choose: a configured tree, the series' base-commit, or the kernel:
// base) and the patched kernel on top of it. The kernel: base is opened
// once.
type Kernels struct {
	Builder *Builder
	// Tree is the kernel: base, the offline default.
	Tree TreeConfig
	// Trees are the configured trees; nil or empty for none.
	Trees    *Trees
	Progress io.Writer

	mu      sync.Mutex
	base    *Base
	capOnce sync.Once
}

// budget gives the builder the config's cache cap, once.
func (k *Kernels) budget() {
	k.capOnce.Do(func() {
		if k.Builder.CacheSize == 0 {
			k.Builder.CacheSize = int64(k.Tree.CacheSize)
		}
	})
}

// NewKernels is Kernels over the default builder and cache, choosing among
// the configured trees: what `patchbot run`, `patchbot build` and the
// daemon build with, so that they choose the same base.
func NewKernels(tree TreeConfig, trees TreesConfig, progress io.Writer) (*Kernels, error) {
	b, err := DefaultBuilder(progress)
	if err != nil {
		return nil, err
	}
	t := NewTrees(trees, b.Cache)
	t.Progress = progress
	return &Kernels{Builder: b, Tree: tree, Trees: t, Progress: progress}, nil
}

// Base builds (or finds in the cache) the base kernel of a choice.
func (k *Kernels) Base(ctx context.Context, base Base) (*Build, error) {
	k.budget()
	b, err := k.Builder.Base(ctx, base)
	if err != nil {
		return nil, err
	}
	if b.Title == "" {
		b.Title = base.title(ctx)
	}
	return b, nil
}

// Patched applies the series (one mail per patch, in order) on the base
// build and rebuilds incrementally.
func (k *Kernels) Patched(ctx context.Context, base *Build, patches [][]byte) (*Build, error) {
	k.budget()
	return k.Builder.Patched(ctx, base, patches)
}

func (k *Kernels) open(ctx context.Context) (Base, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.base != nil {
		return *k.base, nil
	}
	b, err := OpenTree(ctx, k.Builder.Cache, k.Tree, k.Progress)
	if err != nil {
		return b, err
	}
	k.base = &b
	return b, nil
}

// title is the subject line of the base commit, e.g. "Import Debian
// linux-source-6.1 6.1.192-3" or "Linux 6.13-rc2".
func (b Base) title(ctx context.Context) string {
	out, err := git(ctx, "", "--git-dir="+b.Repo, "log", "-1", "--format=%s", b.Commit)
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(out))
}

// AddedWarnings are the warnings of after that before does not have,
// compared without line numbers: what one patch of a series added, from
// the new warnings of the prefix builds before and after it.
func AddedWarnings(before, after []Warning) []Warning { return newWarnings(before, after) }

// DefaultHead is the kernel: base as a listing shows it beside the
// trees' heads (patchbot trees), without importing anything.
func DefaultHead(ctx context.Context, cache string, c TreeConfig) Head {
	h := Head{Tree: Tree{Name: DefaultTree, URL: c.Tree, Branch: c.Base}}
	if h.URL == "" {
		h.URL = DebianSource + " (imported from /usr/src on first use)"
	}
	if b, title, ok := PeekTree(ctx, cache, c); ok {
		h.Commit, h.Title = b.Commit, title
	} else {
		h.Title = "(not there yet: the first job makes it)"
	}
	return h
}

// PeekTree is the kernel: base as it stands, without importing anything:
// ok is false when Debian's tarball was never imported (the first job
// imports it) or the operator's tree lacks the ref.
func PeekTree(ctx context.Context, cache string, c TreeConfig) (b Base, title string, ok bool) {
	if c.Tree != "" {
		ref := c.Base
		if ref == "" {
			ref = "HEAD"
		}
		b, err := OpenBase(ctx, c.Tree, ref)
		if err != nil {
			return Base{}, "", false
		}
		return b, b.title(ctx), true
	}
	out, err := exec.CommandContext(ctx, "dpkg-query", "-W", "-f=${Version}", DebianSource).Output()
	if err != nil || len(out) == 0 {
		return Base{}, "", false
	}
	repo := filepath.Join(cache, "trees", DebianSource+".git")
	ref := "refs/tags/debian/" + string(out)
	if c.Base != "" {
		ref = c.Base
	}
	commit, found := revParse(ctx, repo, ref)
	if !found {
		return Base{}, "", false
	}
	b = Base{Repo: repo, Commit: commit}
	return b, b.title(ctx), true
}
