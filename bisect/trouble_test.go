package bisect

import (
	"context"
	"fmt"
	"testing"

	"github.com/patchbot/patchbot/blame"
	"github.com/patchbot/patchbot/images"
	"github.com/patchbot/patchbot/judge"
	"github.com/patchbot/patchbot/suites"
	"github.com/patchbot/patchbot/suites/invm"
	"github.com/patchbot/patchbot/vmrunner"
	"github.com/patchbot/patchbot/vmrunner/report"
)

// troubleTester's patched kernels from prefix cause on report a kernel
// BUG in round 2; the rest run clean.
type troubleTester struct {
	cause  int
	rounds []int
	tested []int
}

func (f *troubleTester) Test(ctx context.Context, s invm.Spec) (*invm.Outcome, error) {
	f.tested = append(f.tested, s.Patched.Series)
	f.rounds = append(f.rounds, int(s.Plan.Stop.(suites.Fixed)))
	if s.Patched.Series >= f.cause {
		rep := &report.Report{Kind: report.KindBUG, Title: "kernel BUG in squashfs_cache_get", Guilty: -1}
		return nil, blame.On(blame.Patched, &vmrunner.BootError{Reason: "kernel BUG", Report: rep,
			Op: "run-suite", Suite: s.Suite, Round: 2})
	}
	return &invm.Outcome{Base: &suites.Result{Suite: s.Suite}, Patched: &suites.Result{Suite: s.Suite}}, nil
}

func TestTroubleBisection(t *testing.T) {
	for _, n := range []int{2, 5, 8} {
		for cause := 1; cause <= n; cause++ {
			t.Run(fmt.Sprintf("%d of %d", cause, n), func(t *testing.T) {
				te := &troubleTester{cause: cause}
				prefixes := make([]*images.Build, n+1)
				titles := make([]string, n)
				for k := range prefixes {
					prefixes[k] = &images.Build{Series: k}
				}
				for i := range titles {
					titles[i] = fmt.Sprintf("squashfs: step %d", i+1)
				}
				_, err := te.Test(context.Background(), invm.Spec{Suite: "cache-contention", Plan: invm.FixedPlan("", 3, nil),
					Base: prefixes[0], Patched: prefixes[n]})
				trouble := judge.TroubleOf(err)
				if trouble == nil {
					t.Fatal("no trouble from the whole series")
				}
				te.tested, te.rounds = nil, nil
				res, err := Trouble(context.Background(), TroubleConfig{Tester: te, A: prefixes[0], Prefixes: prefixes,
					First: 1, Last: n, Titles: titles, Trouble: trouble})
				if err != nil {
					t.Fatal(err)
				}
				if res.Cause != cause || res.Stopped != "" {
					t.Fatalf("cause %d (stopped %q), want %d; steps %+v", res.Cause, res.Stopped, cause, res.Steps)
				}
				if max := bitsFor(n); len(te.tested) > max {
					t.Errorf("%d tests for %d patches, want at most %d", len(te.tested), n, max)
				}
				for _, r := range te.rounds {
					if r != 2 {
						t.Errorf("a step ran %d rounds, want the 2 the trouble took", r)
					}
				}
			})
		}
	}
}

func bitsFor(n int) int {
	b := 0
	for 1<<b < n {
		b++
	}
	return b
}
