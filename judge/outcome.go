package judge

import "math"

// Outcome is what the patch did to the primary metrics, in the words the
// verdict opens with.
type Outcome string

const (
	Improvement Outcome = "improvement" // some primary metrics improved, none regressed
	Regression  Outcome = "regression"  // some regressed, none improved
	Mixed       Outcome = "mixed"       // some of each
	NoChange    Outcome = "no change"   // none changed
	NotJudged   Outcome = "not judged"  // too few runs to judge any
	// Unknown is no outcome: a panel patch whose expected outcome no
	// independent measurement has established (PanelPatch.Expect).
	Unknown Outcome = "unknown"
)

// Outcome judges the comparison by its primary metrics alone: only changes
// called as such (significant within their family, past the guards) count.
func (c *Comparison) Outcome() Outcome {
	judged, better, worse := 0, 0, 0
	for _, r := range c.PrimaryRows() {
		if !r.Judged {
			continue
		}
		judged++
		switch {
		case !r.Called:
		case r.Better():
			better++
		case r.Worse():
			worse++
		}
	}
	switch {
	case judged == 0:
		return NotJudged
	case better > 0 && worse > 0:
		return Mixed
	case worse > 0:
		return Regression
	case better > 0:
		return Improvement
	}
	return NoChange
}

// Regressed reports whether any primary metric regressed: a reply then
// suggests the Reported-by: and Closes: tags.
func (c *Comparison) Regressed() bool {
	o := c.Outcome()
	return o == Regression || o == Mixed
}

// Changed is the rule for "the series changed this metric": the
// comparison's own judgement (significant within its family, after the
// correction for the family's size), with a change to speak of. A
// bisection follows such a change; a reroll's reply sets the earlier
// version's measurement beside this one's by it.
func (r Row) Changed() bool { return r.Significant && r.HasChange() }

// KeyChange is the metric a series changed most: of the rows it changed,
// the most significant, then the largest change. A bisection follows it;
// a reroll's reply compares it with the earlier version's.
func KeyChange(c *Comparison) (Row, bool) {
	var best Row
	found := false
	for _, r := range c.Rows {
		if !r.Changed() {
			continue
		}
		if !found || r.AdjustedP < best.AdjustedP ||
			(r.AdjustedP == best.AdjustedP && math.Abs(r.LogRatio()) > math.Abs(best.LogRatio())) {
			best, found = r, true
		}
	}
	return best, found
}

// LogRatio is the size of a row's change on the log scale (the scale the
// suites' counters and times are judged on), or the relative change of a
// metric that is not positive.
func (r Row) LogRatio() float64 {
	if r.Base.Mean > 0 && r.Patched.Mean > 0 {
		return math.Log(r.Patched.Mean / r.Base.Mean)
	}
	return r.Change
}

// Find returns the row of c that measured the metric id names.
func (c *Comparison) Find(id MetricID) (*Row, bool) {
	for i := range c.Rows {
		if c.Rows[i].Same(id) {
			return &c.Rows[i], true
		}
	}
	return nil, false
}
