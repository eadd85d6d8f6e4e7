package stats

import (
	"math"
	"math/rand/v2"
	"testing"
)

func TestHochberg(t *testing.T) {
	// R: p.adjust(c(.01,.04,.03,.005), "hochberg") is 0.03 0.04 0.04 0.02;
	// p.adjust(c(.02,.03,.04,.045), "hochberg") is 0.045 for all four.
	for _, tc := range []struct{ p, want []float64 }{
		{[]float64{0.01, 0.04, 0.03, 0.005}, []float64{0.03, 0.04, 0.04, 0.02}},
		{[]float64{0.02, 0.03, 0.04, 0.045}, []float64{0.045, 0.045, 0.045, 0.045}},
		{[]float64{0.5, 0.9}, []float64{0.9, 0.9}},
		{[]float64{0.6}, []float64{0.6}},
	} {
		got := Hochberg(tc.p)
		for i := range tc.want {
			if !near(got[i], tc.want[i], 1e-12) {
				t.Errorf("Hochberg(%v) = %v, want %v", tc.p, got, tc.want)
				break
			}
		}
	}
}

// family draws one family of m metrics, runs a side each, base and
// patched: log-normal noise of spread cv, correlated rho between the
// metrics of a run (they share the run's rounds), the patched side moved
// by effect (one ratio per metric; nil: none).
func drawFamily(rng *rand.Rand, m, runs int, cv, rho float64, effect []float64) []Pair {
	fam := make([]Pair, m)
	s := math.Sqrt(math.Log1p(cv * cv))
	for side := 0; side < 2; side++ {
		for r := 0; r < runs; r++ {
			shared := rng.NormFloat64()
			for i := range fam {
				z := math.Sqrt(rho)*shared + math.Sqrt(1-rho)*rng.NormFloat64()
				mu := 100.0
				if side == 1 && effect != nil {
					mu *= effect[i]
				}
				v := mu * math.Exp(s*z)
				if side == 0 {
					fam[i].Base = append(fam[i].Base, v)
				} else {
					fam[i].Patched = append(fam[i].Patched, v)
				}
			}
		}
	}
	return fam
}

// TestFamilyCorrections: Hochberg's step-up keeps the family's false
// positives at the level for families whose metrics are correlated as a
// suite's are (and independent ones), and buys the power Holm's step-down
// loses on a change the whole family shows (a curve moved in every cell:
// each cell is called more often), while a lone change is found as often
// under both. The A/A families are
// the locks curve's shape: 8 metrics, 5 runs a side, at 0.05.
func TestFamilyCorrections(t *testing.T) {
	const (
		families = 4000
		m        = 8
		runs     = 5
		level    = 0.05
		cv       = 0.05
	)
	limit := int(level*families + 3*math.Sqrt(level*(1-level)*families))
	for _, rho := range []float64{0, 0.3, 0.6, 0.9} {
		rng := rand.New(rand.NewPCG(42, uint64(100*rho)))
		flagged := map[Correction]int{}
		for i := 0; i < families; i++ {
			fam := drawFamily(rng, m, runs, cv, rho, nil)
			for _, c := range []Correction{CorrectHolm, CorrectHochberg} {
				for _, j := range JudgeFamily(LogWelch, Rule{Alpha: level, Correction: c}, level, 0.1, fam) {
					if j.Significant {
						flagged[c]++
						break
					}
				}
			}
		}
		t.Logf("A/A, correlation %.1f: %d (Holm), %d (Hochberg) of %d families flagged a change", rho, flagged[CorrectHolm], flagged[CorrectHochberg], families)
		for c, n := range flagged {
			if n > limit {
				t.Errorf("A/A, correlation %.1f, %s: %d of %d families flagged, want at most %d (level %g)", rho, c, n, families, limit, level)
			}
		}
	}

	// Power: every cell 8% slower (about 1.6 standard deviations of a run).
	all := make([]float64, m)
	one := make([]float64, m)
	for i := range all {
		all[i], one[i] = 0.92, 1
	}
	one[0] = 0.88
	power := func(effect []float64, c Correction, which int) float64 {
		rng := rand.New(rand.NewPCG(43, 1))
		found := 0
		for i := 0; i < families; i++ {
			js := JudgeFamily(LogWelch, Rule{Alpha: level, Correction: c}, level, 0.1, drawFamily(rng, m, runs, cv, 0.3, effect))
			if js[which].Significant {
				found++
			}
		}
		return float64(found) / families
	}
	holmAll, hochAll := power(all, CorrectHolm, 3), power(all, CorrectHochberg, 3)
	holmOne, hochOne := power(one, CorrectHolm, 0), power(one, CorrectHochberg, 0)
	t.Logf("every cell 8%% slower: a cell found in %.0f%% (Holm), %.0f%% (Hochberg) of families", 100*holmAll, 100*hochAll)
	t.Logf("one cell 12%% slower: found in %.0f%% (Holm), %.0f%% (Hochberg)", 100*holmOne, 100*hochOne)
	// Measured: 30% against 26% (and 59% against 51% when every cell is
	// 10% slower): each cell of a curve that moved is called more often,
	// though a family either finds or misses (the family's outcome) alike.
	if hochAll < holmAll+0.03 {
		t.Errorf("a change of the whole family: Hochberg finds a cell in %.0f%%, Holm %.0f%%: want more", 100*hochAll, 100*holmAll)
	}
	if math.Abs(hochOne-holmOne) > 0.03 {
		t.Errorf("a lone change: Hochberg %.0f%%, Holm %.0f%%: want about the same", 100*hochOne, 100*holmOne)
	}
}
