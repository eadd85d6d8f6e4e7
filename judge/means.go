package judge

import (
	"sort"
	"strings"

	"github.com/patchbot/patchbot/suites"
)

// MeanRow is one metric's mean over the rounds, in each of some results.
type MeanRow struct {
	Workload string
	Params   string // "k=v,k=v", sorted
	Metric   string
	Unit     string
	Means    []float64 // one per result, in order; 0 where it did not measure the metric
}

// Means are every metric's means over the rounds of each result, by
// workload and then in the order first measured: a quick look at suite
// runs (patchbot suite run). Spread and significance are Compare's.
func Means(results []*suites.Result) []MeanRow {
	type key struct{ workload, params, metric, unit string }
	var keys []key
	seen := map[key]bool{}
	sums := make([]map[key]float64, len(results))
	ns := make([]map[key]int, len(results))
	for i, r := range results {
		sums[i], ns[i] = map[key]float64{}, map[key]int{}
		for _, s := range r.Samples {
			k := key{s.Workload, strings.ReplaceAll(CellName(s.Params), " ", ","), s.Metric, s.Unit}
			sums[i][k] += s.Value
			ns[i][k]++
			if !seen[k] {
				seen[k] = true
				keys = append(keys, k)
			}
		}
	}
	sort.SliceStable(keys, func(i, j int) bool { return keys[i].workload < keys[j].workload })
	out := make([]MeanRow, len(keys))
	for j, k := range keys {
		out[j] = MeanRow{Workload: k.workload, Params: k.params, Metric: k.metric, Unit: k.unit, Means: make([]float64, len(results))}
		for i := range results {
			if n := ns[i][k]; n > 0 {
				out[j].Means[i] = sums[i][k] / float64(n)
			}
		}
	}
	return out
}
