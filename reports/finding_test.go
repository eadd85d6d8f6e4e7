package reports

import (
	"testing"

	"github.com/patchbot/patchbot/judge"
)

// A run's finding, as a reply's addressing reads it: the patch's failure
// to build, boot or survive is kernel trouble; one before any kernel
// (apply, base, series) is "not tested"; a run without results cannot
// be judged, and says so (its reply then goes where it always went).
func TestFindingOf(t *testing.T) {
	for stage, want := range map[judge.Stage]Finding{judge.StageBuild: FindingTrouble, judge.StageBoot: FindingTrouble, judge.StageSuite: FindingTrouble,
		judge.StageApply: FindingNotTested, judge.StageBase: FindingNotTested, judge.StageSeries: FindingNotTested} {
		if got, err := FindingOf(&Run{Failure: &judge.Failure{Stage: stage}}); got != want || err != nil {
			t.Errorf("%s: %q, %v; want %q", stage, got, err, want)
		}
	}
	// A kernel that measured but printed a warning the base never did
	// is trouble, whatever its numbers: the list hears it. A stall the
	// host may have caused (transient) is not.
	warned := &Run{KernelWarnings: []judge.WarningCount{{Title: "WARNING: at fs/squashfs/cache.c:70", Kind: "WARNING", Patched: 1}}}
	if got, _ := FindingOf(warned); got != FindingTrouble {
		t.Errorf("a new warning: %q, want %q", got, FindingTrouble)
	}
	stalled := &Run{KernelWarnings: []judge.WarningCount{{Title: "rcu: INFO: rcu_sched self-detected stall", Kind: "RCU stall", Patched: 1}}}
	if got, _ := FindingOf(stalled); got == FindingTrouble {
		t.Errorf("a transient stall on the patched kernel alone: %q, want not trouble", got)
	}
	if got, err := FindingOf(&Run{}); got != "" || err == nil {
		t.Errorf("a run without results: %q, %v; want an error", got, err)
	}
}
