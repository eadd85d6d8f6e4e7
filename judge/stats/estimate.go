package stats

import "math"

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

// DetectablePower is the power at which a minimum detectable effect is
// stated: a change of that size would be found four times in five.
const DetectablePower = 0.8

// Detectable is the smallest change this estimate's spread could have shown
// at level (two-sided) with DetectablePower, as a fraction of the base
// (0.12 for 12%): (t(1-level/2) + t(power)) standard errors, on the ratio
// scale for a log estimate (the larger of the rise and the fall it
// admits). 0 when there is no estimate.
func (e Estimate) Detectable(level float64) float64 {
	if !e.Defined || !(level > 0) {
		return 0
	}
	k := (StudentQuantile(1-level/2, e.DF) + StudentQuantile(DetectablePower, e.DF)) * e.SE
	if e.Log {
		return math.Expm1(k)
	}
	return k / e.Scale
}

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

// normalCDF is Φ(x).
func normalCDF(x float64) float64 { return 0.5 * math.Erfc(-x/math.Sqrt2) }

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
