package judge

import (
	"errors"
	"fmt"
	"math"
	"reflect"
	"strings"
	"testing"

	"github.com/patchbot/patchbot/blame"
	"github.com/patchbot/patchbot/images"
	"github.com/patchbot/patchbot/judge/stats"
	"github.com/patchbot/patchbot/suites"
	"github.com/patchbot/patchbot/vmrunner"
)

// deviates are five standardised deviations (mean 0, sample sd 1): runs
// made from them have exactly the geometric mean and log-scale spread
// asked for.
var deviates = func() []float64 {
	z := []float64{-1.2, -0.6, 0.1, 0.5, 1.2}
	var m, ss float64
	for _, v := range z {
		m += v
	}
	m /= float64(len(z))
	for _, v := range z {
		ss += (v - m) * (v - m)
	}
	sd := math.Sqrt(ss / float64(len(z)-1))
	out := make([]float64, len(z))
	for i, v := range z {
		out[i] = (v - m) / sd
	}
	return out
}()

// runs are five runs with geometric mean gm and log-scale sd s.
func runs(gm, s float64) []float64 {
	out := make([]float64, len(deviates))
	for i, z := range deviates {
		out[i] = gm * math.Exp(s*z)
	}
	return out
}

// metric is one metric of a cache-contention workload on both kernels.
type metric struct {
	workload, name, unit string
	higher               bool
	base, patched        []float64
}

// results makes the two kernels' results of cache-contention from metrics,
// one sample per run, as RunAB returns them.
func results(ms []metric) (base, patched []suites.Result) {
	b := suites.Result{Suite: "cache-contention", Kernel: "base"}
	p := suites.Result{Suite: "cache-contention", Kernel: "patched"}
	params := map[string]string{"threads": "64"}
	for _, m := range ms {
		for i, v := range m.base {
			b.Samples = append(b.Samples, suites.Sample{Suite: b.Suite, Workload: m.workload, Params: params,
				Metric: m.name, Unit: m.unit, HigherIsBetter: m.higher, Round: i + 1, Value: v})
		}
		for i, v := range m.patched {
			p.Samples = append(p.Samples, suites.Sample{Suite: p.Suite, Workload: m.workload, Params: params,
				Metric: m.name, Unit: m.unit, HigherIsBetter: m.higher, Round: i + 1, Value: v})
		}
	}
	return []suites.Result{b}, []suites.Result{p}
}

func near(a, b, tol float64) bool { return math.Abs(a-b) <= tol }

// Each stage's error becomes its evidence in one place: the stage, one
// line, the excerpt to quote, and the kernel it happened on.
func TestFailureOf(t *testing.T) {
	am := strings.Repeat("Applying: something\n", 50) + "error: patch failed: fs/squashfs/cache.c:15\n"
	for _, tc := range []struct {
		name    string
		err     error
		stage   Stage
		detail  string
		excerpt string
		kernel  string
	}{
		{"apply", blame.On(blame.Patched, &images.ApplyError{Index: 2, Subject: "squashfs: b", Hunk: "\n  @@ -10 +10 @@\nctx", Output: []byte(am)}),
			StageApply, "@@ -10 +10 @@", "error: patch failed: fs/squashfs/cache.c:15", "patched"},
		{"build", blame.On(blame.Patched, &images.BuildError{Lines: []string{"a.c:1: error: x", "make: *** [a.o] Error 1"}}),
			StageBuild, "a.c:1: error: x", "a.c:1: error: x\nmake: *** [a.o] Error 1", "patched"},
		{"boot", blame.On(blame.Patched, &vmrunner.BootError{Reason: "kernel panic", Excerpt: []byte("Kernel panic - not syncing")}),
			StageBoot, "kernel panic", "Kernel panic - not syncing", "patched"},
		{"guest", blame.On(blame.Patched, &vmrunner.GuestError{Op: "run", Msg: "mount: no such device"}),
			StageSuite, "the suite failed in the guest: mount: no such device", "", "patched"},
		{"no base", &images.NoBaseError{}, StageApply, "the series applies to none of the trees tried", "", ""},
		{"unknown base", &images.UnknownBaseError{Ref: "nosuch", Trees: []string{"default"}}, StageBase,
			`base "nosuch" is neither a tree (default) nor a commit in one`, "", ""},
		{"config", &images.ConfigError{Dropped: []images.Dropped{{Option: "CONFIG_X", Want: "y"}}}, StageConfig,
			"config options did not survive olddefconfig: CONFIG_X=y (got absent)", "", ""},
		{"infra", fmt.Errorf("creating the VM: %w", errors.New("no qemu")), "", "creating the VM: no qemu", "", ""},
	} {
		f := FailureOf(tc.err)
		if f.Stage != tc.stage || f.Detail != tc.detail || f.Kernel != tc.kernel || !strings.HasSuffix(f.Excerpt, tc.excerpt) {
			t.Errorf("%s: %+v", tc.name, f)
		}
	}
	f := FailureOf(&images.ApplyError{Index: 2, Subject: "s", Output: []byte(am)})
	if n := strings.Count(f.Excerpt, "\n") + 1; n != 40 || f.Index != 2 || f.Patch != "s" {
		t.Errorf("apply: %d lines of git am's output, index %d, patch %q; want the last 40", n, f.Index, f.Patch)
	}
}

// The quick look's means are per metric and kernel, 0 where a kernel did
// not measure the metric.
func TestMeans(t *testing.T) {
	s := func(metric string, v float64) suites.Sample {
		return suites.Sample{Workload: "w", Params: map[string]string{"b": "2", "a": "1"}, Metric: metric, Unit: "u", Value: v}
	}
	rows := Means([]*suites.Result{
		{Samples: []suites.Sample{s("x", 1), s("x", 3), s("y", 5)}},
		{Samples: []suites.Sample{s("x", 6)}},
	})
	want := []MeanRow{{Workload: "w", Params: "a=1,b=2", Metric: "x", Unit: "u", Means: []float64{2, 6}},
		{Workload: "w", Params: "a=1,b=2", Metric: "y", Unit: "u", Means: []float64{5, 0}}}
	if !reflect.DeepEqual(rows, want) {
		t.Errorf("Means = %+v, want %+v", rows, want)
	}
}

func TestCompareRejectsEmpty(t *testing.T) {
	full := []suites.Result{{Suite: "s", Kernel: "base", Samples: []suites.Sample{
		{Suite: "s", Workload: "w", Metric: "m", Unit: "u", HigherIsBetter: true, Round: 1, Value: 1},
		{Suite: "s", Workload: "w", Metric: "m", Unit: "u", HigherIsBetter: true, Round: 2, Value: 2},
		{Suite: "s", Workload: "w", Metric: "m", Unit: "u", HigherIsBetter: true, Round: 3, Value: 3}}}}
	for _, tt := range []struct{ base, patched []suites.Result }{{nil, full}, {full, nil}} {
		if _, err := Compare(tt.base, tt.patched, Options{}); err == nil {
			t.Error("a comparison with an empty side was accepted")
		}
	}
	if _, err := Compare(full, full, Options{Alpha: 2}); err == nil {
		t.Error("alpha 2 was accepted")
	}
}

// The sequential rule recorded in the results decides the level: the
// default rule's look at 5 runs a side judges at 0.005, its last at 0.035;
// a rule recorded before each look had its own level at 0.001 and 0.043; a
// fixed design at 0.05.
func TestCompareUsesTheRecordedRule(t *testing.T) {
	mk := func(n int, plan string) (b, p []suites.Result) {
		vals := func(gm float64) []float64 {
			var out []float64
			for i := 0; i < n; i++ {
				out = append(out, gm*(1+0.02*float64(i%3-1)))
			}
			return out
		}
		b, p = results([]metric{{"read-storm", "files_per_s", "files/s", true, vals(100), vals(103)}})
		b[0].Plan, p[0].Plan = plan, plan
		return b, p
	}
	rule := stats.RuleBefore.String()
	const old = "min=3 max=10 alpha=0.05 interim=0.001"
	for _, tt := range []struct {
		n     int
		plan  string
		level float64
	}{{5, rule, 0.005}, {10, rule, 0.035}, {5, old, 0.001}, {10, old, 0.043}, {5, "", 0.05}} {
		b, p := mk(tt.n, tt.plan)
		c, err := Compare(b, p, Options{})
		if err != nil {
			t.Fatal(err)
		}
		if j := c.Suites[0]; !near(j.Level, tt.level, 1e-12) || j.Runs != tt.n || c.Rows[0].Level != j.Level {
			t.Errorf("%d runs, plan %q: level %v with %d runs, want %v", tt.n, tt.plan, j.Level, j.Runs, tt.level)
		}
	}
	b, p := mk(5, "min=1")
	if _, err := Compare(b, p, Options{}); err == nil {
		t.Error("a bad recorded rule was accepted")
	}
}

// Rounds stops the rounds once the primary metrics are settled.
func TestRoundsSettle(t *testing.T) {
	plan := Rounds{Rule: stats.RuleBefore}
	if lo, hi := plan.Bounds(); lo != 3 || hi != 10 || plan.Plan() != stats.RuleBefore.String() {
		t.Fatalf("rounds %+v", plan)
	}
	settled := func(ms []metric) bool {
		b, p := results(ms)
		return plan.Stop([]*suites.Result{&b[0], &p[0]}) == suites.StopSettled
	}
	clear := []metric{
		{"read-storm", "wakeups_per_release", "wakeups/release", false, runs(19.1, 0.04), runs(0.97, 0.02)},
		{"read-storm", "files_per_s", "files/s", true, runs(100, 0.01), runs(101, 0.01)},
	}
	if !settled(clear) {
		t.Error("a huge change and a metric within ±1% are not settled")
	}
	noisy := append(clear, metric{"mixed", "ops_per_s", "ops/s", true, runs(180, 0.3), runs(170, 0.3)})
	if settled(noisy) {
		t.Error("a metric with ±30% noise and no clear change is settled after 5 runs")
	}
	if plan.Stop(nil) != "" {
		t.Error("no results are settled")
	}
}

// Replay gives the sequential rule's answer on results of a fixed number
// of rounds: a clear change stops at the first look, noise runs to the
// last, which is judged at the last look's level.
func TestReplay(t *testing.T) {
	ten := func(gm, s float64) []float64 { return append(runs(gm, s), runs(gm*1.001, s)...) }
	rule := stats.Rule{Min: 3, Max: 8, Alpha: 0.05, Levels: []float64{0.001, 0.001, 0.001, 0.001, 0.001}}
	tests := []struct {
		name  string
		ms    []metric
		runs  int
		level float64
	}{
		{"clear", []metric{{"read-storm", "files_per_s", "files/s", true, ten(19, 0.02), ten(37, 0.02)}}, 3, 0.001},
		{"noisy", []metric{{"read-storm", "files_per_s", "files/s", true, ten(100, 0.3), ten(100, 0.3)}}, 8, 0.045},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b, p := results(tt.ms)
			c, err := Replay(b, p, rule, Options{})
			if err != nil {
				t.Fatal(err)
			}
			if j := c.Suites[0]; j.Runs != tt.runs || !near(j.Level, tt.level, 1e-12) || c.Rows[0].Base.N != tt.runs {
				t.Errorf("stopped after %d runs at level %v, want %d at %v", j.Runs, j.Level, tt.runs, tt.level)
			}
		})
	}
}
