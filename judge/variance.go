package judge

import (
	"math"
	"sort"
	"strconv"

	"github.com/patchbot/patchbot/suites"
)

// Where a metric's spread comes from, before a profile is sized to cut it:
// within a round (between its windows, Params.Windows), between the rounds
// of one boot, and between boots. Each Result given is one boot of one
// kernel (a side of a `patchbot suite run`, or an A/A run's two sides);
// the same kernel's boots are split together, so give A/A runs, or one
// kernel's results. A Result whose rounds each booted afresh (it records
// the time its reboots took, a profile with Params.Reboot) is as many
// boots as it has rounds: its rounds' spread is between boots. The split is a nested analysis of variance on the
// logarithm of each value (a change of a few percent reads as the same
// share at any level of the metric), by the method of moments: each
// component is what the spread at its level leaves once the levels below
// are accounted for, and 0 where the estimate falls below it.

// VarianceRow is one metric's split, each part a standard deviation on
// the log scale (0.05 is about 5%).
type VarianceRow struct {
	MetricID
	Boots, Rounds, Windows int // boots; rounds a boot and windows a round, on average
	// Window is the spread between the windows of one round; Round that of
	// a round's mean between the rounds of one boot, beyond what its
	// windows explain; Boot that of a boot's mean between boots, beyond
	// what its rounds explain.
	Window, Round, Boot float64
	// RoundMean is the spread of one round's value (the mean of its
	// windows) between the rounds of one boot, all parts below the boot's
	// together: what a comparison of rounds sees.
	RoundMean float64
	// BootARound: every round was a boot of its own (Params.Reboot), so
	// the rounds of one boot cannot be told from the boots: Round is 0
	// and Boot holds both.
	BootARound bool
	// Defined: at least two rounds in some boot, or at least two boots.
	Defined bool
}

// Variance splits the spread of every metric the results have. Rows are
// in the order of MetricID (suite, workload, cell, metric).
func Variance(results []suites.Result) []VarianceRow {
	type cell struct{ suite, workload, params, metric string }
	// A boot is a result, or one round of a result whose rounds each
	// booted afresh.
	type boot struct{ result, round int }
	ids := map[cell]MetricID{}
	// boot → round → windows (log values)
	data := map[cell]map[boot]map[int][]float64{}
	for i, r := range results {
		rebooted := r.Phases[suites.PhaseReboot] > 0
		for _, s := range r.Samples {
			k := cell{s.Suite, s.Workload, CellName(s.Params), s.Metric}
			if _, ok := ids[k]; !ok {
				ids[k] = MetricID{Suite: s.Suite, Workload: s.Workload, Params: s.Params, Metric: s.Metric, Unit: s.Unit, HigherIsBetter: s.HigherIsBetter}
				data[k] = map[boot]map[int][]float64{}
			}
			b := boot{i, 0}
			if rebooted {
				b.round = s.Round
			}
			if data[k][b] == nil {
				data[k][b] = map[int][]float64{}
			}
			ws := s.Windows
			if len(ws) == 0 {
				ws = []float64{s.Value}
			}
			for _, v := range ws {
				if v > 0 {
					data[k][b][s.Round] = append(data[k][b][s.Round], math.Log(v))
				}
			}
		}
	}
	var out []VarianceRow
	for k, byBoot := range data {
		boots := make([]map[int][]float64, 0, len(byBoot))
		for _, rounds := range byBoot {
			boots = append(boots, rounds)
		}
		out = append(out, split(ids[k], boots))
	}
	sort.Slice(out, func(i, j int) bool {
		a, b := out[i].MetricID, out[j].MetricID
		if a.Suite != b.Suite {
			return a.Suite < b.Suite
		}
		if a.Workload != b.Workload {
			return a.Workload < b.Workload
		}
		if a.Cell() != b.Cell() {
			return lessCell(a.Params, b.Params)
		}
		return a.Metric < b.Metric
	})
	return out
}

// lessCell orders cells by their parameters, numbers as numbers.
func lessCell(a, b map[string]string) bool {
	keys := map[string]bool{}
	for k := range a {
		keys[k] = true
	}
	for k := range b {
		keys[k] = true
	}
	sorted := make([]string, 0, len(keys))
	for k := range keys {
		sorted = append(sorted, k)
	}
	sort.Strings(sorted)
	for _, k := range sorted {
		x, y := a[k], b[k]
		if x == y {
			continue
		}
		fx, ex := strconv.ParseFloat(x, 64)
		fy, ey := strconv.ParseFloat(y, 64)
		if ex == nil && ey == nil {
			return fx < fy
		}
		return x < y
	}
	return false
}

// split is the nested analysis of one metric: boots of rounds of windows.
func split(id MetricID, boots []map[int][]float64) VarianceRow {
	row := VarianceRow{MetricID: id}
	var (
		ssW, dfW     float64 // within rounds
		ssR, dfR     float64 // between round means within boots
		bootMeans    []float64
		nRounds, nWs []float64
	)
	for _, rounds := range boots {
		if len(rounds) == 0 {
			continue
		}
		var means []float64
		for _, ws := range rounds {
			m := mean(ws)
			for _, v := range ws {
				ssW += (v - m) * (v - m)
			}
			dfW += float64(len(ws) - 1)
			means = append(means, m)
			nWs = append(nWs, float64(len(ws)))
		}
		bm := mean(means)
		for _, m := range means {
			ssR += (m - bm) * (m - bm)
		}
		dfR += float64(len(means) - 1)
		bootMeans = append(bootMeans, bm)
		nRounds = append(nRounds, float64(len(means)))
	}
	row.Boots = len(bootMeans)
	row.BootARound = dfR == 0 // every boot had one round
	if row.Boots == 0 || row.BootARound && row.Boots < 2 {
		return row
	}
	row.Defined = true
	row.Rounds = int(math.Round(mean(nRounds)))
	row.Windows = int(math.Round(mean(nWs)))
	w := mean(nWs)
	vw := 0.0
	if dfW > 0 {
		vw = ssW / dfW
	}
	row.Window = math.Sqrt(vw)
	vBootMean := 0.0 // the variance of a boot's mean
	if len(bootMeans) > 1 {
		bm := mean(bootMeans)
		ss := 0.0
		for _, m := range bootMeans {
			ss += (m - bm) * (m - bm)
		}
		vBootMean = ss / float64(len(bootMeans)-1)
	}
	if row.BootARound {
		// A boot's mean is one round's: the rounds' share and the boots'
		// are one.
		row.RoundMean = math.Sqrt(vBootMean)
		row.Boot = math.Sqrt(math.Max(0, vBootMean-vw/w))
		return row
	}
	vRoundMean := ssR / dfR // the variance of one round's mean
	row.RoundMean = math.Sqrt(vRoundMean)
	row.Round = math.Sqrt(math.Max(0, vRoundMean-vw/w))
	if len(bootMeans) > 1 {
		row.Boot = math.Sqrt(math.Max(0, vBootMean-vRoundMean/mean(nRounds)))
	}
	return row
}

func mean(xs []float64) float64 {
	s := 0.0
	for _, x := range xs {
		s += x
	}
	return s / float64(len(xs))
}
