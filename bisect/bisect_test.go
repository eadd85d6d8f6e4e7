package bisect

import (
	"context"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/patchbot/patchbot/blame"
	"github.com/patchbot/patchbot/images"
	"github.com/patchbot/patchbot/judge"
	"github.com/patchbot/patchbot/judge/stats"
	"github.com/patchbot/patchbot/suites"
	"github.com/patchbot/patchbot/suites/invm"
	"github.com/patchbot/patchbot/vmrunner"
)

// effectTester measures wake-ups per release as a function of the patches
// in each kernel: effect(k) is the share of the whole change patches 1..k
// carry (on the log scale). Throughput stays put. failAt makes the
// patched kernel of that prefix fail to boot.
type effectTester struct {
	effect func(k int) float64
	failAt int
	tested []int
}

func (f *effectTester) Test(ctx context.Context, s invm.Spec) (*invm.Outcome, error) {
	f.tested = append(f.tested, s.Patched.Series)
	if f.failAt > 0 && s.Patched.Series == f.failAt {
		return nil, blame.On(blame.Patched, &vmrunner.BootError{Reason: "Kernel panic - not syncing: VFS"})
	}
	mk := func(label string, b *images.Build) *suites.Result {
		wpr := 9.6 * math.Pow(1.1/9.6, f.effect(b.Series))
		r := &suites.Result{Suite: s.Suite, Profile: s.Plan.Profile, Kernel: label}
		for i := 0; i < runsOf(s); i++ {
			noise := float64(i%3-1) * 0.02
			r.Samples = append(r.Samples,
				suites.Sample{Suite: s.Suite, Workload: "read-storm", Params: map[string]string{"threads": "64"},
					Metric: "wakeups_per_release", Unit: "wakeups/release", Round: i + 1, Value: wpr * (1 + noise)},
				suites.Sample{Suite: s.Suite, Workload: "read-storm", Params: map[string]string{"threads": "64"},
					Metric: "files_per_s", Unit: "files/s", HigherIsBetter: true, Round: i + 1, Value: 440 * (1 - noise)})
		}
		return r
	}
	return &invm.Outcome{Base: mk("base", s.Base), Patched: mk("patched", s.Patched)}, nil
}

// single: the whole change is in patch cause.
func single(cause int) func(int) float64 {
	return func(k int) float64 {
		if k >= cause {
			return 1
		}
		return 0
	}
}

// config is a bisection of an n-patch series whose every prefix built,
// with the series' own measurement taken by te.
func config(t *testing.T, te *effectTester, n int) Config {
	t.Helper()
	prefixes := make([]*images.Build, n+1)
	titles := make([]string, n)
	for k := range prefixes {
		prefixes[k] = &images.Build{Series: k, BzImage: fmt.Sprintf("/nonexistent/%d", k)}
	}
	for i := range titles {
		titles[i] = fmt.Sprintf("squashfs: step %d", i+1)
	}
	whole, err := te.Test(context.Background(), invm.Spec{Suite: "cache-contention", Plan: invm.FixedPlan("", 5, nil), Base: prefixes[0], Patched: prefixes[n]})
	if err != nil {
		t.Fatal(err)
	}
	te.tested = nil
	return Config{Tester: te, Base: []suites.Result{*whole.Base}, Patched: []suites.Result{*whole.Patched},
		Options: judge.Options{Test: stats.LogWelch}, A: prefixes[0], Prefixes: prefixes, First: 1, Last: n,
		Titles: titles, Profile: "quick", Runs: 5}
}

// The search names the one patch that carries the change, in at most
// ceil(log2 n) measurements beyond the series' own.
func TestRunNamesTheCause(t *testing.T) {
	for _, n := range []int{2, 3, 4, 5, 8} {
		for cause := 1; cause <= n; cause++ {
			t.Run(fmt.Sprintf("%d of %d", cause, n), func(t *testing.T) {
				te := &effectTester{effect: single(cause)}
				bi, err := Run(context.Background(), config(t, te, n))
				if err != nil || bi == nil {
					t.Fatalf("Run = %+v, %v", bi, err)
				}
				if bi.Cause != cause || bi.Spread || bi.Stopped != "" {
					t.Errorf("cause %d, spread %v, stopped %q; want %d", bi.Cause, bi.Spread, bi.Stopped, cause)
				}
				if most := int(math.Ceil(math.Log2(float64(n)))); bi.Measurements > most || len(te.tested) != bi.Measurements {
					t.Errorf("%d measurements (%d tested), want at most %d", bi.Measurements, len(te.tested), most)
				}
				if bi.Metric != "wakeups_per_release" || bi.Steps[len(bi.Steps)-1].Prefix != n || !bi.Steps[len(bi.Steps)-1].Whole {
					t.Errorf("bisection %+v: want the series' own step last, on wake-ups per release", bi)
				}
				for i := 1; i < len(bi.Steps); i++ {
					if bi.Steps[i-1].Prefix >= bi.Steps[i].Prefix {
						t.Errorf("steps out of order: %+v", bi.Steps)
					}
				}
			})
		}
	}
}

// A change that grows with every patch comes from no single one.
func TestRunSpread(t *testing.T) {
	te := &effectTester{effect: func(k int) float64 { return float64(k) / 4 }}
	bi, err := Run(context.Background(), config(t, te, 4))
	if err != nil || bi == nil || !bi.Spread || bi.Cause != 0 {
		t.Fatalf("Run = %+v, %v; want a spread change", bi, err)
	}
}

// A series that changed nothing has nothing to trace, and costs nothing.
func TestRunNothingToTrace(t *testing.T) {
	te := &effectTester{effect: func(int) float64 { return 0 }}
	bi, err := Run(context.Background(), config(t, te, 4))
	if err != nil || bi != nil || len(te.tested) != 0 {
		t.Fatalf("Run = %+v, %v after %d measurements; want nothing", bi, err, len(te.tested))
	}
}

// A step that cannot be measured ends the search, not the run: a prefix
// that did not build, or whose kernel does not boot, is said, and each
// step's results are kept in the run directory.
func TestRunStops(t *testing.T) {
	cfg := config(t, &effectTester{effect: single(3)}, 4)
	cfg.Prefixes[2] = nil
	bi, err := Run(context.Background(), cfg)
	if err != nil || bi == nil || bi.Stopped != "2/4 does not build" || bi.Cause != 0 || bi.Measurements != 0 {
		t.Errorf("Run = %+v, %v; want it stopped at 2/4", bi, err)
	}

	te := &effectTester{effect: single(3), failAt: 2}
	cfg = config(t, te, 4)
	cfg.RunDir = t.TempDir()
	bi, err = Run(context.Background(), cfg)
	if err != nil || bi == nil || !strings.HasPrefix(bi.Stopped, "2/4 fails: Kernel panic") || bi.Measurements != 1 {
		t.Errorf("Run = %+v, %v; want it stopped by 2/4's panic", bi, err)
	}

	cfg = config(t, &effectTester{effect: single(3)}, 4)
	cfg.RunDir = t.TempDir()
	if _, err := Run(context.Background(), cfg); err != nil {
		t.Fatal(err)
	}
	kept, _ := filepath.Glob(filepath.Join(cfg.RunDir, "bisect-*-*.json"))
	if len(kept) != 4 { // 2/4 and 3/4, each side
		t.Errorf("kept %v, want two steps' results", kept)
	}
	if _, err := os.Stat(filepath.Join(cfg.RunDir, "bisect-2-patched.json")); err != nil {
		t.Error(err)
	}
}

// The steps run half the series' rounds, at least the fewest a test can
// judge (stats.MinSamples), never more than the series' own unless that
// is fewer.
func TestStepRuns(t *testing.T) {
	ms := stats.MinSamples
	for _, tc := range []struct{ runs, want int }{{0, ms}, {1, ms}, {2 * ms, ms}, {4 * ms, 2 * ms}, {4*ms + 1, 2*ms + 1}} {
		if got := StepRuns(tc.runs); got != tc.want {
			t.Errorf("StepRuns(%d) = %d, want %d", tc.runs, got, tc.want)
		}
	}
}

// runsOf is the rounds a side a spec asks for.
func runsOf(s invm.Spec) int {
	n, _ := s.Plan.Stop.Bounds()
	return n
}
