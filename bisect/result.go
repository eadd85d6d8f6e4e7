package bisect

import (
	"math"
	"sort"

	"github.com/patchbot/patchbot/judge"
)

// Result is the series' change traced over its prefixes, on one primary
// metric: the bisection's outcome, which the reply presents.
type Result struct {
	judge.MetricID
	// Steps are the prefixes measured, ascending; the last is the whole
	// series' (or range's) own measurement.
	Steps []Step `json:"steps"`
	// Cause is the patch the change comes from (1-based); 0 when no single
	// patch carries it (Spread) or the bisection stopped.
	Cause  int  `json:"cause,omitempty"`
	Spread bool `json:"spread,omitempty"`
	// Stopped says why the bisection ended before a conclusion.
	Stopped string `json:"stopped,omitempty"`
	// Measurements is the number of A/B measurements the bisection added.
	Measurements int `json:"measurements"`

	whole float64 // the whole change on the log scale, while it is searched
}

// Step is one prefix (patches 1..Prefix) measured against the A side.
type Step struct {
	Prefix  int    `json:"prefix"`
	Subject string `json:"subject"`
	// Change is the relative change of the metric's mean; Fraction the
	// share of the whole series' change (on the log scale) the prefix
	// already has: about 0 before the cause, about 1 from it on.
	Change      float64 `json:"change"`
	Fraction    float64 `json:"fraction"`
	Significant bool    `json:"significant"`
	Runs        int     `json:"runs"`
	// Whole marks the series' own measurement, not an extra one.
	Whole bool `json:"whole,omitempty"`
}

// The attribution rule: which share of the series' change a prefix
// carries, whether it carries the change, and whether one patch does.

// newResult starts the trace of the change key (judge.KeyChange) over a
// series: its metric, and the whole series' (or range's) own measurement
// as the step of prefix last.
func newResult(key judge.Row, last int, subject string) *Result {
	bi := &Result{MetricID: key.MetricID, whole: key.LogRatio()}
	bi.Steps = []Step{{Prefix: last, Subject: subject, Change: key.Change, Fraction: 1,
		Significant: true, Runs: key.Patched.N, Whole: true}}
	return bi
}

// stepOf judges one prefix's measurement c by the bisection's metric: its
// change, the share of the whole change it has (on the log scale), and
// whether it changed the metric the same way (judge.Row.Changed). ok is
// false when c did not measure the metric.
func (bi *Result) stepOf(c *judge.Comparison, prefix int, subject string, runs int) (s Step, ok bool) {
	s = Step{Prefix: prefix, Subject: subject, Runs: runs}
	r, ok := c.Find(bi.MetricID)
	if ok {
		s.Change, s.Fraction = r.Change, r.LogRatio()/bi.whole
		s.Significant = r.Changed() && math.Signbit(r.LogRatio()) == math.Signbit(bi.whole)
	}
	return s, ok
}

// Carries says whether a prefix carries the change: at least half of it,
// on the log scale. The search looks below a prefix that carries it, and
// above one that does not.
func (s Step) Carries() bool { return s.Fraction >= 0.5 }

// add keeps a measured step, in prefix order.
func (bi *Result) add(s Step) {
	bi.Steps = append(bi.Steps, s)
	sort.Slice(bi.Steps, func(i, j int) bool { return bi.Steps[i].Prefix < bi.Steps[j].Prefix })
}

// conclude says what the search found, when it ran to its end between
// prefix lo (which does not carry the change; below first: the A side,
// none of it) and prefix hi (which does): the change comes from patch hi
// when lo has almost none of it (at most a quarter) and hi almost all (at
// least three quarters); otherwise it is spread over the series.
func (bi *Result) conclude(lo, hi, first int) {
	if bi.Stopped != "" {
		return
	}
	fLo, fHi := 0.0, 0.0
	for _, s := range bi.Steps {
		if s.Prefix == lo && lo >= first {
			fLo = s.Fraction
		}
		if s.Prefix == hi {
			fHi = s.Fraction
		}
	}
	if fLo <= 0.25 && fHi >= 0.75 {
		bi.Cause = hi
	} else {
		bi.Spread = true
	}
}
