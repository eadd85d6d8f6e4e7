package stats

import (
	"math"

	"gonum.org/v1/gonum/stat/distuv"
)

// Estimate is the change of one metric on the scale its test works on, with
// what an interval, a minimum detectable effect and a projection to more
// runs need: the difference, its standard error and degrees of freedom.
type Estimate struct {
	// Log: D is a difference of logarithms (a log-ratio); otherwise of raw
	// values, and Scale is the base mean it is relative to.
	Log   bool
	D     float64 // patched - base
	SE    float64 // standard error of D
	DF    float64 // degrees of freedom of D/SE
	Scale float64 // |base mean| for a raw difference; 1 on the log scale
	// Paired: D is the mean log-ratio of paired turns.
	Paired bool
	// N is the runs a side (the turns, when paired).
	N int
	// Defined is false when there is no estimate (a side with fewer than 2
	// runs, a raw base mean of 0).
	Defined bool
}

// Estimate is the change from p.Base to p.Patched as test t measures it.
// PairedLog pairs the turns when p.Turns says they are paired and every
// value is positive; LogWelch (and MannWhitney, whose interval is
// LogWelch's) use the logarithms when every value is positive; anything
// else is Welch's difference of the raw means.
func (t Test) Estimate(p Pair) Estimate {
	a, b := p.Base, p.Patched
	if len(a) < 2 || len(b) < 2 {
		return Estimate{}
	}
	pos := positive(a) && positive(b)
	if t == PairedLog && pos && p.Turns && len(a) == len(b) {
		d := make([]float64, len(a))
		for i := range a {
			d[i] = math.Log(b[i]) - math.Log(a[i])
		}
		m := mean(d)
		return Estimate{Log: true, Paired: true, D: m, SE: math.Sqrt(variance(d, m) / float64(len(d))),
			DF: float64(len(d) - 1), Scale: 1, N: len(d), Defined: true}
	}
	if t != Welch && pos {
		a, b = logs(a), logs(b)
	} else {
		pos = false
	}
	ma, mb := mean(a), mean(b)
	va, vb := variance(a, ma)/float64(len(a)), variance(b, mb)/float64(len(b))
	e := Estimate{Log: pos, D: mb - ma, SE: math.Sqrt(va + vb), Scale: 1, N: min(len(a), len(b)), Defined: true}
	if va+vb > 0 {
		e.DF = (va + vb) * (va + vb) / (va*va/float64(len(a)-1) + vb*vb/float64(len(b)-1))
	} else {
		e.DF = math.Inf(1)
	}
	if !pos {
		e.Scale = math.Abs(ma)
		if e.Scale == 0 {
			return Estimate{}
		}
	}
	return e
}

// PValue is the two-sided p-value of D = 0. Exact counters (no spread on
// either side) give 1 for equal values and 0 for different ones.
func (e Estimate) PValue() float64 {
	if !e.Defined {
		return 1
	}
	if e.SE == 0 {
		if e.D == 0 {
			return 1
		}
		return 0
	}
	return studentTwoSided(e.D/e.SE, e.DF)
}

// Interval is the estimate's ratio with its confidence interval at level.
func (e Estimate) Interval(level float64) Interval {
	if !e.Defined {
		return Interval{}
	}
	half := 0.0
	if e.SE > 0 {
		half = StudentQuantile(1-(1-level)/2, e.DF) * e.SE
	}
	if e.Log {
		return Interval{Ratio: math.Exp(e.D), Low: math.Exp(e.D - half), High: math.Exp(e.D + half),
			Level: level, Log: true, Defined: true}
	}
	return Interval{Ratio: 1 + e.D/e.Scale, Low: 1 + (e.D-half)/e.Scale, High: 1 + (e.D+half)/e.Scale,
		Level: level, Defined: true}
}

// Score is D/SE as a standard normal score: the normal quantile of D/SE's
// place in Student's t with DF degrees of freedom. Where there is no
// change, Score is standard normal whatever the runs, so scores of
// estimates with different DF can be pooled (the A/A runs' check that
// intervals are as wide as the changes spread): D/SE itself spreads by
// sqrt(DF/(DF-2)), 1.73 at 3 DF and without bound at 2. 0 when there is no
// estimate or no spread.
func (e Estimate) Score() float64 {
	if !e.Defined || !(e.SE > 0) {
		return 0
	}
	t := e.D / e.SE
	if math.IsInf(e.DF, 1) {
		return t
	}
	// From the nearer tail, so that a far score keeps its precision.
	st := distuv.StudentsT{Mu: 0, Sigma: 1, Nu: e.DF}
	if t > 0 {
		return -distuv.UnitNormal.Quantile(st.Survival(t))
	}
	return distuv.UnitNormal.Quantile(st.CDF(t))
}

// ScoresSpread is how far scores of estimates of no change (Score, one an
// A/A run) spread about 0, their root mean square, and the most that
// intervals that are right give by chance at 95% (the chi-square's with
// one degree of freedom a score).
func ScoresSpread(scores []float64) (spread, bound float64) {
	if len(scores) == 0 {
		return 0, 0
	}
	sq := 0.0
	for _, z := range scores {
		sq += z * z
	}
	n := float64(len(scores))
	return math.Sqrt(sq / n), math.Sqrt(distuv.ChiSquared{K: n}.Quantile(0.95) / n)
}
