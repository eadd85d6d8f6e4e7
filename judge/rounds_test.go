package judge

import (
	"testing"

	"github.com/patchbot/patchbot/suites"
)

// The controls agree with kept rounds inside their range widened by the
// noise floor, and a host that drifted beyond it is told.
func TestDrifted(t *testing.T) {
	mk := func(vs ...float64) *suites.Result {
		r := &suites.Result{}
		for i, v := range vs {
			r.Samples = append(r.Samples, suites.Sample{Workload: "read-storm", Metric: "files_per_s", Round: i + 1, Value: v},
				suites.Sample{Workload: "read-storm", Metric: "sched_wakeup", Round: i + 1, Value: 1e6 * v})
		}
		return r
	}
	kept := mk(100, 110, 95, 105)
	for _, tt := range []struct {
		controls *suites.Result
		drifted  bool
	}{
		{mk(102), false},
		{mk(114), false}, // inside the range widened by the 5% noise floor
		{mk(120), true},
		{mk(85, 86), true},
	} {
		why := Rounds{}.Drifted("cache-contention", kept, tt.controls)
		if (why != "") != tt.drifted {
			t.Errorf("controls %v: drifted %q, want %v", tt.controls.Samples[0].Value, why, tt.drifted)
		}
	}
}
