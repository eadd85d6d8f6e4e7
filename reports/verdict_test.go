package reports

import (
	"strings"
	"testing"

	"github.com/patchbot/patchbot/reports/stats"
)

// The verdict cites the seed's own metric ahead of a derived counter that
// changed by a larger factor, and writes large counts without exponents.
func TestVerdictPrefersHeadlineMetrics(t *testing.T) {
	row := func(metric string, base, patched float64) Row {
		return Row{Suite: "cache-contention", Workload: "read-storm", Metric: metric, Unit: "count",
			Base: stats.Summary{N: 5, Mean: base}, Patched: stats.Summary{N: 5, Mean: patched},
			Change: (patched - base) / base, Judged: true, Significant: true}
	}
	c := &Comparison{Test: "Welch's t-test", Alpha: 0.05, Rows: []Row{
		row("release_wakeups", 6811, 693),
		row("wakeups_per_release", 8.05, 0.925),
		row("sched_wakeup", 15550, 8803),
	}}
	v := Verdict(c)
	if !strings.Contains(v, "scheduler wake-ups per cache release from 8.05 to 0.925") {
		t.Errorf("verdict does not lead with wake-ups per release: %q", v)
	}
	if strings.Contains(v, "release wakeups") || !strings.Contains(v, "from 15550 to 8803") {
		t.Errorf("verdict should cite the headline metrics, not the derived release_wakeups: %q", v)
	}
	if strings.Contains(v, "e+") {
		t.Errorf("verdict writes a number with an exponent: %q", v)
	}
	for v, want := range map[float64]string{4938.2: "4938", 463.4: "463", 9.71: "9.71", 0.925: "0.925"} {
		if got := short3(v); got != want {
			t.Errorf("short3(%g) = %q, want %q", v, got, want)
		}
	}
}
