package reports_test

import (
	"fmt"
	"os"

	"github.com/patchbot/patchbot/judge"
	"github.com/patchbot/patchbot/reports"
	"github.com/patchbot/patchbot/suites"
)

// result makes a suite result of two metrics of the read storm, its
// throughput and the wake-ups per cache release behind it, one sample of
// each per round.
func result(kernel string, throughput, wakeups []float64) suites.Result {
	r := suites.Result{Suite: "cache-contention", Kernel: kernel}
	for i := range throughput {
		r.Samples = append(r.Samples,
			suites.Sample{Suite: "cache-contention", Workload: "read-storm", Metric: "files_per_s",
				Unit: "files/s", HigherIsBetter: true, Round: i + 1, Value: throughput[i]},
			suites.Sample{Suite: "cache-contention", Workload: "read-storm", Metric: "wakeups_per_release",
				Unit: "wakeups/release", Round: i + 1, Value: wakeups[i]})
	}
	return r
}

func Example() {
	base := []suites.Result{result("base", []float64{210, 190, 205, 200, 195}, []float64{9.6, 9.8, 9.5, 9.7, 9.9})}
	patched := []suites.Result{result("patched", []float64{300, 310, 290, 305, 295}, []float64{1.1, 1.0, 1.2, 1.1, 1.1})}
	c, err := judge.Compare(base, patched, judge.Options{})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(reports.Verdict(c))
	fmt.Println(reports.Headline(c))
	fmt.Println()
	reports.WritePrimary(os.Stdout, c)
	fmt.Println()
	reports.WriteTable(os.Stdout, c, reports.Commits{}, reports.DefaultNoiseShown)
	// Output:
	// Improvement: the patch improves read-storm throughput by 50.1% (95% interval 42.7% to 57.8%). Behind it: the patch cuts read-storm scheduler wake-ups per cache release from 9.7 to 1.1, by 88.7% (95% interval 87.7% to 89.5%).
	// patchbot noticed a 50.1% improvement of cache-contention.read-storm.files_per_s
	//
	//      base   patched  change  95% interval       reach  metric
	// cache-contention / read-storm
	//     199.9     299.9  +50.1% [+42.7%, +57.8%]        - better files_per_s
	// mechanism counters (they explain a change, never decide it):
	// cache-contention / read-storm
	//      9.70      1.10  -88.7% [-89.5%, -87.7%]        - better wakeups_per_release
	//
	//          %stddev     %change         %stddev
	//              \          |                \
	// primary metrics:
	// cache-contention / read-storm
	//        200.0 ±  4%   +50.0%           300.0 ±  3%  files_per_s (files/s)
	// derived counters:
	// cache-contention / read-storm
	//         9.70         -88.7%            1.10 ±  6%  wakeups_per_release
	//
	// %change: patched vs base mean. Judged by Welch's t-test on log values,
	// two-sided, Holm-Bonferroni within each family (the 1 primary metric; the 1
	// derived counter) at alpha 0.05. "ns": not significant. "~": significant, but
	// below the noise floor or with the two kernels' runs overlapping, so not called a
	// change. "?": fewer than 3 runs a side, not judged. ±N%: stddev, shown from 2% of
	// the mean.
}
