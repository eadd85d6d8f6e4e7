// Package stats summarises raw samples and tests whether two sets of samples
// differ, on []float64, so that it can be checked against textbook and R
// values; formatting lives in reports/.
//
// The distributions are gonum's (distuv: Student's t, the normal) and the
// rank test x/perf's benchmath (Mann-Whitney U, as benchstat makes it);
// what they lack is here, each in its file:
//
//   - tests.go, estimate.go, interval.go: the two-sample tests on the log
//     scale or paired, the change with its interval;
//   - family.go: the family correction (Holm-Bonferroni, JudgeFamily) and
//     the guards;
//   - detectable.go: the minimum detectable effect;
//   - sequential.go: the sequential rule (its looks and levels, futility
//     and the projection it rests on);
//   - modes.go, stats.go: summaries and two-mode samples.
package stats

import (
	"math"
	"sort"
)

// MinSamples is the fewest samples on each side for a metric to be judged
// at all. With fewer, the spread is a guess and a test would be theatre.
const MinSamples = 3

// Summary describes one metric on one kernel.
type Summary struct {
	N      int     `json:"n"`
	Mean   float64 `json:"mean"`
	Median float64 `json:"median"`
	Stddev float64 `json:"stddev"` // sample standard deviation (n-1)
	Min    float64 `json:"min"`
	Max    float64 `json:"max"`
	// Q1 and Q3 are the quartiles (R's type 7): the middle half of the
	// runs lies between them.
	Q1 float64 `json:"q1"`
	Q3 float64 `json:"q3"`
	// GeoMean is the geometric mean, 0 unless every sample is positive.
	GeoMean float64 `json:"geomean,omitempty"`
	// Modes is set when the runs form two clusters (see Modes): the mean
	// then describes neither, and a reader must be told.
	Modes []Mode `json:"modes,omitempty"`
}

// Summarize computes the summary of xs. An empty slice gives a zero Summary.
func Summarize(xs []float64) Summary {
	s := Summary{N: len(xs)}
	if len(xs) == 0 {
		return s
	}
	sorted := append([]float64(nil), xs...)
	sort.Float64s(sorted)
	s.Min, s.Max = sorted[0], sorted[len(sorted)-1]
	s.Mean = mean(xs)
	s.Median = quantile(sorted, 0.5)
	s.Q1, s.Q3 = quantile(sorted, 0.25), quantile(sorted, 0.75)
	if positive(xs) {
		s.GeoMean = math.Exp(mean(logs(xs)))
	}
	s.Modes = Modes(xs)
	if len(xs) > 1 {
		s.Stddev = math.Sqrt(variance(xs, s.Mean))
	}
	return s
}

// RelStddev is the standard deviation as a fraction of the mean (0.05 is
// 5%). A zero mean gives 0: there is nothing to be relative to.
func (s Summary) RelStddev() float64 {
	if s.Mean == 0 {
		return 0
	}
	return math.Abs(s.Stddev / s.Mean)
}

func mean(xs []float64) float64 {
	var sum float64
	for _, x := range xs {
		sum += x
	}
	return sum / float64(len(xs))
}

// variance is the unbiased sample variance around m.
func variance(xs []float64, m float64) float64 {
	var ss float64
	for _, x := range xs {
		d := x - m
		ss += d * d
	}
	return ss / float64(len(xs)-1)
}
