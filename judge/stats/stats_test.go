package stats

import (
	"math"
	"math/rand/v2"
	"testing"
)

// The sleep data set (Student 1908; R's datasets::sleep): extra hours of
// sleep under two drugs. R prints for it:
//
//	t.test(extra ~ group, data = sleep)      t = -1.8608, df = 17.776, p-value = 0.07939
//	wilcox.test(extra ~ group, data = sleep) W = 25.5, p-value = 0.06933
var (
	sleep1 = []float64{0.7, -1.6, -0.2, -1.2, -0.1, 3.4, 3.7, 0.8, 0.0, 2.0}
	sleep2 = []float64{1.9, 0.8, 1.1, 0.1, -0.1, 4.4, 5.5, 1.6, 4.6, 3.4}
)

func near(got, want, tol float64) bool { return math.Abs(got-want) <= tol }

func TestSummarize(t *testing.T) {
	tests := []struct {
		name string
		in   []float64
		want Summary
	}{
		{"empty", nil, Summary{}},
		{"one", []float64{4}, Summary{N: 1, Mean: 4, Median: 4, Min: 4, Max: 4}},
		{"odd", []float64{3, 1, 2}, Summary{N: 3, Mean: 2, Median: 2, Stddev: 1, Min: 1, Max: 3}},
		{"even", []float64{1, 2, 3, 10}, Summary{N: 4, Mean: 4, Median: 2.5, Stddev: math.Sqrt(50.0 / 3), Min: 1, Max: 10}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := Summarize(tt.in)
			if got.N != tt.want.N || !near(got.Mean, tt.want.Mean, 1e-12) || !near(got.Median, tt.want.Median, 1e-12) ||
				!near(got.Stddev, tt.want.Stddev, 1e-12) || got.Min != tt.want.Min || got.Max != tt.want.Max {
				t.Errorf("Summarize(%v) = %+v, want %+v", tt.in, got, tt.want)
			}
		})
	}
}

func TestWelchTSleep(t *testing.T) {
	tt, df, p := WelchT(sleep1, sleep2)
	if !near(tt, -1.8608, 5e-5) || !near(df, 17.776, 5e-4) || !near(p, 0.07939, 5e-6) {
		t.Errorf("WelchT(sleep) = t %.5f df %.4f p %.6f, want -1.8608 17.776 0.07939", tt, df, p)
	}
}

func TestWelchTEdges(t *testing.T) {
	tests := []struct {
		name string
		a, b []float64
		want float64
	}{
		{"identical constants", []float64{5, 5, 5}, []float64{5, 5, 5}, 1},
		{"different constants", []float64{5, 5, 5}, []float64{6, 6, 6}, 0},
		{"one sample", []float64{1}, []float64{2, 3}, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, _, p := WelchT(tt.a, tt.b); p != tt.want {
				t.Errorf("p = %v, want %v", p, tt.want)
			}
		})
	}
}

// Student's t with 10 degrees of freedom: the two-sided 5% critical value
// is 2.228 (any t table); with 1 degree of freedom the t distribution is
// Cauchy, P(|T| >= 1) = 0.5.
func TestStudentTable(t *testing.T) {
	if p := studentTwoSided(2.228139, 10); !near(p, 0.05, 1e-6) {
		t.Errorf("P(|T10| >= 2.228) = %v, want 0.05", p)
	}
	if p := studentTwoSided(1, 1); !near(p, 0.5, 1e-12) {
		t.Errorf("P(|T1| >= 1) = %v, want 0.5", p)
	}
}

// The rank test is x/perf's (benchmath, over go-moremath's U
// distribution): exact where R's wilcox.test is exact (no ties, fewer than
// 50 samples a side), and exact given the ties where R falls back to the
// normal approximation. Each p-value is checked against R or against a
// count over every split of the pooled ranks.
func TestMannWhitneyP(t *testing.T) {
	tests := []struct {
		name string
		a, b []float64
		p    float64
		tolP float64
	}{
		// Exact: complete separation has probability 1/C(n1+n2, n1) per tail.
		{"3v3 separated", []float64{1, 2, 3}, []float64{4, 5, 6}, 2.0 / 20, 1e-12},
		{"5v5 separated", []float64{6, 7, 8, 9, 10}, []float64{1, 2, 3, 4, 5}, 2.0 / 252, 1e-12},
		// R: wilcox.test(c(1.1,2.2,3.3,4.4), c(2.5,3.5,4.5,5.5,6.5)) W = 3, p-value = 0.1111
		{"4v5", []float64{1.1, 2.2, 3.3, 4.4}, []float64{2.5, 3.5, 4.5, 5.5, 6.5}, 0.1111, 5e-5},
		// Ties: R prints W = 25.5, p-value = 0.06933 (its normal
		// approximation: "cannot compute exact p-value with ties"); the
		// exact p given the ties is counted over all C(20, 10) splits.
		{"sleep", sleep1, sleep2, exactRankSumP(sleep1, sleep2), 1e-12},
		{"all equal", []float64{2, 2, 2}, []float64{2, 2, 2}, 1, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if p := MannWhitneyP(tt.a, tt.b); !near(p, tt.p, tt.tolP) {
				t.Errorf("MannWhitneyP = %.6f, want %.6f", p, tt.p)
			}
		})
	}
	// The sleep data's exact p lies near R's normal approximation.
	if p := MannWhitneyP(sleep1, sleep2); !near(p, 0.06933, 0.01) {
		t.Errorf("sleep: exact p %.5f is far from R's approximation 0.06933", p)
	}
}

// exactRankSumP is the two-sided p-value of the rank-sum test by brute
// force: the pooled samples' midranks, every way of drawing len(a) of them,
// and twice the smaller tail of the rank sums at or beyond a's.
func exactRankSumP(a, b []float64) float64 {
	all := append(append([]float64{}, a...), b...)
	ranks := make([]float64, len(all))
	for i, x := range all {
		for _, y := range all {
			switch {
			case y < x:
				ranks[i]++
			case y == x:
				ranks[i] += 0.5
			}
		}
		ranks[i] += 0.5
	}
	obs := 0.0
	for i := range a {
		obs += ranks[i]
	}
	var below, above, total float64
	var walk func(start, left int, sum float64)
	walk = func(start, left int, sum float64) {
		if left == 0 {
			total++
			if sum <= obs+1e-9 {
				below++
			}
			if sum >= obs-1e-9 {
				above++
			}
			return
		}
		for i := start; i <= len(ranks)-left; i++ {
			walk(i+1, left-1, sum+ranks[i])
		}
	}
	walk(0, len(a), 0)
	return math.Min(1, 2*math.Min(below, above)/total)
}

func TestHolm(t *testing.T) {
	// Worked example: p = 0.01, 0.04, 0.03, 0.005 with m = 4 gives
	// 0.03, 0.06, 0.06, 0.02 (R: p.adjust(c(.01,.04,.03,.005), "holm")).
	got := Holm([]float64{0.01, 0.04, 0.03, 0.005})
	want := []float64{0.03, 0.06, 0.06, 0.02}
	for i := range want {
		if !near(got[i], want[i], 1e-12) {
			t.Fatalf("Holm = %v, want %v", got, want)
		}
	}
}

// An A/A comparison must come out "no change". Simulate 1,000 replies of
// 20 metrics each, both sides drawn from the same noisy distribution (5 runs
// a side, noise between 1% and 30% of the mean, some metrics exact counts
// with rare jitter), and count the replies that flag anything: with
// Holm-Bonferroni at alpha 0.05 that must be about 5% at most.
func TestAAFamilyWiseError(t *testing.T) {
	const (
		replies = 1000
		metrics = 20
		runs    = 5
		alpha   = 0.05
	)
	rng := rand.New(rand.NewPCG(7, 11))
	for _, test := range []Test{Welch, MannWhitney, LogWelch} {
		flagged := 0
		for r := 0; r < replies; r++ {
			ps := make([]float64, metrics)
			for m := range ps {
				mu := 10 + rng.Float64()*1e4
				cv := 0.01 + rng.Float64()*0.29
				draw := func() []float64 {
					xs := make([]float64, runs)
					for i := range xs {
						xs[i] = mu * (1 + cv*rng.NormFloat64())
						if m%5 == 0 { // an exact counter: rounded, so ties happen
							xs[i] = math.Round(xs[i] / 100)
						}
					}
					return xs
				}
				ps[m] = test.PValue(draw(), draw())
			}
			for _, p := range Holm(ps) {
				if p < alpha {
					flagged++
					break
				}
			}
		}
		t.Logf("%v: %d of %d A/A replies flagged a change", test, flagged, replies)
		// alpha*replies = 50; allow binomial noise (sd about 7).
		if flagged > 65 {
			t.Errorf("%v: %d of %d A/A replies flagged a change, want at most about %d", test, flagged, replies, int(alpha*replies))
		}
	}
}

// A real change must still be found: the control for the A/A test above,
// so that a test that never flags anything cannot pass it.
func TestFindsRealChange(t *testing.T) {
	base := []float64{700, 690, 720, 705, 698}
	patched := []float64{1320, 1290, 1350, 1301, 1335}
	if _, _, p := WelchT(base, patched); p >= 0.001 {
		t.Errorf("Welch p = %v for a 1.9x change, want < 0.001", p)
	}
	if p := MannWhitneyP(base, patched); p >= 0.01 {
		t.Errorf("Mann-Whitney p = %v for a 1.9x change, want < 0.01", p)
	}
}

func BenchmarkWelchT(b *testing.B) {
	x := []float64{700, 690, 720, 705, 698}
	y := []float64{1320, 1290, 1350, 1301, 1335}
	for b.Loop() {
		WelchT(x, y)
	}
}

func BenchmarkMannWhitneyP(b *testing.B) {
	x := []float64{700, 690, 720, 705, 698}
	y := []float64{1320, 1290, 1350, 1301, 1335}
	for b.Loop() {
		MannWhitneyP(x, y)
	}
}

func TestTestNames(t *testing.T) {
	for _, tt := range []Test{Welch, MannWhitney} {
		b, err := tt.MarshalText()
		if err != nil {
			t.Fatal(err)
		}
		var back Test
		if err := back.UnmarshalText(b); err != nil || back != tt {
			t.Errorf("%v -> %s -> %v, %v", tt, b, back, err)
		}
	}
	if _, err := ParseTest("bootstrap"); err == nil {
		t.Error("an unknown test name was accepted")
	}
}

// LogWelch tests the logarithms: the seed's wake-ups per release, noisy on
// the base kernel and tight on the patched one, differ clearly on the log
// scale while the raw Welch test is diluted by the base's spread. A sample
// that is not positive falls back to plain Welch.
func TestLogWelch(t *testing.T) {
	base := []float64{8.5, 5.1, 12.2, 6.9, 9.4}
	patched := []float64{0.95, 0.91, 0.97, 0.93, 0.90}
	_, _, raw := WelchT(base, patched)
	_, _, want := WelchT(logs(base), logs(patched))
	if got := LogWelch.PValue(base, patched); got != want || !(got < raw) {
		t.Errorf("LogWelch p = %g, want %g (the log-scale test), below raw Welch %g", got, want, raw)
	}
	withZero := []float64{0, 1, 2}
	if got, want := LogWelch.PValue(withZero, patched), Welch.PValue(withZero, patched); got != want {
		t.Errorf("LogWelch with a zero sample = %g, want plain Welch %g", got, want)
	}
	if tt, err := ParseTest("log-welch"); err != nil || tt != LogWelch {
		t.Errorf("ParseTest(log-welch) = %v, %v", tt, err)
	}
}
