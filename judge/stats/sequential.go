package stats

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"

	"gonum.org/v1/gonum/stat/distuv"
)

// Rule says how many interleaved runs a comparison takes and at which
// level each look at the data is judged, so that looking after every round
// and stopping once the answer is clear keeps the false-positive rate at
// Alpha.
//
// Each look before the last tests at its own small level (Levels), the
// last at what remains of Alpha. The levels add up to Alpha, so by the
// union bound the chance of a false positive at any look, however the
// looks are correlated and whatever decides the stopping, is at most
// Alpha. Haybittle and Peto's design is the case of one small level for
// every interim look (0.001). Exact group-sequential boundaries (Pocock,
// O'Brien-Fleming) would spend the same Alpha a little more efficiently,
// but they rest on a correlation between looks that is only known for
// normal noise with a known variance; with 3 to 10 runs of TCG noise the
// union bound is the one that holds. TestSequentialAAFalsePositives
// simulates it.
//
// A Rule with Max == Min (the zero Rule included) is a fixed design: one
// look, at Alpha.
type Rule struct {
	Min   int     `json:"min"`   // runs a side at the first look
	Max   int     `json:"max"`   // runs a side at the last
	Alpha float64 `json:"alpha"` // false-positive rate over all looks, per family
	// Levels is the level of each look before the last: Levels[0] at Min
	// runs a side, Levels[Max-Min-1] at Max-1.
	Levels []float64 `json:"levels,omitempty"`
	// Futility stops the runs early when more could not settle the family:
	// at a look from FutileFrom runs a side on, when some metric not yet
	// settled has less than this chance of being settled at Max (Estimate.
	// SettleChance under the current trend, at the last look's level) and
	// none not yet settled has Promising odds of becoming significant.
	// 0: never. Stopping early can only remove chances to reject, so it
	// keeps the false-positive rate.
	Futility   float64 `json:"futility,omitempty"`
	FutileFrom int     `json:"futile_from,omitempty"`
	// Promising is the chance to become significant by Max from which a
	// metric not yet settled keeps the runs going, however hopeless the
	// others (the conditional power of stochastic curtailment, under the
	// current trend). 0 is PromisingBefore, the rules recorded before it
	// was a key.
	Promising float64 `json:"promising,omitempty"`
	// Correction adjusts each family's p-values for its size; "" is
	// CorrectHolm, the correction of the rules recorded before it was a
	// key.
	Correction Correction `json:"correction,omitempty"`
	// Reach: a metric settles as unchanged (its interval within the
	// smallest effect of interest) only at a look whose minimum detectable
	// effect is within it too, so that a "no change" is never said at a
	// look that could not have seen the change it rules out. Rules recorded
	// before it was a key settle on the interval alone.
	Reach bool `json:"reach,omitempty"`
}

// Corrects is the rule's family correction.
func (r Rule) Corrects() Correction {
	if r.Correction == "" {
		return CorrectHolm
	}
	return r.Correction
}

// DefaultRule is the pipeline's since rounds keep instruction-counted time
// (2026-12-05): at least 3 runs a side, at most 6, alpha 0.05 per family,
// its looks at 3, 4 and 5 runs a side at 0.002, 0.008 and 0.015, the last
// at the 0.025 left. With a round's value within 1-2% (the standard
// profiles, docs/suites.md), a seed-sized change is significant by the 4th
// look, and an unchanged metric settles (its interval within the smallest
// effect, and the look able to see that effect: Reach) by the 5th in most
// runs: the 5th look's 0.015 is what lets a 2% spread see 10% there. Of
// the levels tried (0.004/0.008/0.01, 0.001/0.009/0.015), these stop the
// most no-ops by the 5th look and keep the seed by the 4th. The old rule's
// tenth look only paid for TCG's real-time noise, and its interim looks at
// 0.001 left a "no change" at 4 or 5 runs a side unable to see less than
// 12-20%. The families are corrected with Hochberg's step-up (family.go).
// From the 4th look on the runs stop for futility (Futile), unless a
// metric has a 30% chance of becoming significant (the panel chose 0.3,
// RuleBefore). TestDefaultRule simulates what it costs and finds.
var DefaultRule = Rule{Min: MinSamples, Max: 6, Alpha: 0.05,
	Levels:   []float64{0.002, 0.008, 0.015},
	Futility: 0.1, FutileFrom: 4, Promising: 0.3, Correction: CorrectHochberg, Reach: true}

// RuleBefore is the pipeline's rule from the panel of 2026-12-04 to
// instruction-counted time (2026-12-05), under TCG's real time: 3 to 10
// runs a side, looks at 4 and 5 at 0.005, the other interim looks at
// 0.001, the last at 0.035, Holm within each family. Large changes
// settled at the 4th or 5th look; futility from the 4th, unless a metric
// had a 30% chance of becoming significant: the panel chose 0.3, the
// largest that kept its verdicts right (with 0.5, 5 ms before every block
// read stopped as "no change" at 4 runs a side; docs/suites.md has the
// tables). The docs' tables measured before judge with it.
var RuleBefore = Rule{Min: MinSamples, Max: 10, Alpha: 0.05,
	Levels:   []float64{0.001, 0.005, 0.005, 0.001, 0.001, 0.001, 0.001},
	Futility: 0.1, FutileFrom: 4, Promising: 0.3}

// PromisingBefore is Rule.Promising of the rules recorded without one
// (futility from 2026-12-03 to the panel of 2026-12-04).
const PromisingBefore = 0.5

// promising is r.Promising, or PromisingBefore for a rule without one.
func (r Rule) promising() float64 {
	if r.Promising > 0 {
		return r.Promising
	}
	return PromisingBefore
}

// Futile reports whether the rounds should stop for futility after n runs
// a side, with the family's judgements js: the family is not settled, some
// metric not settled has less than Futility chance of being settled by Max
// (neither significant nor within ±smallest: so the family never can be),
// and no metric not settled has r.Promising odds of becoming significant
// (more runs could change the outcome). Both chances are under the current
// trend (Estimate.SettleChance) at the level a lone change must reach at
// the last look, Holm's first step (the last look's level over the
// family's size). smallest is the smallest effect of interest.
func (r Rule) Futile(js []Judgement, n int, smallest float64) bool {
	if !r.Sequential() || r.Futility <= 0 || n < max(r.FutileFrom, r.Min) || n >= r.Max || Settled(js) {
		return false
	}
	judged := 0
	for _, j := range js {
		if j.Judged {
			judged++
		}
	}
	level := r.Final() / float64(max(judged, 1))
	hopeless := false
	for _, j := range js {
		if !j.Judged || j.Settled() {
			continue
		}
		if j.Estimate.SettleChance(r.Max, level, 0) >= r.promising() {
			return false
		}
		within := smallest
		if r.Reach && j.Estimate.DetectableAt(r.Max, level) > smallest {
			within = 0 // even at Max the run could not see the change it would rule out
		}
		if j.Estimate.SettleChance(r.Max, level, within) < r.Futility {
			hopeless = true
		}
	}
	return hopeless
}

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
		if len(r.Levels) > 0 {
			return errors.New("sequential rule: a fixed design has no interim levels")
		}
		return nil // fixed design
	}
	if r.Min < MinSamples {
		return fmt.Errorf("sequential rule: min %d runs a side: want at least %d", r.Min, MinSamples)
	}
	if r.Max < r.Min {
		return fmt.Errorf("sequential rule: max %d is below min %d", r.Max, r.Min)
	}
	if len(r.Levels) != r.Max-r.Min {
		return fmt.Errorf("sequential rule: %d interim levels for %d looks before the last", len(r.Levels), r.Max-r.Min)
	}
	for _, l := range r.Levels {
		if !(l > 0) {
			return errors.New("sequential rule: interim levels must be positive")
		}
	}
	if !r.Correction.valid() {
		return fmt.Errorf("sequential rule: correction %q: want %s or %s", r.Correction, CorrectHolm, CorrectHochberg)
	}
	if r.Promising < 0 || r.Promising >= 1 {
		return fmt.Errorf("sequential rule: promising %v: want a chance below 1", r.Promising)
	}
	if r.Futility < 0 || r.Futility > r.promising() {
		return fmt.Errorf("sequential rule: futility %v: want at least 0 and at most promising (%v)", r.Futility, r.promising())
	}
	// Leave the last look at least half of alpha, or the rule loses
	// the power a fixed design has.
	if spent := r.spent(); spent > r.Alpha/2 {
		return fmt.Errorf("sequential rule: %d interim looks spend %g of alpha %g: want at most half",
			r.Max-r.Min, roundLevel(spent), r.Alpha)
	}
	return nil
}

func (r Rule) spent() float64 {
	var sum float64
	for _, l := range r.Levels {
		sum += l
	}
	return sum
}

// Level is the level at which a family is judged when each side has n
// runs: its interim level before Max, the rest of Alpha at Max (and
// beyond, should a run have more). A fixed design judges at Alpha.
func (r Rule) Level(n int) float64 {
	if !r.Sequential() {
		return r.Alpha
	}
	if n < r.Max {
		return r.Levels[max(n-r.Min, 0)]
	}
	return r.Final()
}

// Final is the level of the last look.
func (r Rule) Final() float64 {
	if !r.Sequential() {
		return r.Alpha
	}
	return roundLevel(r.Alpha - r.spent())
}

// String writes the rule as ParseRule reads it: "min=3 max=10 alpha=0.05
// levels=0.001,0.005,...", or "fixed alpha=0.05".
func (r Rule) String() string {
	if !r.Sequential() {
		s := "fixed alpha=" + ftoa(r.Alpha)
		if r.Correction != "" {
			s += " correction=" + string(r.Correction)
		}
		return s
	}
	levels := make([]string, len(r.Levels))
	for i, l := range r.Levels {
		levels[i] = ftoa(l)
	}
	s := fmt.Sprintf("min=%d max=%d alpha=%s levels=%s", r.Min, r.Max, ftoa(r.Alpha), strings.Join(levels, ","))
	if r.Futility > 0 {
		s += fmt.Sprintf(" futility=%s from=%d", ftoa(r.Futility), r.FutileFrom)
		if r.Promising > 0 {
			s += " promising=" + ftoa(r.Promising)
		}
	}
	if r.Correction != "" {
		s += " correction=" + string(r.Correction)
	}
	if r.Reach {
		s += " reach=true"
	}
	return s
}

// ParseRule reads what String writes, and the "interim=L" of rules
// recorded before each look had its own level (L at every interim look).
func ParseRule(s string) (Rule, error) {
	var r Rule
	var interim float64
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
			interim, err = strconv.ParseFloat(v, 64)
		case "futility":
			r.Futility, err = strconv.ParseFloat(v, 64)
		case "from":
			r.FutileFrom, err = strconv.Atoi(v)
		case "promising":
			r.Promising, err = strconv.ParseFloat(v, 64)
		case "correction":
			r.Correction = Correction(v)
		case "reach":
			r.Reach, err = strconv.ParseBool(v)
		case "levels":
			for _, l := range strings.Split(v, ",") {
				var x float64
				if x, err = strconv.ParseFloat(l, 64); err != nil {
					break
				}
				r.Levels = append(r.Levels, x)
			}
		default:
			return Rule{}, fmt.Errorf("sequential rule %q: unknown key %q", s, k)
		}
		if err != nil {
			return Rule{}, fmt.Errorf("sequential rule %q: %s: %w", s, k, err)
		}
	}
	if interim != 0 {
		if r.Levels != nil {
			return Rule{}, fmt.Errorf("sequential rule %q: both interim and levels", s)
		}
		for n := r.Min; n < r.Max; n++ {
			r.Levels = append(r.Levels, interim)
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

// approxT is Student's q-quantile with df degrees of freedom by the
// Cornish-Fisher expansion around the normal quantile: within 2% of the
// exact value from 6 degrees of freedom on, and cheap, for the
// projections that every look of a sequential run makes (StudentQuantile
// is exact, and a hundred times slower).
func approxT(q, df float64) float64 {
	z := math.Sqrt2 * math.Erfinv(2*q-1)
	if math.IsInf(df, 1) || df <= 0 {
		return z
	}
	z3, z5, z7 := z*z*z, z*z*z*z*z, z*z*z*z*z*z*z
	return z + (z3+z)/(4*df) + (5*z5+16*z3+3*z)/(96*df*df) + (3*z7+19*z5+17*z3-15*z)/(384*df*df*df)
}

// normalCDF is Φ(x) (gonum's distuv.UnitNormal).
func normalCDF(x float64) float64 { return distuv.UnitNormal.CDF(x) }

// SettleChance is the probability, if the change stays what it is now (the
// current trend), that with total runs a side the estimate would be
// settled: significant at level (two-sided), or its 95% interval within
// ±smallest. The runs still to come are drawn with the spread seen so far;
// so a metric whose spread is too wide for any interval of total runs to
// fit within ±smallest, and whose change is small beside that spread, has
// little chance left. Normal quantiles for the projection, Student's for
// the interval's width at total runs.
func (e Estimate) SettleChance(total int, level, smallest float64) float64 {
	if !e.Defined || total <= e.N {
		return 0
	}
	if e.SE == 0 {
		return 1
	}
	n, N := float64(e.N), float64(total)
	seN := e.SE * math.Sqrt(n/N) // the standard error at total runs
	// D at total runs, given D now: the mean of the runs so far and the
	// ones to come, which follow the current trend.
	sd := e.SE * math.Sqrt(n*(N-n)) / N
	df := e.DF * (N - 1) / (n - 1)
	if e.Paired {
		df = N - 1
	}
	crit := approxT(1-level/2, df) * seN
	within := 0.0
	if e.Log && smallest > 0 {
		within = math.Log1p(smallest) - approxT(1-(1-Confidence)/2, df)*seN
	} else if smallest > 0 {
		within = smallest*e.Scale - approxT(1-(1-Confidence)/2, df)*seN
	}
	// P(|D| > crit) + P(|D| < within), the two regions counted once.
	tail := func(x float64) float64 { // P(|D| > x)
		return 1 - (normalCDF((x-e.D)/sd) - normalCDF((-x-e.D)/sd))
	}
	p := tail(crit)
	if within > 0 {
		if within >= crit {
			return 1 // every outcome settles
		}
		p += 1 - tail(within)
	}
	return math.Min(1, p)
}
