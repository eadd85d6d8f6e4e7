package reports

import (
	"math"
	"sort"
)

// The per-patch attribution rule: which metric a series changed, how much
// of that change a prefix of the series carries, and whether one patch
// carries it. Package bisect searches a series' prefixes with it; a
// reroll's reply sets the earlier version's measurement beside this one's
// by it.

// Changed is the rule for "the series changed this metric": the
// comparison's own judgement (significant within its family, after the
// correction for the family's size), with a change to speak of.
func (r Row) Changed() bool { return r.Significant && r.HasChange() }

// KeyChange is the metric a bisection follows: of the rows the series
// changed, the most significant, then the largest change.
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

// SameMetric says whether two rows, of two comparisons, are the same
// suite, workload, cell and metric.
func (r Row) SameMetric(o Row) bool {
	return r.Suite == o.Suite && r.Workload == o.Workload && r.Cell() == o.Cell() && r.Metric == o.Metric
}

// NewBisection starts the trace of the change key over a series: its
// metric, and the whole series' (or range's) own measurement as the step
// of prefix last.
func NewBisection(key Row, last int, subject string) *Bisection {
	bi := &Bisection{Suite: key.Suite, Workload: key.Workload, Params: key.Params, Metric: key.Metric,
		Unit: key.Unit, HigherIsBetter: key.HigherIsBetter, whole: key.LogRatio()}
	bi.Steps = []BisectStep{{Prefix: last, Subject: subject, Change: key.Change, Fraction: 1,
		Significant: true, Runs: key.Patched.N, Whole: true}}
	return bi
}

// StepOf judges one prefix's measurement c by the bisection's metric: its
// change, the share of the whole change it has (on the log scale), and
// whether it changed the metric the same way. ok is false when c did not
// measure the metric.
func (bi *Bisection) StepOf(c *Comparison, prefix int, subject string, runs int) (s BisectStep, ok bool) {
	key := Row{Suite: bi.Suite, Workload: bi.Workload, Params: bi.Params, Metric: bi.Metric}
	whole := bi.whole
	s = BisectStep{Prefix: prefix, Subject: subject, Runs: runs}
	for _, r := range c.Rows {
		if r.SameMetric(key) {
			s.Change, s.Fraction = r.Change, r.LogRatio()/whole
			s.Significant = r.Changed() && math.Signbit(r.LogRatio()) == math.Signbit(whole)
			ok = true
		}
	}
	return s, ok
}

// Carries says whether a prefix carries the change: at least half of it,
// on the log scale. The search looks below a prefix that carries it, and
// above one that does not.
func (s BisectStep) Carries() bool { return s.Fraction >= 0.5 }

// Add keeps a measured step, in prefix order.
func (bi *Bisection) Add(s BisectStep) {
	bi.Steps = append(bi.Steps, s)
	sort.Slice(bi.Steps, func(i, j int) bool { return bi.Steps[i].Prefix < bi.Steps[j].Prefix })
}

// Conclude says what the search found, when it ran to its end between
// prefix lo (which does not carry the change; below first: the A side,
// none of it) and prefix hi (which does): the change comes from patch hi
// when lo has almost none of it (at most a quarter) and hi almost all (at
// least three quarters); otherwise it is spread over the series.
func (bi *Bisection) Conclude(lo, hi, first int) {
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
