package stats

import (
	"math"
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
