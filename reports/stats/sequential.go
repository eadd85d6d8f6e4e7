package stats

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
)

// Rule says how many interleaved runs a comparison takes and at which
// level each look at the data is judged, so that looking after every round
// and stopping once the answer is clear keeps the false-positive rate at
// Alpha.
//
// The design is Haybittle and Peto's: every look before the last tests at
// the small level Interim (0.001), the last at what remains of Alpha. The
// levels add up to Alpha, so by the union bound the chance of a false
// positive at any look, however the looks are correlated and whatever
// decides the stopping, is at most Alpha. Exact group-sequential
// boundaries (Pocock, O'Brien-Fleming) would spend the same Alpha a little
// more efficiently, but they rest on a correlation between looks that is
// only known for normal noise with a known variance; with 3 to 10 runs of
// TCG noise the union bound is the one that holds. The price is small: the
// last look tests at 0.043 instead of 0.05 with the default rule, while a
// large change (the seed's wake-ups, 20 per release against 1) stops the
// runs at the first look. TestSequentialAAFalsePositives simulates it.
//
// A Rule with Max == Min (the zero Rule included) is a fixed design: one
// look, at Alpha.
type Rule struct {
	Min     int     `json:"min"`     // runs a side at the first look
	Max     int     `json:"max"`     // runs a side at the last
	Alpha   float64 `json:"alpha"`   // false-positive rate over all looks, per family
	Interim float64 `json:"interim"` // level of every look before the last
}

// DefaultRule is the pipeline's: at least 3 runs a side, at most 10, alpha
// 0.05 per family.
var DefaultRule = Rule{Min: MinSamples, Max: 10, Alpha: 0.05, Interim: 0.001}

// Fixed is the rule of a run whose number of rounds was set in advance.
func Fixed(alpha float64) Rule { return Rule{Alpha: alpha} }

// Sequential reports whether the rule looks more than once.
func (r Rule) Sequential() bool { return r.Max > r.Min }

// Validate checks the rule's ranges.
func (r Rule) Validate() error {
	if !(r.Alpha > 0 && r.Alpha < 1) {
		return fmt.Errorf("sequential rule: alpha %v is not in (0, 1)", r.Alpha)
	}
	if r.Min == 0 && r.Max == 0 {
		return nil // fixed design
	}
	if r.Min < MinSamples {
		return fmt.Errorf("sequential rule: min %d runs a side: want at least %d", r.Min, MinSamples)
	}
	if r.Max < r.Min {
		return fmt.Errorf("sequential rule: max %d is below min %d", r.Max, r.Min)
	}
	if r.Sequential() {
		if !(r.Interim > 0) {
			return errors.New("sequential rule: interim level must be positive")
		}
		// Leave the last look at least half of alpha, or the rule loses
		// the power a fixed design has.
		if spent := float64(r.Max-r.Min) * r.Interim; spent > r.Alpha/2 {
			return fmt.Errorf("sequential rule: %d interim looks at %g spend %g of alpha %g: want at most half",
				r.Max-r.Min, r.Interim, spent, r.Alpha)
		}
	}
	return nil
}

// Level is the level at which a family is judged when each side has n
// runs: Interim before Max, the rest of Alpha at Max (and beyond, should a
// run have more). A fixed design judges at Alpha.
func (r Rule) Level(n int) float64 {
	if !r.Sequential() {
		return r.Alpha
	}
	if n < r.Max {
		return r.Interim
	}
	return r.Final()
}

// Final is the level of the last look.
func (r Rule) Final() float64 {
	if !r.Sequential() {
		return r.Alpha
	}
	return r.Alpha - float64(r.Max-r.Min)*r.Interim
}

// String writes the rule as ParseRule reads it: "min=3 max=10 alpha=0.05
// interim=0.001", or "fixed alpha=0.05".
func (r Rule) String() string {
	if !r.Sequential() {
		return "fixed alpha=" + ftoa(r.Alpha)
	}
	return fmt.Sprintf("min=%d max=%d alpha=%s interim=%s", r.Min, r.Max, ftoa(r.Alpha), ftoa(r.Interim))
}

// Describe says the rule in words for a reply's legend.
func (r Rule) Describe() string {
	if !r.Sequential() {
		return fmt.Sprintf("a fixed number of runs, alpha %s", ftoa(r.Alpha))
	}
	return fmt.Sprintf("runs went on until the primary metrics were settled, from %d to %d a side; "+
		"each look before the %s judged at %s, the %s at %s (Haybittle-Peto, alpha %s in all)",
		r.Min, r.Max, ordinal(r.Max), ftoa(r.Interim), ordinal(r.Max), ftoa(roundLevel(r.Final())), ftoa(r.Alpha))
}

// ParseRule reads what String writes.
func ParseRule(s string) (Rule, error) {
	var r Rule
	fields := strings.Fields(s)
	if len(fields) > 0 && fields[0] == "fixed" {
		fields = fields[1:]
	}
	for _, f := range fields {
		k, v, ok := strings.Cut(f, "=")
		if !ok {
			return Rule{}, fmt.Errorf("sequential rule %q: %q is not key=value", s, f)
		}
		var err error
		switch k {
		case "min":
			r.Min, err = strconv.Atoi(v)
		case "max":
			r.Max, err = strconv.Atoi(v)
		case "alpha":
			r.Alpha, err = strconv.ParseFloat(v, 64)
		case "interim":
			r.Interim, err = strconv.ParseFloat(v, 64)
		default:
			return Rule{}, fmt.Errorf("sequential rule %q: unknown key %q", s, k)
		}
		if err != nil {
			return Rule{}, fmt.Errorf("sequential rule %q: %s: %w", s, k, err)
		}
	}
	if err := r.Validate(); err != nil {
		return Rule{}, err
	}
	return r, nil
}

func ftoa(v float64) string { return strconv.FormatFloat(v, 'g', -1, 64) }

// roundLevel drops the float noise of a subtraction (0.05 - 7*0.001).
func roundLevel(v float64) float64 { return math.Round(v*1e9) / 1e9 }

func ordinal(n int) string {
	suffix := "th"
	switch {
	case n%100 >= 11 && n%100 <= 13:
	case n%10 == 1:
		suffix = "st"
	case n%10 == 2:
		suffix = "nd"
	case n%10 == 3:
		suffix = "rd"
	}
	return strconv.Itoa(n) + suffix
}

// Pair is one metric of a family: each kernel's runs.
type Pair struct{ Base, Patched []float64 }

// Judgement is one metric judged at one look.
type Judgement struct {
	// Judged is false when a side has fewer than MinSamples runs.
	Judged    bool
	P         float64 // the test's p-value
	AdjustedP float64 // after Holm-Bonferroni within the family
	Interval  Interval
	// Significant: AdjustedP below the look's level.
	Significant bool
	// Within: the interval excludes every change larger than the smallest
	// effect of interest.
	Within bool
}

// Settled reports whether more runs are not needed for this metric: it
// changed significantly, or it cannot have changed by as much as matters.
func (j Judgement) Settled() bool { return j.Judged && (j.Significant || j.Within) }

// JudgeFamily judges the metrics of one family together at level: each by
// test t with its Confidence interval, Holm-Bonferroni within the family
// (the judged metrics only), and Within against smallest, the smallest
// effect of interest as a fraction (0.1 for 10%).
func JudgeFamily(t Test, level, smallest float64, family []Pair) []Judgement {
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
		j.P = t.PValue(m.Base, m.Patched)
		j.Interval = t.Interval(m.Base, m.Patched, Confidence)
		j.Within = j.Interval.Within(smallest)
		idx = append(idx, i)
		ps = append(ps, j.P)
	}
	for k, adj := range Holm(ps) {
		j := &out[idx[k]]
		j.AdjustedP = adj
		j.Significant = adj < level
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
