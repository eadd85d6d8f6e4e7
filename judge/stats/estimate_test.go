package stats

import (
	"math"
	"math/rand/v2"
	"testing"
)

// The paired test against R on the sleep data set: t.test(extra ~ group,
// data = sleep, paired = TRUE) gives t = -4.0621, df = 9, p = 0.002833,
// mean difference -1.58 and a 95% interval of -2.4598858 to -0.7001142.
// PairedLog works on log ratios, so the differences are given as ratios:
// base 1, patched exp(d).
func TestPairedLogSleep(t *testing.T) {
	g1 := []float64{0.7, -1.6, -0.2, -1.2, -0.1, 3.4, 3.7, 0.8, 0.0, 2.0}
	g2 := []float64{1.9, 0.8, 1.1, 0.1, -0.1, 4.4, 5.5, 1.6, 4.6, 3.4}
	base, patched := make([]float64, 10), make([]float64, 10)
	for i := range g1 {
		base[i], patched[i] = 1, math.Exp(g1[i]-g2[i])
	}
	e := PairedLog.Estimate(Pair{Base: base, Patched: patched, Turns: true})
	if !e.Paired || e.DF != 9 || !near(e.D, -1.58, 1e-12) || !near(e.D/e.SE, -4.0621, 1e-4) {
		t.Fatalf("estimate %+v: want paired, df 9, d -1.58, t -4.0621", e)
	}
	if p := e.PValue(); !near(p, 0.002833, 1e-6) {
		t.Errorf("p = %.6f, want R's 0.002833", p)
	}
	iv := e.Interval(0.95)
	if !near(math.Log(iv.Low), -2.4598858, 1e-6) || !near(math.Log(iv.High), -0.7001142, 1e-6) {
		t.Errorf("interval %v to %v, want exp(-2.4598858) to exp(-0.7001142)", iv.Low, iv.High)
	}
	// Unpaired turns, or a side that is not positive, fall back to
	// log-Welch and Welch.
	if e := PairedLog.Estimate(Pair{Base: base, Patched: patched}); e.Paired {
		t.Error("paired without Turns")
	}
	if e := PairedLog.Estimate(Pair{Base: g1, Patched: g2, Turns: true}); e.Paired || e.Log {
		t.Errorf("paired or log with non-positive samples: %+v", e)
	}
}

// The minimum detectable effect is (z(1-level/2) + z(power)) standard
// errors: 2.8016 for level 0.05 and power 0.8 with many degrees of
// freedom, 1.96 + 0.8416.
func TestDetectable(t *testing.T) {
	e := Estimate{SE: 1, DF: 1e7, Scale: 1, Defined: true}
	if got := e.Detectable(0.05); !near(got, 2.8016, 1e-3) {
		t.Errorf("raw detectable = %v, want 2.8016", got)
	}
	e = Estimate{Log: true, SE: 0.05, DF: 18, Scale: 1, Defined: true}
	want := math.Expm1((StudentQuantile(0.975, 18) + StudentQuantile(0.8, 18)) * 0.05)
	if got := e.Detectable(0.05); !near(got, want, 1e-12) || got < 0.14 || got > 0.16 {
		t.Errorf("log detectable = %v, want %v (about 15%%)", got, want)
	}
	if (Estimate{}).Detectable(0.05) != 0 {
		t.Error("an undefined estimate detects something")
	}
}

// The chance to settle by the last look, under the current trend: a tight
// estimate at no change will be within ±10%; a wide one at no change
// cannot be within, and is unlikely to become significant; a large
// change becomes significant.
func TestSettleChance(t *testing.T) {
	at := func(d, se float64) Estimate {
		return Estimate{Log: true, D: d, SE: se, DF: 6, Scale: 1, N: 4, Defined: true}
	}
	if c := at(0, 0.01).SettleChance(10, 0.035, 0.1); c < 0.99 {
		t.Errorf("tight, no change: chance %v, want about 1", c)
	}
	if c := at(0, 0.2).SettleChance(10, 0.035, 0.1); c > 0.05 {
		t.Errorf("wide, no change: chance %v, want below 0.05", c)
	}
	if c := at(0.6, 0.1).SettleChance(10, 0.035, 0); c < 0.99 {
		t.Errorf("a large change: chance %v to become significant, want about 1", c)
	}
	if c := at(0.6, 0.1).SettleChance(4, 0.035, 0); c != 0 {
		t.Errorf("no runs left: chance %v, want 0", c)
	}
}

// The rule stops for futility only from its FutileFrom-th look, when a
// metric cannot be settled and none is promising; never when settled.
func TestRuleFutile(t *testing.T) {
	r := RuleBefore
	hopeless := Judgement{Judged: true, Estimate: Estimate{Log: true, D: 0.01, SE: 0.2, DF: 6, Scale: 1, N: 4, Defined: true}}
	promising := Judgement{Judged: true, Estimate: Estimate{Log: true, D: 0.3, SE: 0.1, DF: 6, Scale: 1, N: 4, Defined: true}}
	settled := Judgement{Judged: true, Significant: true}
	for _, tt := range []struct {
		name string
		js   []Judgement
		n    int
		want bool
	}{
		{"hopeless", []Judgement{hopeless, settled}, 4, true},
		{"before the first futility look", []Judgement{hopeless, settled}, 3, false},
		{"at the last look", []Judgement{hopeless, settled}, 10, false},
		{"another is promising", []Judgement{hopeless, promising}, 4, false},
		{"settled", []Judgement{settled, settled}, 4, false},
	} {
		if got := r.Futile(tt.js, tt.n, 0.1); got != tt.want {
			t.Errorf("%s: futile %v, want %v", tt.name, got, tt.want)
		}
	}
	if (Rule{Min: 3, Max: 10, Alpha: 0.05, Levels: RuleBefore.Levels}).Futile([]Judgement{hopeless}, 5, 0.1) {
		t.Error("a rule without futility stopped for it")
	}
	r2, err := ParseRule(RuleBefore.String())
	if err != nil || r2.Futility != RuleBefore.Futility || r2.FutileFrom != RuleBefore.FutileFrom {
		t.Errorf("ParseRule(%q) = %+v, %v", RuleBefore.String(), r2, err)
	}
}

// approxT stays within 2% of the exact quantile from 6 degrees of freedom.
func TestApproxT(t *testing.T) {
	for _, q := range []float64{0.8, 0.975, 0.9975} {
		for _, df := range []float64{6, 9, 18, 50, 1000} {
			exact, got := StudentQuantile(q, df), approxT(q, df)
			if math.Abs(got-exact) > 0.02*exact {
				t.Errorf("approxT(%v, %v) = %v, exact %v", q, df, got, exact)
			}
		}
	}
}

// Score puts D/SE where the normal has the same tail: t's 97.5% quantile at
// 3 DF (3.182, R's qt(0.975, 3)) is the normal's 1.960, at any SE; and
// A/A estimates with few DF, whose D/SE spreads sqrt(3) = 1.73 at 3 DF,
// score with a spread of 1.
func TestScore(t *testing.T) {
	for _, tc := range []struct {
		e    Estimate
		want float64
	}{
		{Estimate{D: 3.182446 * 0.02, SE: 0.02, DF: 3, Defined: true}, 1.959964},
		{Estimate{D: -3.182446 * 0.5, SE: 0.5, DF: 3, Defined: true}, -1.959964},
		{Estimate{D: 12.7062 * 0.1, SE: 0.1, DF: 1, Defined: true}, 1.959964},
		{Estimate{D: 1.5, SE: 1, DF: math.Inf(1), Defined: true}, 1.5},
		{Estimate{D: 0, SE: 1, DF: 5, Defined: true}, 0},
		{Estimate{D: 1, SE: 0, DF: 5, Defined: true}, 0},
		{Estimate{}, 0},
	} {
		if got := tc.e.Score(); math.Abs(got-tc.want) > 1e-4 {
			t.Errorf("%+v: Score %.6f, want %.6f", tc.e, got, tc.want)
		}
	}
	// Far in the tail the score keeps its precision (t = 40 at 3 DF is a
	// one-sided p of 1.7e-5, the normal's 4.14).
	if got := (Estimate{D: 40, SE: 1, DF: 3, Defined: true}).Score(); math.Abs(got-4.145) > 0.01 {
		t.Errorf("t = 40 at 3 DF: score %.3f, want about 4.145", got)
	}
	// Paired A/A estimates of 4 rounds (3 DF): D/SE spreads by about
	// 1.73, the scores by 1.
	rnd := rand.New(rand.NewPCG(1, 2))
	var ts, zs []float64
	for range 20000 {
		d := make([]float64, 4)
		for i := range d {
			d[i] = rnd.NormFloat64()
		}
		m := mean(d)
		e := Estimate{D: m, SE: math.Sqrt(variance(d, m) / 4), DF: 3, Defined: true}
		ts, zs = append(ts, e.D/e.SE), append(zs, e.Score())
	}
	rms := func(xs []float64) float64 {
		s := 0.0
		for _, x := range xs {
			s += x * x
		}
		return math.Sqrt(s / float64(len(xs)))
	}
	if r := rms(ts); r < 1.5 {
		t.Errorf("D/SE at 3 DF spreads %.2f, want about 1.73", r)
	}
	if r := rms(zs); math.Abs(r-1) > 0.03 {
		t.Errorf("scores at 3 DF spread %.3f, want 1", r)
	}
}

// ScoresSpread's bound is the chi-square's 95% quantile over the scores:
// qchisq(0.95, 10) = 18.307 in R, so sqrt(1.8307) for ten.
func TestScoresSpread(t *testing.T) {
	spread, bound := ScoresSpread([]float64{1, -1, 2, -2, 0, 0, 1, -1, 0, 0})
	if math.Abs(spread-math.Sqrt(12.0/10)) > 1e-9 || math.Abs(bound-math.Sqrt(18.307/10)) > 1e-3 {
		t.Errorf("ScoresSpread = %.4f, %.4f; want %.4f, %.4f", spread, bound, math.Sqrt(1.2), math.Sqrt(1.8307))
	}
}
