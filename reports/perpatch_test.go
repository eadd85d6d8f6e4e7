package reports

import (
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/patchbot/patchbot/bisect"
	"github.com/patchbot/patchbot/judge"
	"github.com/patchbot/patchbot/suites"
)

// Long subjects, titles, hunks and warnings still give a reply whose
// lines fit, and every per-patch part is there.
func TestPerPatchPartsFit(t *testing.T) {
	long := strings.Repeat("squashfs: a subject that goes on and on ", 4)
	sample := func(kernel string, v float64) []suites.Result {
		r := suites.Result{Suite: "cache-contention", Kernel: kernel, Accel: "tcg", CPUs: 2, MemMiB: 1024}
		for i := 0; i < 5; i++ {
			r.Samples = append(r.Samples, suites.Sample{Suite: "cache-contention", Workload: "read-storm",
				Params: map[string]string{"threads": "64"}, Metric: "wakeups_per_release", Unit: "wakeups/release",
				Round: i + 1, Value: v * (1 + float64(i%3-1)*0.02)})
		}
		return []suites.Result{r}
	}
	run := &Run{
		Thread:     Thread{Subject: "[PATCH 0/3] " + long, MessageID: "<c@example.org>", Author: "A <a@example.org>"},
		BaseCommit: "1111111111111111111111111111111111111111", BaseTitle: "Import Debian linux-source-6.1 6.1.192-3", Runs: 5, Finished: time.Now(),
		Series: 3, Base: sample("base", 9.6), Patched: sample("patched", 1.1),
		BaseChoice: &BaseChoice{Tree: "mainline", How: ByApplying, Notes: []string{"the series' base-commit 0123456789ab is in none of the trees " + long},
			Tried: []TriedBase{{Tree: "next", Commit: "2222222222222222222222222222222222222222", Title: long,
				Patch: `2/3 ("` + long + `")`, Hunk: "error: while searching for:\n\t\t\t\t" + long + long + "\nerror: patch failed"},
				{Tree: "mainline"}}},
		Builds: []PatchBuild{{Index: 1, Subject: long, NewWarnings: []string{"fs/squashfs/cache.c:12: warning: " + long + " [-Wunused-variable]"}},
			{Index: 2, Subject: long, Stage: judge.StageBuild, Errors: []string{"fs/squashfs/cache.c:42:2: error: " + long}},
			{Index: 3, Subject: long}},
		Bisection: &bisect.Result{MetricID: judge.MetricID{Suite: "cache-contention", Workload: "read-storm", Params: map[string]string{"threads": "64"},
			Metric: "wakeups_per_release", Unit: "wakeups/release"}, Cause: 3, Measurements: 1,
			Steps: []bisect.Step{{Prefix: 2, Subject: long, Change: 0.01, Fraction: 0.02, Runs: 3},
				{Prefix: 3, Subject: long, Change: -0.885, Fraction: 1, Significant: true, Runs: 5, Whole: true}}},
		Previous: &Previous{Version: 1, Tested: time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC), MetricID: judge.MetricID{Suite: "cache-contention",
			Workload: "read-storm", Params: map[string]string{"threads": "64"}, Metric: "wakeups_per_release"},
			Change: -0.5, Significant: true, Now: -0.885, NowSignificant: true, NowMeasured: true},
	}
	r, err := Render(run, ReplyOptions{From: "patchbot <p@example.org>"})
	if err != nil {
		t.Fatal(err)
	}
	for i, l := range strings.Split(r.Body, "\n") {
		if n := utf8.RuneCountInString(l); n > MaxColumns {
			t.Errorf("line %d is %d wide: %q", i+1, n, l)
		}
	}
	flat := strings.Join(strings.Fields(r.Body), " ")
	for _, want := range []string{"Tested on mainline at 111111111111", "It does not apply to:",
		"The first patch that breaks the build is 2/3", "A later patch mends it", "The change comes from 3/3",
		"(The bisection took 1 measurement beyond the series' own.)", "v1 of this series, tested on 2026-11-30",
		"base: 111111111111", "tree: mainline"} {
		if !strings.Contains(flat, want) {
			t.Errorf("reply lacks %q:\n%s", want, r.Body)
		}
	}
}
