package reports_test

import (
	"fmt"
	"os"

	"github.com/patchbot/patchbot/reports"
	"github.com/patchbot/patchbot/suites"
)

// result makes a suite result of one metric, one sample per round.
func result(kernel string, values ...float64) suites.Result {
	r := suites.Result{Suite: "cache-contention", Kernel: kernel}
	for i, v := range values {
		r.Samples = append(r.Samples, suites.Sample{Suite: "cache-contention", Workload: "stat-storm",
			Metric: "wakeups_per_release", Unit: "count", Round: i, Value: v})
	}
	return r
}

func ExampleCompare() {
	base := []suites.Result{result("base", 9.6, 9.8, 9.5, 9.7, 9.9)}
	patched := []suites.Result{result("patched", 1.1, 1.0, 1.2, 1.1, 1.1)}
	c, err := reports.Compare(base, patched, reports.Options{})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(reports.Verdict(c))
	reports.WriteTable(os.Stdout, c, reports.Commits{})
	// Output:
	// The patch cuts stat-storm scheduler wake-ups per cache release from 9.7 to 1.1 (significant).
	//          %stddev     %change         %stddev
	//              \          |                \
	// cache-contention / stat-storm
	//         9.70         -88.7%            1.10 ±  6%  wakeups_per_release (count)
	//
	// %change: patched vs base mean; judged by Welch's t-test, two-sided,
	// Holm-Bonferroni across the 1 judged metric, alpha 0.05. "ns": not significant.
	// "?": fewer than 3 runs a side, not judged. ±N%: stddev, shown from 2% of the
	// mean.
}
