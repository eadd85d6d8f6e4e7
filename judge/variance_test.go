package judge

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/patchbot/patchbot/suites"
)

// The split finds the spread put in at each level: 6 boots of 8 rounds
// of 6 windows, with known standard deviations (log scale) between
// windows, rounds and boots, and a metric without windows whose spread is
// all between rounds.
func TestVarianceSplit(t *testing.T) {
	const boots, rounds, windows = 12, 8, 6
	wantW, wantR, wantB := 0.08, 0.03, 0.02
	rng := rand.New(rand.NewPCG(1, 2))
	var rs []suites.Result
	for b := 0; b < boots; b++ {
		r := suites.Result{Suite: "locks", Kernel: "base"}
		boot := wantB * rng.NormFloat64()
		for n := 1; n <= rounds; n++ {
			round := wantR * rng.NormFloat64()
			var ws []float64
			sum := 0.0
			for w := 0; w < windows; w++ {
				v := 1000 * math.Exp(boot+round+wantW*rng.NormFloat64())
				ws = append(ws, v)
				sum += v
			}
			r.Samples = append(r.Samples,
				suites.Sample{Suite: "locks", Workload: "posix", Params: map[string]string{"contenders": "10"}, Metric: "acquisitions_per_s", Round: n, Value: sum / windows, Windows: ws},
				suites.Sample{Suite: "locks", Workload: "posix", Params: map[string]string{"contenders": "2"}, Metric: "acquisitions_per_s", Round: n, Value: 50 * math.Exp(0.05*rng.NormFloat64())})
		}
		rs = append(rs, r)
	}
	rows := Variance(rs)
	if len(rows) != 2 || rows[0].Cell() != "contenders=2" {
		t.Fatalf("rows %+v: want contenders=2, then 10 (numbers in order)", rows)
	}
	won := rows[1]
	t.Logf("window %.3f round %.3f boot %.3f (want %v %v %v), a round's value %.3f", won.Window, won.Round, won.Boot, wantW, wantR, wantB, won.RoundMean)
	if won.Boots != boots || won.Rounds != rounds || won.Windows != windows {
		t.Errorf("shape %d/%d/%d, want %d/%d/%d", won.Boots, won.Rounds, won.Windows, boots, rounds, windows)
	}
	for _, c := range []struct {
		name      string
		got, want float64
		tol       float64
	}{{"window", won.Window, wantW, 0.01}, {"round", won.Round, wantR, 0.012}, {"boot", won.Boot, wantB, 0.012},
		{"a round's value", won.RoundMean, math.Sqrt(wantW*wantW/windows + wantR*wantR), 0.012}} {
		if math.Abs(c.got-c.want) > c.tol {
			t.Errorf("%s: %.3f, want %.3f ± %.3f", c.name, c.got, c.want, c.tol)
		}
	}
	no := rows[0]
	if no.Windows != 1 || no.Window != 0 || math.Abs(no.Round-0.05) > 0.012 || !no.Defined {
		t.Errorf("no windows: %+v, want its spread between rounds (0.05)", no)
	}
}

// A result whose rounds each booted afresh (it records its reboots) is a
// boot a round: the spread between its rounds is the boots', and the
// rounds of one boot cannot be told apart from it.
func TestVarianceBootARound(t *testing.T) {
	const results, rounds, windows = 10, 6, 4
	wantW, wantB := 0.04, 0.03
	rng := rand.New(rand.NewPCG(3, 4))
	var rs []suites.Result
	for i := 0; i < results; i++ {
		r := suites.Result{Suite: "cache-contention", Kernel: "base", Phases: map[string]float64{suites.PhaseReboot: 40}}
		for n := 1; n <= rounds; n++ {
			boot := wantB * rng.NormFloat64()
			var ws []float64
			sum := 0.0
			for w := 0; w < windows; w++ {
				v := 500 * math.Exp(boot+wantW*rng.NormFloat64())
				ws = append(ws, v)
				sum += v
			}
			r.Samples = append(r.Samples, suites.Sample{Suite: "cache-contention", Workload: "stat-storm", Metric: "files_per_s", Round: n, Value: sum / windows, Windows: ws})
		}
		rs = append(rs, r)
	}
	rows := Variance(rs)
	if len(rows) != 1 {
		t.Fatalf("rows %+v, want one", rows)
	}
	row := rows[0]
	t.Logf("window %.3f round %.3f boot %.3f (want %v, -, %v), a round's value %.3f", row.Window, row.Round, row.Boot, wantW, wantB, row.RoundMean)
	if !row.Defined || !row.BootARound || row.Boots != results*rounds || row.Rounds != 1 || row.Round != 0 {
		t.Errorf("shape %+v: want %d boots of one round each", row, results*rounds)
	}
	if math.Abs(row.Window-wantW) > 0.006 || math.Abs(row.Boot-wantB) > 0.008 {
		t.Errorf("window %.3f, boot %.3f: want %v and %v", row.Window, row.Boot, wantW, wantB)
	}
	if want := math.Sqrt(wantW*wantW/windows + wantB*wantB); math.Abs(row.RoundMean-want) > 0.008 {
		t.Errorf("a round's value %.3f, want %.3f", row.RoundMean, want)
	}
}
