package reports

import (
	"strings"

	"github.com/patchbot/patchbot/judge"
)

// The reply's formatting, for other views of the same run (the dashboard,
// web): a page must show the numbers exactly as the mail does, so
// it calls the code that prints them rather than a copy of it.

// Cells is one row of the comparison table as the reply prints it.
type Cells struct {
	Base          string `json:"base"`           // base mean, e.g. "691.6", or "-" without samples
	BaseSpread    string `json:"base_spread"`    // e.g. "±  6%", or "" below the noise shown
	Change        string `json:"change"`         // e.g. "+86.1%", "n/a", or "" when a side is empty
	Mark          string `json:"mark"`           // "ns" (not significant), "?" (not judged) or ""
	Patched       string `json:"patched"`        // patched mean
	PatchedSpread string `json:"patched_spread"` // patched stddev as the reply prints it
}

// CellsOf formats r as the reply's table does, showing the spread from
// noiseShown (Options.Noise) of the mean.
func CellsOf(r judge.Row, noiseShown float64) Cells {
	change, mark := changeColumn(r)
	return Cells{
		Base:          side(r.Base),
		BaseSpread:    spread(r.Base, noiseShown),
		Change:        change,
		Mark:          strings.TrimSpace(mark),
		Patched:       side(r.Patched),
		PatchedSpread: spread(r.Patched, noiseShown),
	}
}

// Short formats a value with three significant digits as the reply's
// verdict and model lines do: 4938, 463, 9.71, 0.925.
func Short(v float64) string { return short3(v) }

// RunVerdict is the reply's first sentence for run: the verdict of the
// comparison of its results, or what failed. The comparison is nil for a
// failed run.
func RunVerdict(run *Run) (string, *judge.Comparison, error) {
	if run.Failure != nil {
		return failureVerdict(run), nil, nil
	}
	c, err := judge.Compare(run.Base, run.Patched, run.Options.Options)
	if err != nil {
		return "", nil, err
	}
	return Verdict(c), c, nil
}

// Legend is the paragraph under the reply's table that says how changes
// were judged, on one line, the spreads shown from noise of the mean.
func Legend(c *judge.Comparison, noise float64) string {
	var b strings.Builder
	tw := &lineWriter{w: &b}
	tw.legend(c, noise)
	return strings.Join(strings.Fields(b.String()), " ")
}
