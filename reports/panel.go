package reports

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/patchbot/patchbot/judge"
	"github.com/patchbot/patchbot/suites"
)

// ReadPanelResults reads what `patchbot suite run --json` wrote for a
// patch ({"schema": 1, "results": [base, patched]}) or a run directory's
// base.json and patched.json, and returns the two sides.
func ReadPanelResults(path string) (base, patched []suites.Result, err error) {
	if fi, err := os.Stat(path); err == nil && fi.IsDir() {
		if base, err = ReadResults(filepath.Join(path, BaseFile)); err != nil {
			return nil, nil, err
		}
		patched, err = ReadResults(filepath.Join(path, PatchedFile))
		return base, patched, err
	}
	rs, err := ReadResults(path)
	if err != nil {
		return nil, nil, err
	}
	for _, r := range rs {
		switch r.Kernel {
		case "base":
			base = append(base, r)
		case "patched":
			patched = append(patched, r)
		}
	}
	if len(base) == 0 || len(patched) == 0 {
		return nil, nil, fmt.Errorf("%s: want results of a base and a patched kernel", path)
	}
	return base, patched, nil
}

// WritePanel writes the panel's table in Markdown: each patch's class,
// expected and reported outcome, its primary metrics' changes with their
// intervals, the rounds a side and why they stopped, and whether the
// verdict was right; then the counts.
func WritePanel(w io.Writer, vs []*judge.PanelVerdict) error {
	var b strings.Builder
	b.WriteString("| patch | class | expected | reported | right | rounds a side | primary metrics, patched/base (95% interval) |\n")
	b.WriteString("|---|---|---|---|---|---|---|\n")
	right, wrongDir, scored := 0, 0, 0
	for _, v := range vs {
		mark := "yes"
		if v.Patch.Expect != judge.Unknown {
			scored++
		}
		switch {
		case v.Patch.Expect == judge.Unknown:
			mark = "not scored"
		case len(v.WrongDirection) > 0:
			mark = "**no, wrong direction** (" + strings.Join(v.WrongDirection, ", ") + ")"
			wrongDir++
		case !v.Right:
			mark = "**no**"
		default:
			right++
		}
		var ms []string
		rows := v.Comparison.PrimaryRows()
		byRank(rows)
		for _, r := range rows {
			if !r.Interval.Defined {
				continue
			}
			word := judgement(r)
			ms = append(ms, fmt.Sprintf("%s %s [%s, %s] %s", describe(r),
				signedPct(r.Interval.Ratio-1), signedPct(r.Interval.Low-1), signedPct(r.Interval.High-1), word))
		}
		fmt.Fprintf(&b, "| `%s` | %s | %s | %s | %s | %d (%s) | %s |\n", v.Patch.Name, v.Patch.Class,
			v.Patch.Expect, v.Outcome, mark, v.Runs, v.Stop, strings.Join(ms, "; "))
	}
	fmt.Fprintf(&b, "\n%d of %d scored verdicts right, %d in the wrong direction; %d not scored (expectation unknown).\n",
		right, scored, wrongDir, len(vs)-scored)
	_, err := io.WriteString(w, b.String())
	return err
}
