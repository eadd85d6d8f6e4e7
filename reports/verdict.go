package reports

import (
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"
)

// phrases turn metric names into words for the verdict sentence. A metric
// not listed here reads as its name with spaces.
var phrases = map[string]string{
	"files_per_s":         "throughput",
	"mib_per_s":           "throughput",
	"ops_per_s":           "throughput",
	"latency_mean":        "mean latency",
	"latency_p50":         "median latency",
	"latency_p99":         "99th percentile latency",
	"latency_max":         "worst-case latency",
	"elapsed":             "time",
	"acquisitions_per_s":  "lock acquisitions per second",
	"sched_wakeup":        "scheduler wake-ups",
	"context_switches":    "context switches",
	"ttwu":                "try-to-wake-up calls",
	"wakeups_per_release": "scheduler wake-ups per cache release",
	"cache_releases":      "cache releases",
}

// describe names a row for a reader: "read-storm throughput", or for a
// cell "bucket-read time (bucket=lt256K readers=4)".
func describe(r Row) string {
	p, ok := phrases[r.Metric]
	if !ok {
		p = strings.ReplaceAll(r.Metric, "_", " ")
	}
	s := r.Workload + " " + p
	if cell := r.Cell(); cell != "" {
		s += " (" + cell + ")"
	}
	return s
}

// claim says what the patch did to one significant row, e.g. "improves
// read-storm throughput by 1.8x" or "cuts stat-storm scheduler wake-ups
// from 9.6 to 1.1".
func claim(r Row) string {
	name := describe(r)
	from, to := short3(r.Base.Mean), short3(r.Patched.Mean)
	if r.Unit != "" && r.Unit != "count" {
		from, to = from+" "+r.Unit, to+" "+r.Unit
	}
	up := r.Patched.Mean > r.Base.Mean
	switch {
	case r.HigherIsBetter && up:
		return "improves " + name + " by " + factor(r)
	case r.HigherIsBetter:
		return "lowers " + name + " from " + from + " to " + to
	case !up:
		return "cuts " + name + " from " + from + " to " + to
	default:
		return "raises " + name + " from " + from + " to " + to
	}
}

// factor is "1.8x" for large changes and "4.2%" for small ones.
func factor(r Row) string {
	if ratio := r.Ratio(); ratio >= 1.1 {
		if math.IsInf(ratio, 1) {
			return "an unbounded factor"
		}
		return strconv.FormatFloat(ratio, 'f', 1, 64) + "x"
	}
	return fmt.Sprintf("%.1f%%", math.Abs(r.Change)*100)
}

// short3 prints three significant digits, and large counts whole rather
// than with an exponent, as a person writes them: 4938, 463, 9.71, 0.925.
func short3(v float64) string {
	if math.Abs(v) >= 1000 {
		return strconv.FormatFloat(v, 'f', 0, 64)
	}
	return strconv.FormatFloat(v, 'g', 3, 64)
}

// headline ranks the metrics a verdict prefers to cite among costs: the
// seed's own metric first, then the scheduler's counters, then latency.
// Others (derived counters) rank after them, by size of change.
var headline = map[string]int{
	"wakeups_per_release": 1,
	"sched_wakeup":        2,
	"context_switches":    3,
	"latency_mean":        4,
	"latency_p99":         5,
	"elapsed":             6,
}

func rank(r Row) int {
	if n, ok := headline[r.Metric]; ok {
		return n
	}
	return len(headline) + 1
}

// Verdict is the reply's first sentence for a comparison. It cites only
// significant changes: the two largest improvements and the largest
// regression.
func Verdict(c *Comparison) string {
	judged := c.Judged()
	if judged == 0 {
		return fmt.Sprintf("Too few runs to judge any change: every metric needs at least %d runs "+
			"on each kernel.", 3)
	}
	var better, worse []Row
	for _, r := range c.SignificantRows() {
		if r.Better() {
			better = append(better, r)
		} else if r.Patched.Mean != r.Base.Mean {
			worse = append(worse, r)
		}
	}
	if len(better)+len(worse) == 0 {
		return fmt.Sprintf("No significant change: none of the %d metrics measured moved beyond "+
			"the noise (%s, Holm-Bonferroni, alpha %g).", judged, c.Test, c.Alpha)
	}
	bySize := func(rs []Row) {
		sort.SliceStable(rs, func(i, j int) bool { return rs[i].Ratio() > rs[j].Ratio() })
	}
	bySize(better)
	bySize(worse)

	// Headline one rate (throughput, acquisitions) and one cost (wake-ups,
	// latency) when both improved: together they say what and why.
	var rates, costs []Row
	for _, r := range better {
		if r.HigherIsBetter {
			rates = append(rates, r)
		} else {
			costs = append(costs, r)
		}
	}
	sort.SliceStable(costs, func(i, j int) bool { return rank(costs[i]) < rank(costs[j]) })
	var claims []string
	switch {
	case len(rates) > 0 && len(costs) > 0:
		claims = []string{claim(rates[0]), claim(costs[0])}
	case len(costs) > 0:
		for _, r := range costs[:min(2, len(costs))] {
			claims = append(claims, claim(r))
		}
	default:
		for _, r := range rates[:min(2, len(rates))] {
			claims = append(claims, claim(r))
		}
	}
	s := "The patch " + strings.Join(claims, " and ")
	cited := len(claims)
	if len(worse) > 0 {
		if len(claims) > 0 {
			s += ", but "
		}
		s += claim(worse[0])
		cited++
	}
	switch cited {
	case 1:
		s += " (significant"
	case 2:
		s += " (both significant"
	default:
		s += " (all significant"
	}
	if n := len(better) + len(worse); n > cited {
		s += fmt.Sprintf("; %d of %d metrics changed significantly", n, judged)
	}
	return s + ")."
}
