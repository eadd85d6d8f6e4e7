package reports

import "github.com/patchbot/patchbot/judge"

// Finding is what a finished run's reply tells, in the classes its
// addressing reads (intake's Desk.Audience): a list hears what a run
// found, not that it found nothing.
type Finding string

const (
	FindingImprovement Finding = "improvement" // the verdict's outcome words
	FindingRegression  Finding = "regression"
	FindingMixed       Finding = "mixed"
	// FindingTrouble is kernel trouble on the patched kernel: it did not
	// build, boot, or survive its suites (the patch's failure). Trouble
	// read from the console of a kernel that otherwise ran belongs here
	// too.
	FindingTrouble Finding = "kernel trouble"
	// FindingNoChange: no primary metric changed.
	FindingNoChange Finding = "no change"
	// FindingNotJudged: too few rounds were run to judge any primary
	// metric (a run asked for fewer than three a side, a dry run); the
	// reply says so, and how to measure more.
	FindingNotJudged Finding = "not judged"
	// FindingNotTested: the series was not tested (it applies to no tree,
	// names no base that exists, is too long); the reply says why.
	FindingNotTested Finding = "not tested"
)

// FindingOf is what a recorded run found (LoadRun's, with its results).
func FindingOf(run *Run) (Finding, error) {
	if run.Failure != nil || run.KernelTrouble() {
		return findingOf(run, nil), nil
	}
	c, err := judge.Compare(run.Base, run.Patched, run.Options.Options)
	if err != nil {
		return "", err
	}
	return findingOf(run, c), nil
}

// findingOf is the finding of a run and, when it measured, its
// comparison.
func findingOf(run *Run, c *judge.Comparison) Finding {
	if run.KernelTrouble() {
		return FindingTrouble
	}
	if f := run.Failure; f != nil {
		switch f.Stage {
		case judge.StageBuild, judge.StageBoot, judge.StageSuite:
			return FindingTrouble
		}
		return FindingNotTested
	}
	switch c.Outcome() {
	case judge.Improvement:
		return FindingImprovement
	case judge.Regression:
		return FindingRegression
	case judge.Mixed:
		return FindingMixed
	case judge.NotJudged:
		return FindingNotJudged
	}
	return FindingNoChange
}
