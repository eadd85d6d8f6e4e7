package images

import (
	"context"
	"strings"
	"testing"

	"github.com/patchbot/patchbot/images/treetest"
)

// debianTrees are three kernel-sized trees made from the Debian import
// (see treetest.KernelTrees): the import itself as "mainline", and "net"
// and "next" where the fixture series of testdata/trees do not apply.
// The store borrows the import's objects: fetching copies only the two
// derived commits.
func debianTrees(t testing.TB) (*Kernels, treetest.Kernel) {
	t.Helper()
	cache, base := debianBase(t)
	k := treetest.KernelTrees(t, base.Repo, base.Commit)
	trees := TreesConfig{Store: k.Store, List: []Tree{
		{Name: "mainline", URL: k.Mainline, Branch: "master"},
		{Name: "next", URL: k.Next, Branch: "master"},
		{Name: "net", URL: k.Net, Branch: "master", Tags: []string{"net-next"}},
	}}
	return &Kernels{Builder: &Builder{Cache: cache}, Trees: NewTrees(trees, "")}, k
}

// On real kernel trees, with the Debian import standing in for mainline:
// the series applies to mainline only, and the attempts say where and
// why it does not apply elsewhere.
func TestChooseDebianAsMainline(t *testing.T) {
	ctx := context.Background()
	kern, k := debianTrees(t)
	for _, tc := range []struct {
		file   string
		tree   string
		hunks  map[string]string // tree: what its first failing hunk shows
		failAt map[string]int
	}{
		{"../testdata/trees/squashfs-3.mbox", "mainline",
			map[string]string{"next": "wait_event(cache->wait_queue, cache->unused);", "net": "layered ontop of the generic"},
			map[string]int{"next": 2, "net": 1}},
		// Its 2/3 does not touch the wait: it applies to next, the newest.
		{"../testdata/trees/squashfs-build-break.mbox", "next", nil, nil},
	} {
		c, err := kern.Choose(ctx, Want{Patches: patchMails(t, tc.file)})
		if err != nil {
			t.Fatalf("%s: %v", tc.file, err)
		}
		if c.Tree != tc.tree || c.How != ByApplying {
			t.Errorf("%s: chose %s by %s, want %s by applies", tc.file, c.Tree, c.How, tc.tree)
		}
		if c.Tree == "mainline" && c.Base.Commit != k.MainlineHead {
			t.Errorf("%s: mainline at %s, want %s", tc.file, c.Base.Commit, k.MainlineHead)
		}
		for _, a := range c.Tried {
			if a.Tree == tc.tree {
				if a.Err != nil {
					t.Errorf("%s: %s failed: %v", tc.file, a.Tree, a.Err)
				}
				continue
			}
			if a.Err == nil || a.Err.Index != tc.failAt[a.Tree] || !strings.Contains(a.Err.Hunk, tc.hunks[a.Tree]) {
				t.Errorf("%s: %s attempt %+v, want patch %d and a hunk with %q", tc.file, a.Tree, a.Err, tc.failAt[a.Tree], tc.hunks[a.Tree])
			}
		}
	}
	// base-commit: only net has it.
	c, err := kern.Choose(ctx, Want{BaseCommit: k.NetHead, Patches: patchMails(t, "../testdata/trees/squashfs-3.mbox")})
	if err != nil || c.Tree != "net" || c.How != ByBaseCommit {
		t.Errorf("base-commit %s: %v, %+v", k.NetHead, err, c)
	}
}

// BenchmarkChooseAmongThreeTrees: the series of squashfs-3.mbox on three
// kernel-sized trees, newest first, that fails on two and applies to the
// third: what choosing a base by try-apply costs a job (the trees fetched).
func BenchmarkChooseAmongThreeTrees(b *testing.B) {
	ctx := context.Background()
	kern, _ := debianTrees(b)
	series := patchMails(b, "../testdata/trees/squashfs-3.mbox")
	if err := kern.Trees.Fetch(ctx); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for b.Loop() {
		c, err := kern.Choose(ctx, Want{Patches: series})
		if err != nil || c.Tree != "mainline" || len(c.Tried) != 3 {
			b.Fatalf("Choose: %v, %+v", err, c)
		}
	}
}
