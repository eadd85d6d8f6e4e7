package service

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/patchbot/patchbot/images"
	"github.com/patchbot/patchbot/intake"
	"github.com/patchbot/patchbot/judge"
	"github.com/patchbot/patchbot/reports"
	"github.com/patchbot/patchbot/store"
	"github.com/patchbot/patchbot/suites"
	"github.com/patchbot/patchbot/suites/invm"
)

// prefixBuilder builds nothing: a build of patches 1..k is a Build with
// Series k, so that a tester can tell which patches are in a kernel.
// Prefixes from breakAt on do not build; warnAt adds a warning.
type prefixBuilder struct {
	choice  *images.Choice
	chooseE error
	breakAt int // 0: every prefix builds
	mendAt  int // a later patch that makes it build again; 0 for none
	warnAt  int
	built   []int
}

func (f *prefixBuilder) Choose(ctx context.Context, w images.Want) (*images.Choice, error) {
	if f.chooseE != nil {
		return nil, f.chooseE
	}
	if f.choice != nil {
		return f.choice, nil
	}
	return &images.Choice{Tree: images.DefaultTree, How: images.ByDefault}, nil
}

func (f *prefixBuilder) Base(ctx context.Context, base images.Base) (*images.Build, error) {
	return &images.Build{BzImage: "/nonexistent/base", Commit: "1111111111111111111111111111111111111111",
		Title: "Linux 6.13-rc2", ConfigHash: "cafe", Compiler: "gcc (Debian 12.2.0-14) 12.2.0"}, nil
}

func (f *prefixBuilder) Patched(ctx context.Context, base *images.Build, patches [][]byte) (*images.Build, error) {
	k := len(patches)
	f.built = append(f.built, k)
	if f.breakAt > 0 && k >= f.breakAt && (f.mendAt == 0 || k < f.mendAt) {
		return nil, &images.BuildError{Lines: []string{
			fmt.Sprintf("fs/squashfs/cache.c:%d:2: error: 'cache_waiters' undeclared (first use in this function)", 40+k)}}
	}
	b := &images.Build{BzImage: fmt.Sprintf("/nonexistent/patched-%d", k), Commit: base.Commit,
		Head: fmt.Sprintf("%040d", k), ConfigHash: base.ConfigHash, Compiler: base.Compiler, Series: k}
	if f.warnAt > 0 && k >= f.warnAt {
		b.NewWarnings = []images.Warning{{File: "fs/squashfs/cache.c", Line: 12, Message: "unused variable 'n'", Flag: "-Wunused-variable"}}
	}
	return b, nil
}

// effectTester measures wake-ups per release as a function of the patches
// in each kernel: effect(k) is the share of the whole change patches 1..k
// carry. Throughput stays put.
type effectTester struct {
	effect func(k int) float64
	specs  []invm.Spec
}

func (f *effectTester) Test(ctx context.Context, s invm.Spec) (*invm.Outcome, error) {
	f.specs = append(f.specs, s)
	mk := func(label string, b *images.Build) *suites.Result {
		// 9.6 on the base, 1.1 with the whole change: interpolated on the
		// log scale by the share of the change the kernel carries.
		wpr := 9.6 * math.Pow(1.1/9.6, f.effect(b.Series))
		r := &suites.Result{Suite: s.Suite, Profile: s.Plan.Profile, Kernel: label, Accel: "tcg", CPUs: 2, MemMiB: 1024}
		runs, _ := s.Plan.Stop.Bounds()
		for i := 0; i < runs; i++ {
			noise := float64(i%3-1) * 0.02
			r.Samples = append(r.Samples,
				suites.Sample{Suite: s.Suite, Workload: "read-storm", Params: map[string]string{"threads": "64"},
					Metric: "wakeups_per_release", Unit: "wakeups/release", Round: i + 1, Value: wpr * (1 + noise)},
				suites.Sample{Suite: s.Suite, Workload: "read-storm", Params: map[string]string{"threads": "64"},
					Metric: "files_per_s", Unit: "files/s", HigherIsBetter: true, Round: i + 1, Value: 440 * (1 - noise)})
		}
		return r
	}
	return &invm.Outcome{Base: mk("base", s.Base), Patched: mk("patched", s.Patched), Backend: "fake",
		Accel: "tcg", CPUs: 2, MemMiB: 1024}, nil
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

func seriesRequest(n int) *intake.Request {
	req := &intake.Request{Suites: []string{"cache-contention"}, Profile: "quick", Runs: 5,
		Thread: reports.Thread{Subject: fmt.Sprintf("[PATCH 0/%d] squashfs: fewer wake-ups", n),
			MessageID: "<cover@example.org>", Author: "Test Author <author@example.org>"},
		Series: intake.Series{SeriesKey: intake.SeriesKey{Author: "author@example.org", Title: "squashfs: fewer wake-ups", Version: 1},
			Subject: fmt.Sprintf("[PATCH 0/%d] squashfs: fewer wake-ups", n), Files: []string{"fs/squashfs/cache.c"}}}
	for i := 1; i <= n; i++ {
		req.Series.Patches = append(req.Series.Patches, intake.Patch{Subject: fmt.Sprintf("[PATCH %d/%d] squashfs: step %d", i, n, i),
			Title: fmt.Sprintf("squashfs: step %d", i),
			Mail:  []byte(fmt.Sprintf("From: Test Author <author@example.org>\nSubject: [PATCH %d/%d] squashfs: step %d\n\ndiff\n", i, n, i))})
	}
	return req
}

// says reports whether the reply says want, whatever the line breaks.
func says(body, want string) bool {
	return strings.Contains(strings.Join(strings.Fields(body), " "), strings.Join(strings.Fields(want), " "))
}

func execute(t *testing.T, p *Pipeline, req *intake.Request) *Outcome {
	t.Helper()
	if p.Reply.From == "" {
		p.Reply.From = "patchbot <patchbot@example.org>"
	}
	out, err := p.Execute(context.Background(), req, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// The bisection names the one patch that carries the change, and costs at
// most ceil(log2 n) + 1 measurements beyond the series' own.
func TestBisectionNamesTheCause(t *testing.T) {
	for _, n := range []int{2, 3, 4, 5, 8} {
		for cause := 1; cause <= n; cause++ {
			t.Run(fmt.Sprintf("%d of %d", cause, n), func(t *testing.T) {
				te := &effectTester{effect: single(cause)}
				p := &Pipeline{Builder: &prefixBuilder{}, Tester: te}
				out := execute(t, p, seriesRequest(n))
				bi := out.Run.Bisection
				if bi == nil {
					t.Fatalf("no bisection; reply:\n%s", out.Reply.Body)
				}
				if bi.Cause != cause || bi.Spread || bi.Metric != "wakeups_per_release" {
					t.Errorf("cause %d (spread %v) on %s, want %d", bi.Cause, bi.Spread, bi.Metric, cause)
				}
				extra := len(te.specs) - 1
				bound := int(math.Ceil(math.Log2(float64(n)))) + 1
				if extra != bi.Measurements || extra > bound {
					t.Errorf("%d extra measurements (recorded %d), want at most %d", extra, bi.Measurements, bound)
				}
				for _, s := range te.specs[1:] {
					if runs, _ := s.Plan.Stop.Bounds(); runs != 3 || s.Suite != "cache-contention" || s.Base.Series != 0 {
						t.Errorf("step %+v: want the same suite, 3 runs, against the base", s)
					}
				}
				want := fmt.Sprintf(`The change comes from %d/%d ("squashfs: step %d").`, cause, n, cause)
				if !says(out.Reply.Body, want) {
					t.Errorf("reply lacks %q:\n%s", want, out.Reply.Body)
				}
			})
		}
	}
}

func TestBisectionSaysASpread(t *testing.T) {
	te := &effectTester{effect: func(k int) float64 { return float64(k) / 3 }}
	out := execute(t, &Pipeline{Builder: &prefixBuilder{}, Tester: te}, seriesRequest(3))
	bi := out.Run.Bisection
	if bi == nil || bi.Cause != 0 || !bi.Spread {
		t.Fatalf("bisection %+v, want a spread", bi)
	}
	body := out.Reply.Body
	for _, want := range []string{"No single patch carries the change: it is spread over the series",
		"Patch by patch: read-storm scheduler wake-ups per cache release", "prefix", "verdict"} {
		if !says(body, want) {
			t.Errorf("reply lacks %q:\n%s", want, body)
		}
	}
}

func TestNoBisectionWithoutAChange(t *testing.T) {
	te := &effectTester{effect: func(int) float64 { return 0 }}
	out := execute(t, &Pipeline{Builder: &prefixBuilder{}, Tester: te}, seriesRequest(3))
	if out.Run.Bisection != nil || len(te.specs) != 1 {
		t.Errorf("bisection %+v after %d measurements, want none: nothing changed", out.Run.Bisection, len(te.specs))
	}
}

// A series whose second patch breaks the build: the reply names patch 2
// and quotes its error, and each prefix was built.
func TestSecondPatchBreaksTheBuild(t *testing.T) {
	b := &prefixBuilder{breakAt: 2, warnAt: 1}
	te := &effectTester{effect: single(1)}
	out := execute(t, &Pipeline{Builder: b, Tester: te}, seriesRequest(3))
	if fmt.Sprint(b.built) != "[1 2 3]" {
		t.Errorf("built prefixes %v, want 1, 2 and 3", b.built)
	}
	if len(te.specs) != 0 {
		t.Errorf("measured %d times a series that does not build", len(te.specs))
	}
	f := out.Run.Failure
	if f == nil || f.Stage != judge.StageBuild || f.Patch != "[PATCH 2/3] squashfs: step 2" {
		t.Fatalf("failure %+v, want patch 2's build failure", f)
	}
	body := out.Reply.Body
	for _, want := range []string{
		"The kernel does not build with the patch ([PATCH 2/3] squashfs: step 2) applied",
		"fs/squashfs/cache.c:42:2: error: 'cache_waiters' undeclared",
		"The first patch that breaks the build is 2/3 (\"squashfs: step 2\")",
		"1/3    builds, 1 new warning",
		"2/3    does not build",
		"fs/squashfs/cache.c:12: warning: unused variable 'n' [-Wunused-variable]",
	} {
		if !says(body, want) {
			t.Errorf("reply lacks %q:\n%s", want, body)
		}
	}
}

// A patch that breaks the build and a later one that mends it: the series
// is measured, and the reply says which patch would not bisect.
func TestBrokenPrefixMendedLater(t *testing.T) {
	b := &prefixBuilder{breakAt: 2, mendAt: 3}
	out := execute(t, &Pipeline{Builder: b, Tester: &effectTester{effect: single(3)}}, seriesRequest(3))
	if out.Run.Failure != nil || out.Run.Bisection == nil {
		t.Fatalf("failure %+v, bisection %+v: want a measured series", out.Run.Failure, out.Run.Bisection)
	}
	if !says(out.Reply.Body, "A later patch mends it") || !says(out.Reply.Body, "'cache_waiters' undeclared") {
		t.Errorf("reply does not say 2/3 breaks the build:\n%s", out.Reply.Body)
	}
	if bi := out.Run.Bisection; bi.Cause != 0 && bi.Stopped == "" {
		// Whether it needs prefix 2 depends on the search; if it does, it stops.
		if bi.Cause != 3 {
			t.Errorf("cause %d, want 3", bi.Cause)
		}
	}
}

// patches=2-3 measures patches 2 and 3 on top of 1: the A side is the
// base with 1/3, and the bisection stays inside the range.
func TestPatchRange(t *testing.T) {
	te := &effectTester{effect: single(3)}
	req := seriesRequest(3)
	req.First, req.Last = 2, 3
	out := execute(t, &Pipeline{Builder: &prefixBuilder{}, Tester: te}, req)
	if s := te.specs[0]; s.Base.Series != 1 || s.Patched.Series != 3 {
		t.Errorf("measured %d against %d patches, want 1 against 3", s.Base.Series, s.Patched.Series)
	}
	if bi := out.Run.Bisection; bi == nil || bi.Cause != 3 || bi.Measurements != 1 {
		t.Errorf("bisection %+v, want 3/3 named after one step (2/3)", bi)
	}
	for _, want := range []string{"measured:  patches 2-3 of 3, the base with 1 applied on both sides", "--patches 2-3"} {
		if !says(out.Reply.Body, want) {
			t.Errorf("reply lacks %q:\n%s", want, out.Reply.Body)
		}
	}
	req.First, req.Last = 2, 4
	if _, err := (&Pipeline{Builder: &prefixBuilder{}, Tester: te}).Execute(context.Background(), req, t.TempDir()); err == nil {
		t.Error("patches=2-4 of a 3-patch series ran")
	}
}

// The reply says which base and why, and where the series did not apply.
func TestReplySaysTheBase(t *testing.T) {
	hunk := "Checking patch fs/squashfs/cache.c...\nerror: while searching for:\n\twake_up(&c->wait_queue);\n" +
		"error: patch failed: fs/squashfs/cache.c:15"
	tried := []images.Attempt{
		{Tree: "next", Commit: "2222222222222222222222222222222222222222", Title: "Add linux-next specific files for 20261120",
			Err: &images.ApplyError{Index: 2, Subject: "squashfs: step 2", Hunk: hunk}},
		{Tree: "mainline", Commit: "1111111111111111111111111111111111111111", Title: "Linux 6.13-rc2"},
	}
	for _, tc := range []struct {
		name   string
		b      *prefixBuilder
		wants  []string
		failed bool
	}{
		{"applies", &prefixBuilder{choice: &images.Choice{Tree: "mainline", How: images.ByApplying, Tried: tried,
			Notes: []string{"the series' base-commit 0123456789ab is in none of the trees (mainline, next), fetched just now"}}},
			[]string{`Tested on mainline at 111111111111 ("Linux 6.13-rc2"): the newest tree the whole`,
				"The series' base-commit 0123456789ab is in none of the trees",
				"It does not apply to:", `next at 222222222222 ("Add linux-next specific files for 20261120"):`,
				`patch 2/3 ("squashfs: step 2") does not apply`, "error: while searching for:",
				"--base 1111111111111111111111111111111111111111"}, false},
		{"tag", &prefixBuilder{choice: &images.Choice{Tree: "net", How: images.ByTag, Detail: "net-next"}},
			[]string{"Tested on net at 111111111111", "the subject's [net-next] tag names it"}, false},
		{"base-commit", &prefixBuilder{choice: &images.Choice{Tree: "net", How: images.ByBaseCommit, Detail: "in net"}},
			[]string{"Tested on net at 111111111111", "the series' base-commit (in net)"}, false},
		{"none applies", &prefixBuilder{chooseE: &images.NoBaseError{Tried: tried[:1]}},
			[]string{"The series applies to none of the 1 trees it was tried on (next): no kernel was built.",
				"Tried, newest first:", `patch 2/3 ("squashfs: step 2") does not apply`,
				"base:      none: the series applies to none of the trees tried"}, true},
		{"unknown base", &prefixBuilder{chooseE: &images.UnknownBaseError{Ref: "nosuch", Trees: []string{"default", "mainline"}}},
			[]string{`the base asked for is unknown: base "nosuch" is neither a tree (default, mainline) nor a commit in one`}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out := execute(t, &Pipeline{Builder: tc.b, Tester: &effectTester{effect: single(2)}}, seriesRequest(3))
			if (out.Run.Failure != nil) != tc.failed {
				t.Errorf("failure %+v, want failed %v", out.Run.Failure, tc.failed)
			}
			for _, want := range tc.wants {
				if !says(out.Reply.Body, want) {
					t.Errorf("reply lacks %q:\n%s", want, out.Reply.Body)
				}
			}
		})
	}
}

// fakeHistory is the store's jobs.
type fakeHistory []*store.Job

func (h fakeHistory) Jobs(ctx context.Context) ([]*store.Job, error) { return h, nil }

// The reply to v2 says what v1 measured on the same metric, and when.
func TestRerollSaysWhatV1Measured(t *testing.T) {
	// v1: half the effect.
	v1 := seriesRequest(1)
	v1Out := execute(t, &Pipeline{Builder: &prefixBuilder{}, Tester: &effectTester{effect: func(k int) float64 { return 0.5 * float64(k) }}}, v1)
	dir := t.TempDir()
	if err := reports.SaveRun(dir, v1Out.Run); err != nil {
		t.Fatal(err)
	}
	v1Out.Run.Finished = time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	reports.SaveRun(dir, v1Out.Run)
	data, _ := json.Marshal(v1)
	h := fakeHistory{
		{ID: 1, State: store.JobDone, RunDir: dir, Request: data},
		{ID: 2, State: store.JobFailed, RunDir: t.TempDir(), Request: data}, // gave up: not a measurement
	}
	v2 := seriesRequest(1)
	v2.Series.Version = 2
	out := execute(t, &Pipeline{Builder: &prefixBuilder{}, Tester: &effectTester{effect: single(1)}, History: h}, v2)
	pv := out.Run.Previous
	if pv == nil || pv.Version != 1 || pv.Metric != "wakeups_per_release" || !pv.NowMeasured {
		t.Fatalf("previous %+v", pv)
	}
	if pv.Change > -0.6 || pv.Change < -0.7 || pv.Now > -0.85 {
		t.Errorf("v1 %.3f, v2 %.3f: want about -66%% and -89%%", pv.Change, pv.Now)
	}
	want := "v1 of this series, tested on 2026-11-30, measured read-storm scheduler"
	if !says(out.Reply.Body, want) || !says(out.Reply.Body, "this version: -88.5% (significant)") {
		t.Errorf("reply lacks the v1 comparison:\n%s", out.Reply.Body)
	}
	// Another author's series of the same title is not v1.
	other := *v1
	other.Series.Author = "someone@example.org"
	data, _ = json.Marshal(&other)
	h[0].Request = data
	out = execute(t, &Pipeline{Builder: &prefixBuilder{}, Tester: &effectTester{effect: single(1)}, History: h}, v2)
	if out.Run.Previous != nil {
		t.Errorf("previous %+v from another author's series", out.Run.Previous)
	}
}
