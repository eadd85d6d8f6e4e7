package service

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"

	"github.com/patchbot/patchbot/images"
	"github.com/patchbot/patchbot/reports"
	"github.com/patchbot/patchbot/suites"
	"github.com/patchbot/patchbot/suites/refcache"
	"github.com/patchbot/patchbot/suites/vmrun"
	"github.com/patchbot/patchbot/vmrunner"
)

// KernelBuilder builds with images/: the base is Debian's linux-source-6.1
// imported once, or a tree and ref the user names.
type KernelBuilder struct {
	Builder  *images.Builder
	Tree     string // empty: Debian's linux-source-6.1
	Ref      string
	Progress io.Writer

	once sync.Mutex
	base *images.Base
}

var _ Builder = (*KernelBuilder)(nil)

// Base builds (or finds in the cache) the base kernel. A series' base-commit
// is used when the tree has that commit.
func (k *KernelBuilder) Base(ctx context.Context, baseCommit string) (*images.Build, error) {
	base, err := k.tree(ctx)
	if err != nil {
		return nil, err
	}
	if baseCommit != "" {
		if b, err := base.WithBaseCommit(ctx, baseCommit); err == nil {
			base = b
		} else if k.Progress != nil {
			fmt.Fprintf(k.Progress, "base-commit %s is not in the tree; using %s\n", short(baseCommit), short(base.Commit))
		}
	}
	return k.Builder.Base(ctx, base)
}

// Patched applies the series on the base build and rebuilds incrementally.
func (k *KernelBuilder) Patched(ctx context.Context, base *images.Build, patches [][]byte) (*images.Build, error) {
	return k.Builder.Patched(ctx, base, patches)
}

func (k *KernelBuilder) tree(ctx context.Context) (images.Base, error) {
	k.once.Lock()
	defer k.once.Unlock()
	if k.base != nil {
		return *k.base, nil
	}
	var b images.Base
	var err error
	if k.Tree == "" {
		b, err = images.ImportDebian(ctx, k.Builder.Cache, k.Progress)
	} else {
		b, err = images.OpenBase(ctx, k.Tree, k.Ref)
	}
	if err != nil {
		return b, err
	}
	k.base = &b
	return b, nil
}

func short(c string) string {
	if len(c) > 12 {
		return c[:12]
	}
	return c
}

// VMTester measures suites in VMs (suites/vmrun): one VM per kernel with
// the same shape, rounds interleaved.
type VMTester struct {
	Backend string
	CPUs    int
	MemMiB  int
	Pool    vmrunner.Config
}

var _ Tester = (*VMTester)(nil)

// Test runs one suite on the base and patched kernels.
func (v *VMTester) Test(ctx context.Context, t TestSpec) (*TestOutcome, error) {
	res, err := vmrun.Run(ctx, vmrun.Options{
		Suite: t.Suite, Profile: t.Profile, Rounds: t.Runs,
		Kernels: []vmrun.Kernel{{Label: "base", BzImage: t.Base.BzImage}, {Label: "patched", BzImage: t.Patched.BzImage}},
		CPUs:    v.CPUs, MemMiB: v.MemMiB, Backend: v.Backend, Pool: v.Pool, Progress: t.Progress,
	})
	var bootErr *vmrunner.BootError
	if errors.As(err, &bootErr) && strings.Contains(err.Error(), "booting base") {
		// The base kernel is ours: its failure to boot is not the patch's
		// fault, so the error loses its BootError type (and is retried).
		return nil, fmt.Errorf("the base kernel does not boot (%s): %s", bootErr.Reason, bootErr.Excerpt)
	}
	if err != nil {
		return nil, err
	}
	if len(res) != 2 {
		return nil, fmt.Errorf("suite %s: got %d results, want 2", t.Suite, len(res))
	}
	return &TestOutcome{Base: res[0], Patched: res[1],
		Info: vmrunner.Info{Backend: v.Backend, Accel: res[0].Accel}, CPUs: res[0].CPUs, MemMiB: res[0].MemMiB}, nil
}

// ModelFromNotes puts the reference model's predictions, which the
// cache-contention suite records in its result notes, into the reply.
// Mainline 6.1 is the wake-all policy; keyed exclusive waits are the policy
// the seed patch describes.
func ModelFromNotes(res *suites.Result) *reports.Model {
	if res == nil || res.Notes == nil {
		return nil
	}
	m := &reports.Model{BasePolicy: "wake-all", PatchedPolicy: "keyed", Predicted: map[string]float64{}}
	for _, p := range []string{"wake-all", "exclusive", "keyed"} {
		var v float64
		if _, err := fmt.Sscanf(res.Notes["model/"+p+"/wakeups_per_release"], "%g", &v); err == nil {
			m.Predicted[p] = v
		}
	}
	if len(m.Predicted) == 0 {
		return nil
	}
	m.Check = checkSummary(refcache.Config{Policy: refcache.Keyed, Threads: 3, Entries: 1, Blocks: 2, GetsPerThread: 2})
	return m
}

// checkSummary explores a small configuration of the cache exhaustively and
// says in one line what it found, for the reply.
func checkSummary(cfg refcache.Config) string {
	r, err := refcache.Check(cfg)
	if err != nil {
		return "the model checker failed: " + err.Error()
	}
	scope := fmt.Sprintf("%d waiters making %d gets each on %d entries with %d blocks",
		r.Threads, r.GetsPerThread, r.Entries, r.Blocks)
	if !r.Complete {
		scope += " (stopped at the state bound)"
	}
	if len(r.Violations) == 0 {
		return fmt.Sprintf("%s policy: no deadlock, lost wake-up or waiter left asleep with a free entry, in all %d states of %s",
			r.Policy, r.States, scope)
	}
	var kinds []string
	for _, v := range r.Violations {
		kinds = append(kinds, fmt.Sprintf("%s (%d states)", v.Kind, v.Count))
	}
	return fmt.Sprintf("%s policy: found %s in %d states of %s; run `patchbot model check --policy %s --threads %d --entries %d --blocks %d` for the traces",
		r.Policy, strings.Join(kinds, ", "), r.States, scope, r.Policy, r.Threads, r.Entries, r.Blocks)
}
