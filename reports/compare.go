// Package reports turns raw suite results into the comparison a maintainer
// reads: statistics per metric (reports/stats), the kernel-test-robot style
// table, the reply mail, and the run directory kept for every run.
package reports

import (
	"errors"
	"fmt"
	"math"
	"sort"
	"strings"

	"github.com/patchbot/patchbot/reports/stats"
	"github.com/patchbot/patchbot/suites"
)

// Options say how to judge a change. The zero value is the default.
type Options struct {
	// Alpha is the family-wise error rate of one comparison (default 0.05).
	Alpha float64 `json:"alpha" yaml:"alpha"`
	// Test is the two-sample test (default Welch).
	Test stats.Test `json:"test" yaml:"test"`
	// NoiseShown is the relative stddev from which "±N%" is printed
	// (default 0.02): below it the spread does not change a reading.
	NoiseShown float64 `json:"noise_shown" yaml:"noise_shown"`
}

func (o Options) withDefaults() Options {
	if o.Alpha == 0 {
		o.Alpha = 0.05
	}
	if o.NoiseShown == 0 {
		o.NoiseShown = 0.02
	}
	return o
}

// Row is one metric in one workload cell, compared between the kernels.
type Row struct {
	Suite          string            `json:"suite"`
	Workload       string            `json:"workload"`
	Params         map[string]string `json:"params,omitempty"`
	Metric         string            `json:"metric"`
	Unit           string            `json:"unit"`
	HigherIsBetter bool              `json:"higher_is_better"`
	Base           stats.Summary     `json:"base"`
	Patched        stats.Summary     `json:"patched"`
	// Change is (patched - base) / |base| of the means; 0 when the base
	// mean is zero (see HasChange), so that the JSON stays valid.
	Change float64 `json:"change"`
	// P is the test's p-value; AdjustedP is after Holm-Bonferroni across
	// every judged row of the comparison.
	P         float64 `json:"p"`
	AdjustedP float64 `json:"adjusted_p"`
	// Judged is false when a side has fewer than stats.MinSamples runs.
	Judged      bool `json:"judged"`
	Significant bool `json:"significant"`
}

// Better reports whether the patched kernel moved this metric the good way.
func (r Row) Better() bool {
	return (r.Patched.Mean > r.Base.Mean) == r.HigherIsBetter && r.Patched.Mean != r.Base.Mean
}

// HasChange is false when the change cannot be expressed relative to the
// base (a zero base mean) or a side has no samples.
func (r Row) HasChange() bool {
	return r.Base.Mean != 0 && r.Base.N > 0 && r.Patched.N > 0
}

// Ratio is patched over base (or base over patched, whichever is >= 1):
// "1.8x" reads better than "+80%" for large changes.
func (r Row) Ratio() float64 {
	a, b := r.Base.Mean, r.Patched.Mean
	if a == 0 || b == 0 {
		return math.Inf(1)
	}
	return math.Max(a/b, b/a)
}

// Cell names the coordinates of the row within its workload, e.g.
// "bucket=<256K readers=4", in sorted key order.
func (r Row) Cell() string { return cellName(r.Params) }

func cellName(params map[string]string) string {
	keys := make([]string, 0, len(params))
	for k := range params {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = k + "=" + params[k]
	}
	return strings.Join(parts, " ")
}

// Comparison is every metric of two kernels' results.
type Comparison struct {
	Base    string           `json:"base"` // kernel labels from the results
	Patched string           `json:"patched"`
	Test    string           `json:"test"`
	Alpha   float64          `json:"alpha"`
	Options Options          `json:"-"`
	Rows    []Row            `json:"rows"`
	Missing []suites.Missing `json:"missing,omitempty"`
}

// Judged counts the rows that have enough runs to be tested.
func (c *Comparison) Judged() int {
	n := 0
	for _, r := range c.Rows {
		if r.Judged {
			n++
		}
	}
	return n
}

// SignificantRows returns the rows whose change is significant.
func (c *Comparison) SignificantRows() []Row {
	var out []Row
	for _, r := range c.Rows {
		if r.Significant {
			out = append(out, r)
		}
	}
	return out
}

type rowKey struct{ suite, workload, cell, metric string }

// Compare pools the samples of each metric over every result of a kernel
// (one result per suite run, or several rounds) and compares base with
// patched. Metrics measured on only one side are kept with an empty side,
// unjudged.
func Compare(base, patched []suites.Result, opt Options) (*Comparison, error) {
	opt = opt.withDefaults()
	if opt.Alpha <= 0 || opt.Alpha >= 1 {
		return nil, fmt.Errorf("comparing results: alpha %v is not in (0, 1)", opt.Alpha)
	}
	if countSamples(base) == 0 {
		return nil, errors.New("comparing results: the base kernel has no samples")
	}
	if countSamples(patched) == 0 {
		return nil, errors.New("comparing results: the patched kernel has no samples")
	}
	c := &Comparison{
		Base: label(base, "base"), Patched: label(patched, "patched"),
		Test: opt.Test.String(), Alpha: opt.Alpha, Options: opt,
	}

	var order []rowKey
	rows := map[rowKey]*Row{}
	values := map[rowKey]*[2][]float64{}
	add := func(side int, results []suites.Result) {
		for _, res := range results {
			for _, s := range res.Samples {
				k := rowKey{s.Suite, s.Workload, cellName(s.Params), s.Metric}
				if rows[k] == nil {
					order = append(order, k)
					rows[k] = &Row{Suite: s.Suite, Workload: s.Workload, Params: s.Params,
						Metric: s.Metric, Unit: s.Unit, HigherIsBetter: s.HigherIsBetter}
					values[k] = &[2][]float64{}
				}
				values[k][side] = append(values[k][side], s.Value)
			}
			c.Missing = append(c.Missing, res.Missing...)
		}
	}
	add(0, base)
	add(1, patched)

	// Keep suites and workloads together, in the order they were first
	// measured within each (suites list their cells in a meaningful order).
	sort.SliceStable(order, func(i, j int) bool {
		a, b := order[i], order[j]
		if a.suite != b.suite {
			return a.suite < b.suite
		}
		return a.workload < b.workload
	})

	var judged []int
	var ps []float64
	for _, k := range order {
		r, v := rows[k], values[k]
		r.Base, r.Patched = stats.Summarize(v[0]), stats.Summarize(v[1])
		if r.Base.Mean != 0 {
			r.Change = (r.Patched.Mean - r.Base.Mean) / math.Abs(r.Base.Mean)
		}
		r.P, r.AdjustedP = 1, 1
		if r.Base.N >= stats.MinSamples && r.Patched.N >= stats.MinSamples {
			r.Judged = true
			r.P = opt.Test.PValue(v[0], v[1])
			judged = append(judged, len(c.Rows))
			ps = append(ps, r.P)
		}
		c.Rows = append(c.Rows, *r)
	}
	for i, adj := range stats.Holm(ps) {
		r := &c.Rows[judged[i]]
		r.AdjustedP = adj
		r.Significant = adj < opt.Alpha
	}
	return c, nil
}

func countSamples(rs []suites.Result) int {
	n := 0
	for _, r := range rs {
		n += len(r.Samples)
	}
	return n
}

func label(rs []suites.Result, def string) string {
	for _, r := range rs {
		if r.Kernel != "" {
			return r.Kernel
		}
	}
	return def
}
