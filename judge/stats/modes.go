package stats

import (
	"math"
	"sort"
)

// Mode is one cluster of a sample that falls apart in two: how many runs
// it holds and their range and median.
type Mode struct {
	N      int     `json:"n"`
	Min    float64 `json:"min"`
	Max    float64 `json:"max"`
	Median float64 `json:"median"`
}

// MinModeGap is the smallest separation between two modes worth a flag: a
// 10% step (on the ratio scale) between clusters of runs. Exact counters
// that differ by one count in one run are not two modes.
const MinModeGap = 0.10

// modeRatio holds, for n runs, the value of largest gap / widest cluster
// that one sample in a hundred of normal noise exceeds (99th percentiles
// of 400,000 simulated samples per n, rounded up; TestModesFalseFlags
// checks them). Below 4 runs no split can be told from noise.
var modeRatio = map[int]float64{
	4: 15, 5: 6.3, 6: 3.9, 7: 2.8, 8: 2.2, 9: 1.8, 10: 1.6, 11: 1.4, 12: 1.25,
	13: 1.15, 14: 1.05, 15: 1.0, 16: 0.95, 17: 0.9, 18: 0.85, 19: 0.8, 20: 0.8,
}

// Modes splits xs in two when its runs form two clusters: sorted (on the
// log scale when every value is positive, because kernel noise is
// multiplicative), the largest gap between neighbours is compared with the
// range of the wider cluster on either side of it. The split is reported
// when that ratio is one that normal noise reaches in fewer than 1% of
// samples of this size, and the gap is at least MinModeGap. Otherwise, and
// below 4 runs, Modes returns nil: one mode, which a mean describes.
//
// A base whose runs are 20.5-23.7 s in four boots and 7.9 s in the fifth
// (the thundering herd did not form) has two modes; its mean describes
// neither.
func Modes(xs []float64) []Mode {
	n := len(xs)
	if n < 4 {
		return nil
	}
	sorted := append([]float64(nil), xs...)
	sort.Float64s(sorted)
	v := sorted
	logScale := positive(sorted)
	if logScale {
		v = logs(sorted)
	}
	cut, gap := -1, 0.0
	for i := 0; i+1 < n; i++ {
		if g := v[i+1] - v[i]; g > gap {
			cut, gap = i, g
		}
	}
	if cut < 0 {
		return nil
	}
	wide := math.Max(v[cut]-v[0], v[n-1]-v[cut+1])
	ratio, ok := modeRatio[n]
	if !ok {
		ratio = modeRatio[20] // thresholds only fall with n
	}
	minGap := math.Log1p(MinModeGap)
	if !logScale {
		minGap = MinModeGap * math.Abs(sorted[n/2])
	}
	if gap < minGap || (wide > 0 && gap <= ratio*wide) {
		return nil
	}
	return []Mode{mode(sorted[:cut+1]), mode(sorted[cut+1:])}
}

func mode(sorted []float64) Mode {
	return Mode{N: len(sorted), Min: sorted[0], Max: sorted[len(sorted)-1], Median: quantile(sorted, 0.5)}
}

// quantile is the q-quantile of sorted values, interpolated between order
// statistics as R's default (type 7) does.
func quantile(sorted []float64, q float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	h := q * float64(len(sorted)-1)
	lo := math.Floor(h)
	i := int(lo)
	if i+1 >= len(sorted) {
		return sorted[len(sorted)-1]
	}
	return sorted[i] + (h-lo)*(sorted[i+1]-sorted[i])
}
