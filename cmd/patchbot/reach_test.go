package main

import (
	"bytes"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/patchbot/patchbot/judge/stats"
	"github.com/patchbot/patchbot/suites"
)

// The recorded A/A runs of readahead on instruction-counted time
// (testdata/aa/icount, docs/suites.md "Reach and rounds at the rule's
// stop"), judged with the pipeline's rule: every run stops by the rule's
// maximum, settled or futile rather than cut short, and at its stop every
// primary metric could have seen the suite's promise. The rule or the
// profile changing so that a no-op no longer reaches 10% fails here.
func TestReachOfRecordedAA(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("..", "..", "testdata", "aa", "icount", "readahead-*.json"))
	if err != nil || len(files) < 10 {
		t.Fatalf("want the 10 recorded A/A runs, have %d (%v)", len(files), err)
	}
	runs, err := judgeReach(files, stats.DefaultRule)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range runs {
		if r.runs > stats.DefaultRule.Max || (r.stop != suites.StopSettled && r.stop != suites.StopFutile && r.stop != suites.StopMax) {
			t.Errorf("%s: stopped at %d rounds (%s)", r.file, r.runs, r.stop)
		}
		if len(r.reach) != 6 {
			t.Errorf("%s: %d primary metrics, want readahead's 6", r.file, len(r.reach))
		}
		for m, d := range r.reach {
			if d <= 0 || d > r.promise {
				t.Errorf("%s: %s could see %.1f%% at the stop, the promise is %.0f%%", r.file, m, 100*d, 100*r.promise)
			}
		}
	}
	var out bytes.Buffer
	if err := printReach(&out, runs, true); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "readahead: 10 runs, median") || strings.Contains(out.String(), "wider than the promise") {
		t.Errorf("summary:\n%s", out.String())
	}
	// Each side one boot: the lt256K 4-reader cell's A/A changes spread
	// wider than its intervals allow, the boots' difference the rounds
	// did not show (its one false positive), and so, by a little, do
	// 2M-5M's 4 readers'; the other cells' intervals hold.
	for _, l := range strings.Split(out.String(), "\n") {
		if !strings.Contains(l, " scores spread ") {
			continue
		}
		narrow := strings.Contains(l, "too narrow")
		if (strings.Contains(l, "lt256K readers=4") || strings.Contains(l, "2M-5M readers=4")) != narrow {
			t.Errorf("calibration: %s", l)
		}
	}
	if !regexp.MustCompile(`lt256K readers=4\] +changes +2\.08%, standard error +1\.07% \(median\); scores spread 1\.66 \(by chance at most 1\.35\) +\(the intervals are too narrow\)`).MatchString(out.String()) {
		t.Errorf("no calibration of lt256K's 4 readers:\n%s", out.String())
	}

	// A fresh boot a round (testdata/aa/reboot): every cell's intervals
	// hold.
	files, err = filepath.Glob(filepath.Join("..", "..", "testdata", "aa", "reboot", "readahead-*.json"))
	if err != nil || len(files) < 10 {
		t.Fatalf("want the 10 recorded A/A runs with a boot a round, have %d (%v)", len(files), err)
	}
	if runs, err = judgeReach(files, stats.DefaultRule); err != nil {
		t.Fatal(err)
	}
	out.Reset()
	if err := printReach(&out, runs, true); err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(out.String(), " scores spread "); n != 6 || strings.Contains(out.String(), "too narrow") {
		t.Errorf("with a boot a round, %d cells' calibration, want 6 that hold:\n%s", n, out.String())
	}
}
