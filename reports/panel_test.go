package reports

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/patchbot/patchbot/judge"
	"github.com/patchbot/patchbot/judge/stats"
	"github.com/patchbot/patchbot/suites"
)

// The panel file holds at least ten patches with a source each, across
// the classes the detector is proven on, and every mbox it names exists.
func TestPanelFile(t *testing.T) {
	p, err := judge.LoadPanel(filepath.Join("..", "testdata", "panel", "panel.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	scored := 0
	classes := map[string]bool{}
	for _, pp := range p.Patches {
		if pp.Expect != judge.Unknown {
			scored++
		}
		classes[strings.Fields(pp.Class)[0]] = true
	}
	if len(p.Patches) < 10 || scored < 10 {
		t.Errorf("%d patches, %d with an established expectation: want at least 10", len(p.Patches), scored)
	}
	for _, c := range []string{"no-op", "cache", "added", "lock", "wake", "FUSE", "readahead"} {
		if !classes[c] {
			t.Errorf("no patch of class %q", c)
		}
	}
	// The panel covers every suite (issue 39): each has a no-op, a
	// regression and an improvement with an established expectation, and
	// every expected direction names one of its suite's primary metrics.
	all, err := suites.All()
	if err != nil {
		t.Fatal(err)
	}
	known := map[string]map[string]bool{}
	for _, s := range all {
		known[s.Name] = map[string]bool{}
		for _, m := range s.Verdict.Primary {
			known[s.Name][m.Workload+"."+m.Metric] = true
		}
	}
	expect := map[string]map[judge.Outcome]bool{}
	for _, pp := range p.Patches {
		primary, ok := known[pp.Suite]
		if !ok {
			t.Errorf("%s: no suite %q", pp.Name, pp.Suite)
			continue
		}
		for m := range pp.Metrics {
			if !primary[m] {
				t.Errorf("%s: %s is not a primary metric of %s", pp.Name, m, pp.Suite)
			}
		}
		if expect[pp.Suite] == nil {
			expect[pp.Suite] = map[judge.Outcome]bool{}
		}
		expect[pp.Suite][pp.Expect] = true
	}
	for _, s := range all {
		for _, o := range []judge.Outcome{judge.NoChange, judge.Regression, judge.Improvement} {
			if !expect[s.Name][o] {
				t.Errorf("suite %s: no panel patch expected to be %q", s.Name, o)
			}
		}
	}
}

// A panel verdict is right when the outcome is the expected one, and in
// the wrong direction when it is the opposite: judged on recorded runs
// (the seed, an A/A run as a no-op) and on the seed's run read backwards.
func TestJudgePanel(t *testing.T) {
	load := func(dir string) ([]suites.Result, []suites.Result) {
		t.Helper()
		b, p, err := ReadPanelResults(filepath.Join("testdata", "known", dir))
		if err != nil {
			t.Fatal(err)
		}
		return b, p
	}
	seed := judge.PanelPatch{Name: "seed", Suite: "cache-contention", Expect: judge.Improvement,
		Metrics: map[string]string{"read-storm.files_per_s": "better"}}
	b, p := load("seed-19")
	v, err := judge.JudgePanel(seed, b, p, stats.RuleBefore, judge.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if !v.Right || len(v.WrongDirection) > 0 || v.Runs != 4 || v.Stop != "settled" {
		t.Errorf("seed-19: right %v, wrong %v, %d runs, stop %q", v.Right, v.WrongDirection, v.Runs, v.Stop)
	}
	// Backwards, the seed is a regression: the wrong direction.
	v, err = judge.JudgePanel(seed, p, b, stats.RuleBefore, judge.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if v.Right || len(v.WrongDirection) == 0 {
		t.Errorf("the seed backwards: right %v, wrong direction %v", v.Right, v.WrongDirection)
	}
	noop := judge.PanelPatch{Name: "noop", Suite: "cache-contention", Expect: judge.NoChange}
	b, p = load("aa-19")
	if v, err = judge.JudgePanel(noop, b, p, stats.RuleBefore, judge.Options{}); err != nil || !v.Right || v.Stop != "futile" {
		t.Errorf("aa-19 as a no-op: %+v, %v", v, err)
	}
	var out strings.Builder
	if err := WritePanel(&out, []*judge.PanelVerdict{v}); err != nil || !strings.Contains(out.String(), "1 of 1 scored verdicts right, 0 in the wrong direction") {
		t.Errorf("table:\n%s (%v)", out.String(), err)
	}
}
