package stats

import (
	"math"
	"sort"
)

// The family correction: the metrics of one family (a suite's primary
// metrics, its mechanism counters, its derived counters) are judged
// together, so that a suite's many counters take no power from its few
// primary metrics, and within a family the chance that any of its
// unchanged metrics is called changed stays at the level.
//
// Two corrections (Correction): Holm-Bonferroni's step-down, which holds
// whatever the metrics' dependence, and Hochberg's step-up, which holds
// when the metrics' test statistics are positively dependent (Sarkar
// 1998), as a suite's are: every metric of a family is measured in the
// same rounds of the same two boots. They agree for a lone change (it
// must reach the level over the family's size); they part for a change
// the whole family shows, as a curve does when a patch slows every cell of
// it: under Holm the smallest p-value must still reach level/m before any
// counts, under Hochberg every metric counts once the largest p-value
// reaches the level. A locks curve of 8 cells that a patch moved by the
// same amount is then called at the level, not at an eighth of it.
// TestFamilyCorrections simulates both, the false positives of correlated
// A/A families included.

// Correction is how a family's p-values are adjusted for its size.
type Correction string

const (
	// CorrectHolm is Holm-Bonferroni's step-down, the correction of every
	// rule recorded before Correction was a key.
	CorrectHolm Correction = "holm"
	// CorrectHochberg is Hochberg's step-up.
	CorrectHochberg Correction = "hochberg"
)

// Adjust returns the family's adjusted p-values, in the input's order.
func (c Correction) Adjust(ps []float64) []float64 {
	if c == CorrectHochberg {
		return Hochberg(ps)
	}
	return Holm(ps)
}

func (c Correction) valid() bool { return c == "" || c == CorrectHolm || c == CorrectHochberg }

// Hochberg adjusts p-values with Hochberg's step-up method (R's
// p.adjust(p, "hochberg")): the i-th smallest of m p-values becomes the
// least of (m-j+1) p_(j) over j >= i, capped at 1. The result is in the
// input's order.
func Hochberg(ps []float64) []float64 {
	m := len(ps)
	idx := ascending(ps)
	adj := make([]float64, m)
	running := 1.0
	for rank := m - 1; rank >= 0; rank-- {
		i := idx[rank]
		running = math.Min(running, float64(m-rank)*ps[i])
		adj[i] = math.Min(1, running)
	}
	return adj
}

// Pair is one metric of a family: each kernel's runs. Turns says that
// Base[i] and Patched[i] were measured in the same turn of interleaved
// rounds, so that a paired test may pair them.
type Pair struct {
	Base, Patched []float64
	Turns         bool
}

// Judgement is one metric judged at one look.
type Judgement struct {
	// Judged is false when a side has fewer than MinSamples runs.
	Judged    bool
	P         float64 // the test's p-value
	AdjustedP float64 // after the family's correction (Correction)
	Interval  Interval
	// Estimate is the change on the test's scale (for MannWhitney,
	// LogWelch's), from which the interval, the minimum detectable effect
	// and the chance to settle come.
	Estimate Estimate
	// Significant: AdjustedP below the look's level.
	Significant bool
	// Within: the interval excludes every change larger than the smallest
	// effect of interest.
	Within bool
	// Detectable is the metric's minimum detectable effect at this look
	// (Detectable); Reaches says whether it is as small as the smallest
	// effect of interest, or the rule does not ask (Rule.Reach).
	Detectable float64
	Reaches    bool
}

// Settled reports whether more runs are not needed for this metric: it
// changed significantly, or it cannot have changed by as much as matters
// and, where the rule asks, the run could have seen such a change.
func (j Judgement) Settled() bool { return j.Judged && (j.Significant || j.Within && j.Reaches) }

// JudgeFamily judges the metrics of one family together at level under
// rule: each by test t with its Confidence interval, corrected for the
// family's size by the rule's correction (among the judged metrics only),
// Within against smallest, the smallest effect of interest as a fraction
// (0.1 for 10%), and with its minimum detectable effect at level.
func JudgeFamily(t Test, rule Rule, level, smallest float64, family []Pair) []Judgement {
	out := make([]Judgement, len(family))
	var idx []int
	var ps []float64
	for i, m := range family {
		j := &out[i]
		j.P, j.AdjustedP = 1, 1
		if len(m.Base) < MinSamples || len(m.Patched) < MinSamples {
			continue
		}
		j.Judged = true
		j.Estimate = t.Estimate(m)
		if t == MannWhitney {
			j.P = t.PValue(m.Base, m.Patched)
		} else {
			j.P = j.Estimate.PValue()
		}
		j.Interval = j.Estimate.Interval(Confidence)
		j.Within = j.Interval.Within(smallest)
		idx = append(idx, i)
		ps = append(ps, j.P)
	}
	for k, adj := range rule.Corrects().Adjust(ps) {
		j := &out[idx[k]]
		j.AdjustedP = adj
		j.Significant = adj < level
	}
	for i := range out {
		out[i].Detectable = Detectable(out, i, level)
		out[i].Reaches = !rule.Reach || out[i].Detectable <= smallest
	}
	return out
}

// Settled reports whether every metric of a family is settled: the
// sequential rule's condition to stop.
func Settled(js []Judgement) bool {
	if len(js) == 0 {
		return false
	}
	for _, j := range js {
		if !j.Settled() {
			return false
		}
	}
	return true
}

// Guards that keep a significant change from being called one.
const (
	GuardNoiseFloor = "below the noise floor"
	GuardOverlap    = "the two kernels' runs overlap"
)

// Guard says why a significant change is not to be called one, as the
// kernel test robot's comparisons do: a change smaller than the noise floor
// (a fraction: what two boots of one kernel differ by), or one whose two
// kernels' runs overlap heavily (either kernel's median inside the middle
// half, the interquartile range, of the other's runs). The middle half,
// rather than LKP's whole range, so that one outlying run neither hides a
// change nor makes one. "" when the change stands.
func Guard(base, patched Summary, iv Interval, floor float64) string {
	if iv.Defined && floor > 0 && math.Abs(math.Log(iv.Ratio)) < math.Log1p(floor) {
		return GuardNoiseFloor
	}
	inside := func(x float64, s Summary) bool { return x >= s.Q1 && x <= s.Q3 }
	if inside(base.Median, patched) || inside(patched.Median, base) {
		return GuardOverlap
	}
	return ""
}

// Holm adjusts p-values for the family-wise error rate with the
// Holm-Bonferroni step-down method: a change is significant at alpha when
// its adjusted p-value is below alpha. The result is in the input's order.
func Holm(ps []float64) []float64 {
	m := len(ps)
	idx := ascending(ps)
	adj := make([]float64, m)
	running := 0.0
	for rank, i := range idx {
		v := math.Min(1, float64(m-rank)*ps[i])
		running = math.Max(running, v) // adjusted p-values never decrease
		adj[i] = running
	}
	return adj
}

// ascending is the indices of ps from the smallest p-value to the
// largest, ties in their order.
func ascending(ps []float64) []int {
	idx := make([]int, len(ps))
	for i := range idx {
		idx[i] = i
	}
	sort.SliceStable(idx, func(i, j int) bool { return ps[idx[i]] < ps[idx[j]] })
	return idx
}
