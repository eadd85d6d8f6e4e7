package reports

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/patchbot/patchbot/judge"
	"github.com/patchbot/patchbot/judge/stats"
)

// Known answers, on results measured in VMs (reports/testdata/known/CASE/
// base.json and patched.json, each run recorded with a fixed number of
// rounds and judged here as the pipeline's sequential rule would have):
//
//	seed-*          the seed patch: an improvement of its primary metrics;
//	                seed-1 to seed-3, recorded with earlier profiles whose
//	                throughput and latency spread too widely to settle in 5
//	                rounds, show only the mechanism: no change in throughput
//	                or latency, wake-ups per release cut (countersOnly)
//	comment-only-*  a patch that changes a comment: no change
//	aa-*            the base kernel on both sides: no change on any metric,
//	                primary or derived (a significant one that a guard stops
//	                is logged)
//
// docs/reports.md says how each was measured.
func TestKnownAnswers(t *testing.T) {
	countersOnly := map[string]bool{"seed-1": true, "seed-2": true, "seed-3": true}
	dirs, err := filepath.Glob(filepath.Join("testdata", "known", "*"))
	if err != nil {
		t.Fatal(err)
	}
	if len(dirs) == 0 {
		t.Fatal("no recorded runs in testdata/known")
	}
	for _, dir := range dirs {
		if fi, err := os.Stat(dir); err != nil || !fi.IsDir() {
			continue // the README
		}
		name := filepath.Base(dir)
		t.Run(name, func(t *testing.T) {
			base, err := ReadResults(filepath.Join(dir, BaseFile))
			if err != nil {
				t.Fatal(err)
			}
			patched, err := ReadResults(filepath.Join(dir, PatchedFile))
			if err != nil {
				t.Fatal(err)
			}
			c, err := judge.Replay(base, patched, stats.RuleBefore, judge.Options{})
			if err != nil {
				t.Fatal(err)
			}
			v := Verdict(c)
			t.Logf("%s after %d runs a side: %s", name, c.Suites[0].Runs, v)
			switch {
			case countersOnly[name]:
				if c.Outcome() != judge.NoChange || !strings.Contains(v, "No change in throughput or latency; the patch cuts read-storm scheduler wake-ups per cache release") {
					t.Errorf("%s is judged %q, want no change in throughput or latency and the mechanism cited:\n%s", name, c.Outcome(), v)
				}
			case strings.HasPrefix(name, "seed-"):
				if c.Outcome() != judge.Improvement {
					t.Errorf("the seed patch is judged %q, want an improvement:\n%s", c.Outcome(), v)
				}
			case strings.HasPrefix(name, "comment-only-"):
				if c.Outcome() != judge.NoChange {
					t.Errorf("a comment-only patch is judged %q, want no change:\n%s", c.Outcome(), v)
				}
			case strings.HasPrefix(name, "aa-"):
				for _, r := range c.Rows {
					switch {
					case r.Called:
						t.Errorf("A/A: %s changed (%+.1f%%, adjusted p %.3g)", r.Name(), 100*(r.Interval.Ratio-1), r.AdjustedP)
					case r.Significant:
						t.Logf("A/A: %s significant (%+.1f%%), not called: %s", r.Name(), 100*(r.Interval.Ratio-1), r.Guard)
					}
				}
			default:
				t.Fatalf("%s: no known answer for this name", name)
			}
		})
	}
}
