package judge

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"sort"

	"gopkg.in/yaml.v3"

	"github.com/patchbot/patchbot/judge/stats"
	"github.com/patchbot/patchbot/suites"
)

// Panel is the set of patches with known effects that proves a profile and
// the rule (testdata/panel/panel.yaml): each patch applies to the default
// tree, and its expected outcome and direction per primary metric were
// established apart from the profile under test (Source says how).
type Panel struct {
	Patches []PanelPatch `yaml:"patches"`
}

// PanelPatch is one patch of the panel.
type PanelPatch struct {
	Name  string `yaml:"name"`
	Mbox  string `yaml:"mbox"` // relative to the panel file
	Class string `yaml:"class"`
	Suite string `yaml:"suite"`
	// Expect is the outcome a verdict must reach: "improvement",
	// "regression", "mixed" or "no change"; "unknown" when no independent
	// measurement has established it yet (the verdict is shown, not
	// scored).
	Expect Outcome `yaml:"expect"`
	// Metrics is the expected direction of primary metrics, by
	// "workload.metric": "better", "worse" or "same" (a change within the
	// smallest effect of interest, or none the run can see). A metric not
	// named may go either way or stay: its direction was not established.
	Metrics map[string]string `yaml:"metrics"`
	// Source says how the expectation was established, independently of
	// the profile under test.
	Source string `yaml:"source"`
}

// LoadPanel reads a panel file strictly (unknown keys are errors).
func LoadPanel(path string) (*Panel, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	var p Panel
	if err := dec.Decode(&p); err != nil {
		return nil, fmt.Errorf("panel %s: %w", path, err)
	}
	seen := map[string]bool{}
	for i, pp := range p.Patches {
		switch {
		case pp.Name == "" || seen[pp.Name]:
			return nil, fmt.Errorf("panel %s: patch %d: a name, once", path, i+1)
		case pp.Mbox == "" || pp.Suite == "" || pp.Source == "":
			return nil, fmt.Errorf("panel %s: %s: mbox, suite and source are required", path, pp.Name)
		}
		switch pp.Expect {
		case Improvement, Regression, Mixed, NoChange, Unknown:
		default:
			return nil, fmt.Errorf("panel %s: %s: expect %q: want improvement, regression, mixed, no change or unknown", path, pp.Name, pp.Expect)
		}
		for m, d := range pp.Metrics {
			if d != "better" && d != "worse" && d != "same" {
				return nil, fmt.Errorf("panel %s: %s: %s: direction %q: want better, worse or same", path, pp.Name, m, d)
			}
		}
		if _, err := os.Stat(filepath.Join(filepath.Dir(path), pp.Mbox)); err != nil {
			return nil, fmt.Errorf("panel %s: %s: %w", path, pp.Name, err)
		}
		seen[pp.Name] = true
	}
	return &p, nil
}

// PanelVerdict is one patch's measured verdict against its expectation.
type PanelVerdict struct {
	Patch   PanelPatch
	Outcome Outcome
	// Right: the outcome is the expected one.
	Right bool
	// WrongDirection names the primary metrics called a change the other
	// way from their expected direction (better for worse, or the
	// reverse), and is set when the outcome is the opposite of the
	// expected one (an improvement for a regression).
	WrongDirection []string
	Runs           int    // rounds a side the rule used
	Stop           string // why: settled, futile, max
	Comparison     *Comparison
}

// JudgePanel judges each patch's measured results (base and patched, in
// the order measured) with the rule, as the pipeline would have (Replay),
// against its expectation.
func JudgePanel(p PanelPatch, base, patched []suites.Result, rule stats.Rule, opt Options) (*PanelVerdict, error) {
	c, err := Replay(base, patched, rule, opt)
	if err != nil {
		return nil, err
	}
	v := &PanelVerdict{Patch: p, Outcome: c.Outcome(), Comparison: c}
	v.Right = v.Outcome == p.Expect
	if j, ok := c.Judgement(p.Suite); ok {
		v.Runs = j.Runs
		switch {
		case j.Settled:
			v.Stop = suites.StopSettled
		case j.Futile:
			v.Stop = suites.StopFutile
		case j.Runs < rule.Max:
			// the rule would have gone on: fewer rounds were measured
			v.Stop = StopTruncated
		default:
			v.Stop = suites.StopMax
		}
	}
	for _, r := range c.PrimaryRows() {
		want := p.Metrics[r.Workload+"."+r.Metric]
		if r.Called && (want == "better" && r.Worse() || want == "worse" && r.Better()) {
			v.WrongDirection = append(v.WrongDirection, r.Workload+"."+r.Metric)
		}
	}
	if p.Expect == Regression && v.Outcome == Improvement || p.Expect == Improvement && v.Outcome == Regression {
		v.WrongDirection = append(v.WrongDirection, "outcome")
	}
	return v, nil
}

// RoundsByClass is the median number of rounds a side per class of the
// panel, for the docs' table.
func RoundsByClass(vs []*PanelVerdict) map[string]float64 {
	by := map[string][]float64{}
	for _, v := range vs {
		by[v.Patch.Class] = append(by[v.Patch.Class], float64(v.Runs))
	}
	out := map[string]float64{}
	for k, xs := range by {
		sort.Float64s(xs)
		out[k] = stats.Summarize(xs).Median
	}
	return out
}

// StopTruncated is a panel verdict's stop when the measured rounds ran
// out before the rule would have stopped: the verdict is the one at the
// last measured look.
const StopTruncated = "measured rounds ran out"
