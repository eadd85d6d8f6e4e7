package stats

import (
	"fmt"
	"math"
	"sort"
	"strings"
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
		_, p := MannWhitneyU(a, b)
		return p
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
// freedom, through the regularised incomplete beta function.
func studentTwoSided(t, df float64) float64 {
	x := df / (df + t*t)
	return clamp01(regIncBeta(df/2, 0.5, x))
}

// MannWhitneyU returns U for sample a (the number of pairs in which a's
// value is larger, ties counting one half; R calls it W) and the two-sided
// p-value. Without ties and with fewer than 20 samples a side, p is exact;
// otherwise it is the normal approximation with tie and continuity
// corrections (as R's wilcox.test does).
func MannWhitneyU(a, b []float64) (u, p float64) {
	na, nb := len(a), len(b)
	if na == 0 || nb == 0 {
		return 0, 1
	}
	type obs struct {
		v     float64
		fromA bool
	}
	all := make([]obs, 0, na+nb)
	for _, v := range a {
		all = append(all, obs{v, true})
	}
	for _, v := range b {
		all = append(all, obs{v, false})
	}
	sort.Slice(all, func(i, j int) bool { return all[i].v < all[j].v })

	var rankSumA, tieTerm float64
	ties := false
	for i := 0; i < len(all); {
		j := i
		for j < len(all) && all[j].v == all[i].v {
			j++
		}
		midrank := float64(i+j+1) / 2 // ranks are 1-based: (i+1 + j) / 2
		for k := i; k < j; k++ {
			if all[k].fromA {
				rankSumA += midrank
			}
		}
		if n := float64(j - i); n > 1 {
			ties = true
			tieTerm += n*n*n - n
		}
		i = j
	}
	u = rankSumA - float64(na*(na+1))/2

	if !ties && na < 20 && nb < 20 {
		return u, exactU(na, nb, u)
	}
	n := float64(na + nb)
	sigma := math.Sqrt(float64(na*nb) / 12 * ((n + 1) - tieTerm/(n*(n-1))))
	if sigma == 0 {
		return u, 1
	}
	z := u - float64(na*nb)/2
	if z != 0 {
		z -= math.Copysign(0.5, z) // continuity correction
	}
	z /= sigma
	return u, clamp01(math.Erfc(math.Abs(z) / math.Sqrt2))
}

// exactU is the exact two-sided p-value of U for sample sizes na and nb,
// counting, for every u, how many of the C(na+nb, na) orderings give it.
func exactU(na, nb int, u float64) float64 {
	// counts[i][j][k]: orderings of i a's and j b's with U = k, built from
	// "the largest value is an a (adds j to U)" or "is a b (adds nothing)".
	counts := make([][][]float64, na+1)
	for i := range counts {
		counts[i] = make([][]float64, nb+1)
		for j := range counts[i] {
			c := make([]float64, i*j+1)
			switch {
			case i == 0 || j == 0:
				c[0] = 1
			default:
				for k := range c {
					if k-j >= 0 && k-j < len(counts[i-1][j]) {
						c[k] += counts[i-1][j][k-j]
					}
					if k < len(counts[i][j-1]) {
						c[k] += counts[i][j-1][k]
					}
				}
			}
			counts[i][j] = c
		}
	}
	dist := counts[na][nb]
	var total, lower, upper float64
	for k, c := range dist {
		total += c
		if float64(k) <= u {
			lower += c
		}
		if float64(k) >= u {
			upper += c
		}
	}
	return clamp01(2 * math.Min(lower, upper) / total)
}

// Holm adjusts p-values for the family-wise error rate with the
// Holm-Bonferroni step-down method: a change is significant at alpha when
// its adjusted p-value is below alpha. The result is in the input's order.
func Holm(ps []float64) []float64 {
	m := len(ps)
	idx := make([]int, m)
	for i := range idx {
		idx[i] = i
	}
	sort.SliceStable(idx, func(i, j int) bool { return ps[idx[i]] < ps[idx[j]] })
	adj := make([]float64, m)
	running := 0.0
	for rank, i := range idx {
		v := math.Min(1, float64(m-rank)*ps[i])
		running = math.Max(running, v) // adjusted p-values never decrease
		adj[i] = running
	}
	return adj
}

func clamp01(x float64) float64 {
	return math.Max(0, math.Min(1, x))
}

// regIncBeta is the regularised incomplete beta function I_x(a, b), by the
// continued fraction of Numerical Recipes (section 6.4).
func regIncBeta(a, b, x float64) float64 {
	if x <= 0 {
		return 0
	}
	if x >= 1 {
		return 1
	}
	la, _ := math.Lgamma(a + b)
	lb, _ := math.Lgamma(a)
	lc, _ := math.Lgamma(b)
	front := math.Exp(la - lb - lc + a*math.Log(x) + b*math.Log(1-x))
	if x < (a+1)/(a+b+2) {
		return front * betaCF(a, b, x) / a
	}
	return 1 - front*betaCF(b, a, 1-x)/b
}

func betaCF(a, b, x float64) float64 {
	const (
		maxIter = 300
		eps     = 1e-15
		tiny    = 1e-300
	)
	nonzero := func(v float64) float64 {
		if math.Abs(v) < tiny {
			return tiny
		}
		return v
	}
	qab, qap, qam := a+b, a+1, a-1
	c, d := 1.0, 1/nonzero(1-qab*x/qap)
	h := d
	// step is one term of Lentz's method: the fraction's next coefficient
	// aa, and the factor it multiplies h by.
	step := func(aa float64) float64 {
		d = 1 / nonzero(1+aa*d)
		c = nonzero(1 + aa/c)
		return d * c
	}
	for m := 1; m <= maxIter; m++ {
		fm := float64(m)
		m2 := 2 * fm
		h *= step(fm * (b - fm) * x / ((qam + m2) * (a + m2)))
		del := step(-(a + fm) * (qab + fm) * x / ((a + m2) * (qap + m2)))
		h *= del
		if math.Abs(del-1) < eps {
			break
		}
	}
	return h
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
