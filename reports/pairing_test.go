package reports

import (
	"math"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/patchbot/patchbot/judge"
	"github.com/patchbot/patchbot/judge/stats"
)

// Pairing the base and patched rounds of a turn is the better estimator
// only where the host's drift between turns outweighs the noise of a
// round. On the recorded A/A runs it does not: every one of them judged
// at its 10 rounds a side by the default rule's last look, the paired
// test calls changes in A/A runs that log-Welch does not, and its
// intervals are not narrower on the median. So the default test stays
// unpaired (stats.DefaultTest); docs/reports.md has the figures this logs.
func TestPairingOnKnownAA(t *testing.T) {
	dirs, err := filepath.Glob(filepath.Join("testdata", "known", "aa-*"))
	if err != nil || len(dirs) < 10 {
		t.Fatalf("want the recorded A/A runs, found %d (%v)", len(dirs), err)
	}
	rule := stats.Fixed(stats.RuleBefore.Final())
	calls := map[stats.Test]int{}
	var ratios []float64
	runs := 0
	for _, dir := range dirs {
		base, err := ReadResults(filepath.Join(dir, BaseFile))
		if err != nil {
			t.Fatal(err)
		}
		patched, err := ReadResults(filepath.Join(dir, PatchedFile))
		if err != nil {
			t.Fatal(err)
		}
		half := map[stats.Test]map[string]float64{}
		for _, test := range []stats.Test{stats.LogWelch, stats.PairedLog} {
			c, err := judge.Compare(base, patched, judge.Options{Test: test, Rule: &rule})
			if err != nil {
				t.Fatal(err)
			}
			half[test] = map[string]float64{}
			var called []string
			for _, r := range c.PrimaryRows() {
				if r.Called {
					called = append(called, r.Name())
				}
				if test == stats.PairedLog && !r.Paired {
					t.Errorf("%s: %s was not paired", dir, r.Name())
				}
				if r.Interval.Defined {
					half[test][r.Name()] = math.Log(r.Interval.High / r.Interval.Low)
				}
			}
			if len(called) > 0 {
				calls[test]++
				t.Logf("%s, %s: called %s", filepath.Base(dir), test, strings.Join(called, ", "))
			}
		}
		for name, w := range half[stats.LogWelch] {
			if p, ok := half[stats.PairedLog][name]; ok && w > 0 {
				ratios = append(ratios, p/w)
			}
		}
		runs++
	}
	sort.Float64s(ratios)
	narrower := sort.SearchFloat64s(ratios, 1)
	median := ratios[len(ratios)/2]
	t.Logf("%d A/A runs: log-Welch calls a change in %d, paired in %d; the paired interval is narrower for %d of %d primary metrics, median width ratio %.3f",
		runs, calls[stats.LogWelch], calls[stats.PairedLog], narrower, len(ratios), median)
	better := stats.LogWelch
	if calls[stats.PairedLog] < calls[stats.LogWelch] || calls[stats.PairedLog] == calls[stats.LogWelch] && median < 1 {
		better = stats.PairedLog
	}
	if stats.DefaultTest != better {
		t.Errorf("the default test is %s, but on the recorded A/A runs %s is the better estimator", stats.DefaultTest, better)
	}
}
