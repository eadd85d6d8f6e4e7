package stats

import "math"

// Confidence is the level of every interval a reply shows.
const Confidence = 0.95

// Interval is how big a change is: the patched kernel's value as a multiple
// of the base's, with a confidence interval around it. For LogWelch (and
// for MannWhitney, which has no interval of its own here) it is the ratio
// of the geometric means, whose interval comes from Welch's t on the log
// scale; for Welch, or a metric with a sample that is not positive, it is
// the ratio of the arithmetic means, with the interval of the difference
// divided by the base mean.
type Interval struct {
	Ratio float64 `json:"ratio"` // patched / base
	Low   float64 `json:"low"`   // bounds of Ratio at Level
	High  float64 `json:"high"`
	Level float64 `json:"level"` // e.g. 0.95
	// Log is true when Ratio is the ratio of geometric means.
	Log bool `json:"log"`
	// Defined is false when no ratio exists (a base mean of zero, or a
	// side with fewer than 2 samples); the other fields are then zero.
	Defined bool `json:"defined"`
}

// Change is Ratio - 1: -0.26 for a quarter less.
func (iv Interval) Change() float64 { return iv.Ratio - 1 }

// Within reports whether the whole interval lies inside a change of
// ±smallest, measured on the ratio scale both ways (a 10% smallest effect
// admits ratios between 1/1.1 and 1.1): more runs could not show a change
// of that size.
func (iv Interval) Within(smallest float64) bool {
	if !iv.Defined || smallest <= 0 {
		return false
	}
	return iv.Low > 1/(1+smallest) && iv.High < 1+smallest
}

// Interval is the size of the change from a (base) to b (patched) with its
// confidence interval at level (0 < level < 1).
func (t Test) Interval(a, b []float64, level float64) Interval {
	if len(a) < 2 || len(b) < 2 {
		return Interval{}
	}
	if t != Welch && positive(a) && positive(b) {
		la, lb := logs(a), logs(b)
		d, half := meanDiff(la, lb, level)
		return Interval{Ratio: math.Exp(d), Low: math.Exp(d - half), High: math.Exp(d + half),
			Level: level, Log: true, Defined: true}
	}
	ma := mean(a)
	if ma == 0 {
		return Interval{}
	}
	d, half := meanDiff(a, b, level)
	m := math.Abs(ma)
	return Interval{Ratio: 1 + d/m, Low: 1 + (d-half)/m, High: 1 + (d+half)/m, Level: level, Defined: true}
}

// meanDiff is mean(b) - mean(a) and the half-width of its Welch interval.
func meanDiff(a, b []float64, level float64) (d, half float64) {
	ma, mb := mean(a), mean(b)
	va, vb := variance(a, ma)/float64(len(a)), variance(b, mb)/float64(len(b))
	se2 := va + vb
	if se2 == 0 {
		return mb - ma, 0
	}
	df := se2 * se2 / (va*va/float64(len(a)-1) + vb*vb/float64(len(b)-1))
	return mb - ma, StudentQuantile(1-(1-level)/2, df) * math.Sqrt(se2)
}

// StudentQuantile is the q-quantile (0.5 <= q < 1) of Student's t with df
// degrees of freedom (gonum's distuv.StudentsT; the normal's for infinite
// df): StudentQuantile(0.975, 10) = 2.228.
func StudentQuantile(q, df float64) float64 {
	if q <= 0.5 {
		return 0
	}
	return student(df).Quantile(q)
}
