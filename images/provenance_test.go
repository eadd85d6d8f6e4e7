package images

import (
	"bytes"
	"context"
	"errors"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/patchbot/patchbot/images/treetest"
	"github.com/patchbot/patchbot/internal/testenv"
	"github.com/patchbot/patchbot/mailbox"
)

// hasObject reports whether repo holds the object id.
func hasObject(repo, id string) bool {
	return exec.Command("git", "--git-dir="+repo, "cat-file", "-e", id+"^{commit}").Run() == nil
}

// A series' commits are made in a repository of the build's own: the
// shared repository never holds them, and no base lookup finds them. A
// later series that names such a commit as its base-commit, or a base=
// that names it, gets the usual answers: the choice goes on without it,
// the override is unknown.
func TestSeriesCommitIsNeverABase(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t)
	k := f.kernels(t)
	def, err := k.open(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// The first series, applied as a patched build applies it.
	tree := filepath.Join(t.TempDir(), "tree")
	if err := buildRepo(ctx, def, tree); err != nil {
		t.Fatal(err)
	}
	if _, err := git(ctx, tree, "reset", "-q", "--hard"); err != nil {
		t.Fatal(err)
	}
	if err := applySeries(ctx, tree, f.series); err != nil {
		t.Fatal(err)
	}
	head := strings.TrimSpace(string(must(git(ctx, tree, "rev-parse", "HEAD"))))
	if !hasObject(tree+"/.git", head) {
		t.Fatal("the build's repository lacks the series' commit")
	}
	if hasObject(def.Repo, head) {
		t.Fatalf("git am wrote the series' commit %s into the shared repository", short(head))
	}
	// An older patchbot's git am wrote such commits into the shared
	// repositories: a stray commit there is no base either.
	stray := treetest.Git(t, def.Repo, "2026-11-30T00:00:00Z", "", "commit-tree", "-p", def.Commit, "-m", "evil",
		def.Commit+"^{tree}")
	for _, c := range []struct{ name, id string }{{"the earlier series' head", head}, {"a stray commit of the shared repository", stray}} {
		t.Run(c.name, func(t *testing.T) {
			got, err := k.Choose(ctx, Want{BaseCommit: c.id, Patches: f.series})
			if err != nil {
				t.Fatal(err)
			}
			if got.Base.Commit == c.id || got.How == ByBaseCommit {
				t.Errorf("base-commit %s was taken as the base (%+v)", short(c.id), got)
			}
			if !strings.Contains(strings.Join(got.Notes, "\n"), short(c.id)) {
				t.Errorf("notes %q do not say the base-commit was not found", got.Notes)
			}
			for _, ref := range []string{c.id, c.id[:12]} {
				_, err = k.Choose(ctx, Want{Override: ref, Patches: f.series})
				var ub *UnknownBaseError
				if !errors.As(err, &ub) {
					t.Errorf("base=%s: %v, want an UnknownBaseError", ref, err)
				}
			}
		})
	}
	// The same in the store: a stray commit there (an older patchbot's
	// patched build of a store base) is not fetched into refs/bases/ as if
	// a server had it.
	storeStray := treetest.Git(t, k.Trees.Dir, "2026-11-30T00:00:00Z", "", "commit-tree", "-p", f.mainline, "-m", "evil",
		f.mainline+"^{tree}")
	_, err = k.Choose(ctx, Want{Override: storeStray, Patches: f.series})
	var ub *UnknownBaseError
	if !errors.As(err, &ub) {
		t.Errorf("base= a stray commit of the store: %v, want an UnknownBaseError", err)
	}
	if got, _ := treeGit(ctx, k.Trees.Dir, "for-each-ref", "refs/bases/"); len(got) > 0 {
		t.Errorf("the stray commit got a ref: %s", got)
	}
	// What a tree has is still a base.
	if got, err := k.Choose(ctx, Want{Override: f.net[:12], Patches: f.series}); err != nil || got.Base.Commit != f.net {
		t.Errorf("base= a commit of net: %+v, %v", got, err)
	}
}

func must(b []byte, err error) []byte {
	if err != nil {
		panic(err)
	}
	return b
}

// The attack through the real build path: a first series is built
// (git am makes its commit), and a second series names that commit as its
// base-commit, as a stranger could from the first reply. The commit is in
// no shared repository; the second series is tested on the configured
// base, whose build comes from the cache: nothing is built from the first
// series' commit, and the shared ccache is not written.
func TestHostileSeriesAsBase(t *testing.T) {
	testenv.NeedsKernel(t)
	ctx := context.Background()
	base := defaultKernel(t)
	shared, err := DefaultBuilder(testWriter{t})
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	b := patchedBuilder(t)
	first, err := b.Patched(ctx, base, patchMails(t, "../testdata/hostile/base-first.patch"))
	if err != nil {
		t.Fatalf("the first series: %v", err)
	}
	if first.Head == "" || first.Head == base.Commit {
		t.Fatalf("the first series' commit is %q", first.Head)
	}
	if hasObject(base.Repo, first.Head) {
		t.Fatalf("git am wrote the first series' commit %s into the shared repository", short(first.Head))
	}
	if _, err := os.Stat(filepath.Join(first.Dir, treeDir)); err == nil {
		t.Error("the patched build kept its tree (and the repository with the series' commit)")
	}
	raw, err := os.ReadFile("../testdata/hostile/base-from-series.patch")
	if err != nil {
		t.Fatal(err)
	}
	raw = bytes.ReplaceAll(raw, []byte("@FIRST-SERIES-HEAD@"), []byte(first.Head))
	if bytes.HasPrefix(raw, []byte("From ")) { // the mbox separator of format-patch
		raw = raw[bytes.IndexByte(raw, '\n')+1:]
	}
	m, err := mailbox.ParseBytes(raw)
	if err != nil {
		t.Fatal(err)
	}
	series := mailbox.Assemble([]*mailbox.Message{m})
	if len(series) != 1 || series[0].Base != first.Head {
		t.Fatalf("the second series' base-commit is not the first's commit: %+v", series)
	}
	k := &Kernels{Builder: b, Tree: TreeConfig{Tree: base.Repo, Base: base.Commit}}
	c, err := k.Choose(ctx, Want{BaseCommit: series[0].Base, Patches: series[0].Mails()})
	if err != nil {
		t.Fatal(err)
	}
	if c.Base.Commit != base.Commit || c.How == ByBaseCommit {
		t.Errorf("chose %s by %s, want the configured base %s", short(c.Base.Commit), c.How, short(base.Commit))
	}
	if !strings.Contains(strings.Join(c.Notes, " "), short(first.Head)) {
		t.Errorf("notes %q do not say the base-commit is not in the tree", c.Notes)
	}
	for _, ref := range []string{first.Head, first.Head[:12]} {
		var ub *UnknownBaseError
		if _, err := k.Choose(ctx, Want{Override: ref, Patches: series[0].Mails()}); !errors.As(err, &ub) {
			t.Errorf("base=%s: %v, want an UnknownBaseError", ref[:12], err)
		}
	}
	got, err := shared.Base(ctx, c.Base)
	if err != nil {
		t.Fatal(err)
	}
	defer got.release()
	if !got.Cached || got.Key != base.Key {
		t.Errorf("the second series' base was built (cached %v, key %s; want %s)", got.Cached, got.Key, base.Key)
	}
	filepath.WalkDir(shared.ccacheDir(), func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			if fi, err := d.Info(); err == nil && fi.ModTime().After(start) {
				t.Errorf("ccache file %s changed", p)
			}
		}
		return nil
	})
}
