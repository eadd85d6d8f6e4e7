package reports

import "testing"

// A run's finding, as a reply's addressing reads it: the patch's failure
// to build, boot or survive is kernel trouble; one before any kernel
// (apply, base, series) is "not tested"; a run without results cannot
// be judged, and says so (its reply then goes where it always went).
func TestFindingOf(t *testing.T) {
	for stage, want := range map[Stage]Finding{StageBuild: FindingTrouble, StageBoot: FindingTrouble, StageSuite: FindingTrouble,
		StageApply: FindingNotTested, StageBase: FindingNotTested, StageSeries: FindingNotTested} {
		if got, err := FindingOf(&Run{Failure: &Failure{Stage: stage}}); got != want || err != nil {
			t.Errorf("%s: %q, %v; want %q", stage, got, err, want)
		}
	}
	if got, err := FindingOf(&Run{}); got != "" || err == nil {
		t.Errorf("a run without results: %q, %v; want an error", got, err)
	}
}
