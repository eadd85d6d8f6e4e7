package stats

import "math"

// The minimum detectable effect: how small a change a run could have
// seen, the reach a "no change" states (Estimate.Detectable for one
// metric, Detectable for a metric among its family's).

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

// DetectableAt is the minimum detectable effect this estimate's spread
// would give with total runs a side, at level: the spread seen so far,
// its standard error shrunk as the runs grow.
func (e Estimate) DetectableAt(total int, level float64) float64 {
	if !e.Defined || e.N < 1 || total < 1 {
		return 0
	}
	at := e
	at.SE = e.SE * math.Sqrt(float64(e.N)/float64(total))
	if !e.Paired {
		at.DF = e.DF * float64(2*total-2) / math.Max(1, float64(2*e.N-2))
	} else {
		at.DF = float64(total - 1)
	}
	return at.Detectable(level)
}

// Detectable is the minimum detectable effect of a family's metric at a
// look judged at level: the smallest change, as a fraction, that its
// spread would show with DetectablePower when it alone changed among the
// family's judged metrics (level over their number, Holm's first step).
func Detectable(js []Judgement, i int, level float64) float64 {
	judged := 0
	for _, j := range js {
		if j.Judged {
			judged++
		}
	}
	if !js[i].Judged || judged == 0 {
		return 0
	}
	return js[i].Estimate.Detectable(level / float64(judged))
}
