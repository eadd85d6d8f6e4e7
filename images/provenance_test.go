package images

import (
	"context"
	"errors"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/patchbot/patchbot/images/treetest"
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
