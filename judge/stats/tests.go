package stats

import (
	"fmt"
	"math"
	"strings"

	"golang.org/x/perf/benchmath"
	"gonum.org/v1/gonum/stat/distuv"
)

// Test is a two-sample significance test. The value is a strategy, chosen
// per comparison, so that the reply can say which test was used. The zero
// value is DefaultTest.
type Test int

const (
	// LogWelch is Welch's t-test on the logarithms of the samples: a test of
	// the ratio of the geometric means, and the default. Kernel counters and
	// times are positive and their noise is multiplicative (a base kernel's
	// wake-ups spread by ±30% while the patched kernel's spread by ±3%),
	// which a t-test on the raw values reads as an unresolvable spread. A
	// metric with a zero or negative sample is tested with plain Welch.
	LogWelch Test = iota
	// Welch is Welch's unequal-variances t-test on the raw values. It can
	// reach significance with the few runs a VM lab affords (a rank test
	// with 3 runs a side cannot go below p = 0.1).
	Welch
	// MannWhitney is the Mann-Whitney U (Wilcoxon rank-sum) test: it assumes
	// nothing about the shape of the noise but needs more runs.
	MannWhitney
	// PairedLog is the paired t-test on the logarithms, not the default:
	// the rounds run interleaved (base, patched, base, patched, ...), so
	// the base and patched rounds of one turn share whatever the host did
	// at that time, and the log-ratio of each turn cancels it. It tests
	// the geometric mean of those ratios (one sample of n-1 degrees of
	// freedom). It is the better estimator only where the drift
	// of the host between turns is larger than the noise of a round; on
	// the 24 recorded A/A runs it is not (TestPairingOnKnownAA,
	// docs/reports.md), so LogWelch stays the default. Samples that cannot be paired (different numbers
	// of rounds, base rounds reused from another run) or a metric with a
	// sample that is not positive fall back to LogWelch.
	PairedLog Test = iota
)

// DefaultTest is the test the pipeline judges with, and so the default of
// every comparison: re-judging a run's files gives the reply's answer.
const DefaultTest = LogWelch

// TestNames are the names ParseTest accepts, the default first (for help
// texts).
var TestNames = []string{"log-welch", "paired-log", "welch", "mann-whitney"}

func (t Test) String() string {
	switch t {
	case Welch:
		return "Welch's t-test"
	case MannWhitney:
		return "Mann-Whitney U test"
	case LogWelch:
		return "Welch's t-test on log values"
	case PairedLog:
		return "paired t-test on log ratios of interleaved rounds"
	}
	return fmt.Sprintf("Test(%d)", int(t))
}

// ParseTest accepts "log-welch" (also the empty string: the default),
// "paired-log", "welch" or "mann-whitney" (config and flags).
func ParseTest(s string) (Test, error) {
	switch s {
	case "log-welch", "":
		return LogWelch, nil
	case "paired-log", "paired":
		return PairedLog, nil
	case "welch":
		return Welch, nil
	case "mann-whitney", "mannwhitney", "u":
		return MannWhitney, nil
	}
	return 0, fmt.Errorf("unknown significance test %q (want %s)", s, strings.Join(TestNames, ", "))
}

// MarshalText writes the test as its config name ("log-welch").
func (t Test) MarshalText() ([]byte, error) {
	switch t {
	case Welch:
		return []byte("welch"), nil
	case MannWhitney:
		return []byte("mann-whitney"), nil
	case LogWelch:
		return []byte("log-welch"), nil
	case PairedLog:
		return []byte("paired-log"), nil
	}
	return nil, fmt.Errorf("invalid significance test %d", int(t))
}

// UnmarshalText accepts what ParseTest accepts.
func (t *Test) UnmarshalText(b []byte) error {
	v, err := ParseTest(string(b))
	*t = v
	return err
}

// PValue is the two-sided p-value of the test on samples a and b.
//
// For PairedLog, a[i] and b[i] are the base and patched values of turn i;
// PValue(a, b) without that pairing is LogWelch's (see Pair and Estimate).
func (t Test) PValue(a, b []float64) float64 {
	if t == MannWhitney {
		return MannWhitneyP(a, b)
	}
	if t == LogWelch || t == PairedLog {
		if la, lb, ok := logs(a), logs(b), positive(a) && positive(b); ok {
			_, _, p := WelchT(la, lb)
			return p
		}
	}
	_, _, p := WelchT(a, b)
	return p
}

// WelchT returns Welch's t statistic (mean(a) - mean(b) over the standard
// error), its Welch-Satterthwaite degrees of freedom, and the two-sided
// p-value. Either side needs at least 2 samples; otherwise p is 1.
//
// Kernel counters are often exact (the same count every run): when both
// sides have no spread at all, equal means give p = 1 and different means
// give p = 0, rather than dividing by zero.
func WelchT(a, b []float64) (t, df, p float64) {
	if len(a) < 2 || len(b) < 2 {
		return 0, 0, 1
	}
	ma, mb := mean(a), mean(b)
	va, vb := variance(a, ma)/float64(len(a)), variance(b, mb)/float64(len(b))
	se2 := va + vb
	if se2 == 0 {
		if ma == mb {
			return 0, 0, 1
		}
		return math.Copysign(math.Inf(1), ma-mb), math.Inf(1), 0
	}
	t = (ma - mb) / math.Sqrt(se2)
	df = se2 * se2 / (va*va/float64(len(a)-1) + vb*vb/float64(len(b)-1))
	p = studentTwoSided(t, df)
	return t, df, p
}

// studentTwoSided is P(|T| >= |t|) for Student's t with df degrees of
// freedom (gonum's distuv.StudentsT); infinite degrees of freedom are the
// standard normal.
func studentTwoSided(t, df float64) float64 {
	return clamp01(2 * student(df).Survival(math.Abs(t)))
}

// student is Student's t with df degrees of freedom, or the standard
// normal for infinite df.
func student(df float64) interface {
	Survival(float64) float64
	Quantile(float64) float64
} {
	if math.IsInf(df, 1) {
		return distuv.UnitNormal
	}
	return distuv.StudentsT{Mu: 0, Sigma: 1, Nu: df}
}

// MannWhitneyP is the two-sided p-value of the Mann-Whitney U (Wilcoxon
// rank-sum) test of a against b, from golang.org/x/perf's benchmath (the
// test benchstat makes, by go-moremath's U distribution): exact up to 50
// samples a side without ties and up to 25 with them (the exact
// distribution given the ties), else the normal approximation with tie and
// continuity corrections, as R's wilcox.test. Samples that are all equal,
// or an empty side, give 1.
func MannWhitneyP(a, b []float64) float64 {
	if len(a) == 0 || len(b) == 0 {
		return 1
	}
	th := benchmath.DefaultThresholds
	c := benchmath.AssumeNothing.Compare(benchmath.NewSample(a, &th), benchmath.NewSample(b, &th))
	return clamp01(c.P)
}

func clamp01(x float64) float64 {
	return math.Max(0, math.Min(1, x))
}

func positive(xs []float64) bool {
	for _, x := range xs {
		if !(x > 0) {
			return false
		}
	}
	return true
}

func logs(xs []float64) []float64 {
	out := make([]float64, len(xs))
	for i, x := range xs {
		out[i] = math.Log(x)
	}
	return out
}
