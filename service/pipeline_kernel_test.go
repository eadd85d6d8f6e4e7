package service

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/patchbot/patchbot/config"
	"github.com/patchbot/patchbot/images"
	"github.com/patchbot/patchbot/images/treetest"
	"github.com/patchbot/patchbot/intake"
	"github.com/patchbot/patchbot/internal/testenv"
	"github.com/patchbot/patchbot/mailbox"
	"github.com/patchbot/patchbot/suites/invm"
)

// These tests build real kernels: run them under the shared lock. The base is the cached default build; the trees are the
// Debian import as "mainline" and trees derived from it
// (treetest.KernelTrees) where the fixture series do not apply.

type logWriter struct{ t testing.TB }

func (w logWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// realKernels is images.Kernels over the real builder and cache, choosing
// among the named trees of treetest.KernelTrees.
func realKernels(t *testing.T, names ...string) (*images.Kernels, treetest.Kernel) {
	t.Helper()
	b, err := images.DefaultBuilder(logWriter{t})
	if err != nil {
		t.Fatal(err)
	}
	base, err := images.ImportDebian(context.Background(), b.Cache, logWriter{t})
	if err != nil {
		t.Fatal(err)
	}
	k := treetest.KernelTrees(t, base.Repo, base.Commit)
	urls := map[string]string{"mainline": k.Mainline, "next": k.Next, "net": k.Net}
	cfg := images.TreesConfig{Store: k.Store}
	for _, n := range names {
		cfg.List = append(cfg.List, images.Tree{Name: n, URL: urls[n], Branch: "master"})
	}
	trees := images.NewTrees(cfg, b.Cache)
	trees.Progress = logWriter{t}
	return &images.Kernels{Builder: b, Trees: trees, Progress: logWriter{t}}, k
}

func requestFrom(t *testing.T, file string) *intake.Request {
	t.Helper()
	msgs, err := mailbox.Collect(context.Background(), &mailbox.Mbox{Path: file})
	if err != nil {
		t.Fatal(err)
	}
	s, _, err := mailbox.Choose(mailbox.Assemble(msgs), 0)
	if err != nil {
		t.Fatal(err)
	}
	req := intake.NewRequest(s, intake.SuitesConfig{Profile: "quick", Runs: 5}, intake.ReplyTarget(s))
	req.Suites = []string{"cache-contention"}
	return req
}

// neverTester fails the test if a series that does not build is measured.
type neverTester struct{ t *testing.T }

func (n neverTester) Test(ctx context.Context, s invm.Spec) (*invm.Outcome, error) {
	n.t.Errorf("measured %d patches of a series that does not build", s.Patched.Series)
	return nil, context.Canceled
}

// A series whose second patch breaks the build, built patch by patch on
// the tree it applies to: the reply names 2/3 and quotes gcc.
func TestSecondPatchBreaksTheRealBuild(t *testing.T) {
	testenv.NeedsKernel(t)
	kern, _ := realKernels(t, "mainline", "net")
	p := &Pipeline{Builder: kern, Tester: neverTester{t}, Progress: logWriter{t},
		Reply: config.Default().Reply}
	req := requestFrom(t, "../testdata/trees/squashfs-build-break.mbox")
	start := time.Now()
	out, err := p.Execute(context.Background(), req, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("choose, base (cached) and three prefix builds: %s", time.Since(start).Round(time.Second))
	f := out.Run.Failure
	if f == nil || f.Patch != "[PATCH 2/3] squashfs: count the waiters a cache has seen" {
		t.Fatalf("failure %+v, want 2/3's", f)
	}
	if len(out.Run.Builds) != 3 || out.Run.Builds[0].Stage != "" || out.Run.Builds[1].Stage != "build" {
		t.Errorf("builds %+v, want 1/3 built and 2/3 broken", out.Run.Builds)
	}
	for _, want := range []string{
		"Tested on mainline at efb677222d3b",
		"net at",
		`patch 1/3 ("squashfs: fix two typos in the cache's comment") does not apply`,
		"The first patch that breaks the build is 2/3 (\"squashfs: count the waiters a cache has seen\")",
		"has no member named 'waiters_seen'",
	} {
		if !says(out.Reply.Body, want) {
			t.Errorf("reply lacks %q:\n%s", want, out.Reply.Body)
		}
	}
}
