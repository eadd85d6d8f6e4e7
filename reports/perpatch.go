package reports

import (
	"fmt"
	"math"
	"strings"
	"unicode/utf8"

	"github.com/patchbot/patchbot/judge"
)

// The parts of a reply that speak of the base and of each patch: which
// tree the series was tested on and why, the series built patch by patch,
// the change traced to the patch it comes from, and what the earlier
// version measured. Each is plain text for the template, empty when the
// run has nothing to say.

// maxHunkLines bounds each tree's failing hunk in the reply: the first
// lines place it; the run directory keeps git's whole output.
const maxHunkLines = 12

// treeName is how a reply names a tree: the kernel: base is "the
// default base".
func treeName(tree string) string {
	switch tree {
	case "default":
		return "the default base"
	case "":
		return "a commit on no tree's branch"
	}
	return tree
}

func at(commit, title string) string {
	s := short(commit)
	if title != "" {
		s += " (\"" + title + "\")"
	}
	return s
}

// baseText says which base the series was tested on and why, what else
// was tried and where it did not apply.
func baseText(run *Run) string {
	bc := run.BaseChoice
	if bc == nil {
		return ""
	}
	var b strings.Builder
	var why string
	switch bc.How {
	case ByOverride:
		why = "as asked (base=" + bc.Detail + ")."
	case ByBaseCommit:
		why = "the series' base-commit"
		if bc.Detail != "" {
			why += " (" + bc.Detail + ")"
		}
		why += "."
	case ByTag:
		why = "the subject's [" + bc.Detail + "] tag names it."
	case ByApplying:
		why = "the newest tree the whole series applies to (git am -3, newest first)."
	case ByDefault:
		why = "no other tree is configured."
	}
	if run.BaseCommit != "" {
		b.WriteString(wrap(fmt.Sprintf("Tested on %s at %s: %s", treeName(bc.Tree), at(run.BaseCommit, run.BaseTitle), why), 72))
		b.WriteString("\n")
	}
	for _, n := range bc.Notes {
		b.WriteString(wrap(capitalize(strings.TrimSuffix(n, "."))+".", 72) + "\n")
	}
	var failed []TriedBase
	for _, t := range bc.Tried {
		if t.Patch != "" || t.Unavailable != "" {
			failed = append(failed, t)
		}
	}
	if len(failed) > 0 {
		if run.BaseCommit != "" {
			b.WriteString("\nIt does not apply to:\n\n")
		} else {
			b.WriteString("\nTried, newest first:\n\n")
		}
		for _, t := range failed {
			if t.Unavailable != "" {
				b.WriteString(indent("  ", wrap(treeName(t.Tree)+": could not be fetched ("+t.Unavailable+")", 70)) + "\n")
				continue
			}
			b.WriteString(indent("  ", wrap(treeName(t.Tree)+" at "+at(t.Commit, t.Title)+":", 70)) + "\n")
			b.WriteString(indent("    ", wrap("patch "+t.Patch+" does not apply", 68)) + "\n")
			if t.Hunk != "" {
				b.WriteString(indent("    ", quote(firstLines(t.Hunk, maxHunkLines))) + "\n")
			}
		}
	}
	return strings.TrimRight(b.String(), "\n")
}

// noBase reports whether the run found no base at all: the series applies
// to none of the trees tried.
func noBase(run *Run) bool {
	return run.Failure != nil && run.Failure.Stage == judge.StageApply && run.BaseCommit == "" &&
		run.BaseChoice != nil && len(run.BaseChoice.Tried) > 0
}

func noBaseVerdict(run *Run) string {
	var names []string
	for _, t := range run.BaseChoice.Tried {
		names = append(names, treeName(t.Tree))
	}
	return fmt.Sprintf("The series applies to none of the %d trees it was tried on (%s): no kernel was built.",
		len(names), strings.Join(names, ", "))
}

// buildsText lists the series built patch by patch: what each prefix
// did, the first patch that breaks the build with its error, and each
// patch's new warnings.
func buildsText(run *Run) string {
	if len(run.Builds) < 2 && !(len(run.Builds) == 1 && run.Builds[0].Stage != "") {
		return ""
	}
	var b strings.Builder
	b.WriteString("Built patch by patch (each prefix of the series on the base):\n\n")
	var first *PatchBuild
	for i := range run.Builds {
		pb := &run.Builds[i]
		status := "builds"
		switch pb.Stage {
		case judge.StageApply:
			status = "does not apply"
		case judge.StageBuild:
			status = "does not build"
		}
		if n := len(pb.NewWarnings); n > 0 && pb.Stage == "" {
			status += fmt.Sprintf(", %s", plural(n, "new warning"))
		}
		if pb.Stage != "" && first == nil {
			first = pb
		}
		label := fmt.Sprintf("%d/%d", pb.Index, run.Series)
		b.WriteString(fitLine(fmt.Sprintf("  %-6s %-28s ", label, status), pb.Subject) + "\n")
		for _, w := range pb.NewWarnings {
			b.WriteString(indent("       ", quote(w)) + "\n")
		}
	}
	if first != nil {
		what := "breaks the build"
		if first.Stage == judge.StageApply {
			what = "does not apply"
		}
		sentence := fmt.Sprintf("The first patch that %s is %d/%d (\"%s\")", what, first.Index, run.Series, first.Subject)
		switch {
		case run.Failure != nil && run.Failure.Excerpt != "":
			b.WriteString("\n" + wrap(sentence+"; its output is below.", 72)) // the evidence quotes it
		case len(first.Errors) > 0:
			b.WriteString("\n" + wrap(sentence+":", 72) + "\n\n" + quote(strings.Join(first.Errors, "\n")))
		default:
			b.WriteString("\n" + wrap(sentence+".", 72))
		}
		if last := run.Builds[len(run.Builds)-1]; last.Stage == "" {
			b.WriteString("\n\n" + wrap(fmt.Sprintf("A later patch mends it: the whole series builds, so it was measured; "+
				"%d/%d alone would not bisect.", first.Index, run.Series), 72))
		}
	}
	return strings.TrimRight(b.String(), "\n")
}

// bisectText is the per-patch table of the change and what it says: the
// patch the change comes from, or that it is spread over several.
func bisectText(run *Run) string {
	bi := run.Bisection
	if bi == nil || len(bi.Steps) == 0 {
		return ""
	}
	r := judge.Row{MetricID: bi.MetricID}
	var b strings.Builder
	against := "the base"
	if run.Range != nil && run.Range.First > 1 {
		against = fmt.Sprintf("the base with 1..%d/%d", run.Range.First-1, run.Range.Total)
	}
	b.WriteString(wrap(fmt.Sprintf("Patch by patch: %s, each prefix of the series against %s:", describe(r), against), 72))
	b.WriteString("\n\n")
	b.WriteString(fmt.Sprintf("  %-36s %8s  %-9s  %s\n", "prefix", "change", "verdict", "runs"))
	for _, s := range bi.Steps {
		verdict := "no change"
		if s.Significant {
			verdict = "changed"
		}
		runs := fmt.Sprintf("%d", s.Runs)
		if s.Whole {
			runs += " (the series' own)"
		}
		label := padRunes(truncRunes(fmt.Sprintf("%-5s %s", fmt.Sprintf("%d/%d", s.Prefix, run.Series), s.Subject), 36), 36)
		b.WriteString(fmt.Sprintf("  %s %8s  %-9s  %s\n", label, signed(s.Change), verdict, runs))
	}
	b.WriteString("\n")
	switch {
	case bi.Cause > 0:
		subject := ""
		for _, s := range bi.Steps {
			if s.Prefix == bi.Cause {
				subject = s.Subject
			}
		}
		if subject == "" {
			b.WriteString(wrap(fmt.Sprintf("The change comes from %d/%d.", bi.Cause, run.Series), 72))
		} else {
			b.WriteString(wrap(fmt.Sprintf("The change comes from %d/%d (\"%s\").", bi.Cause, run.Series, subject), 72))
		}
	case bi.Spread:
		var parts []string
		for _, s := range bi.Steps {
			parts = append(parts, fmt.Sprintf("%d/%d %.0f%%", s.Prefix, run.Series, 100*s.Fraction))
		}
		b.WriteString(wrap("No single patch carries the change: it is spread over the series (the share of it each prefix has: "+
			strings.Join(parts, ", ")+").", 72))
	case bi.Stopped != "":
		b.WriteString(wrap("The bisection stopped before naming a patch: "+strings.TrimSuffix(bi.Stopped, ".")+".", 72))
	}
	b.WriteString("\n" + wrap(fmt.Sprintf("(The bisection took %s beyond the series' own.)", plural(bi.Measurements, "measurement")), 72))
	return strings.TrimRight(b.String(), "\n")
}

// previousText sets the earlier version's measurement beside this one's.
func previousText(run *Run) string {
	p := run.Previous
	if p == nil {
		return ""
	}
	r := judge.Row{MetricID: p.MetricID}
	s := fmt.Sprintf("v%d of this series, tested on %s, measured %s at %s (%s)", p.Version,
		p.Tested.UTC().Format("2006-01-02"), describe(r), signed(p.Change), significance(p.Significant))
	if p.NowMeasured {
		s += fmt.Sprintf("; this version: %s (%s).", signed(p.Now), significance(p.NowSignificant))
	} else {
		s += "; this version did not measure it."
	}
	return wrap(s, 72)
}

func significance(sig bool) string {
	if sig {
		return "significant"
	}
	return "not significant"
}

// signed is a relative change as "+29.6%" or "-94.8%".
func signed(change float64) string {
	if math.IsNaN(change) || math.IsInf(change, 0) {
		return "?"
	}
	return fmt.Sprintf("%+.1f%%", 100*change)
}

// fitLine is prefix then text, text cut so that the line fits MaxColumns.
func fitLine(prefix, text string) string {
	room := MaxColumns - 2 - utf8.RuneCountInString(prefix)
	return prefix + truncRunes(text, max(room, 8))
}

func truncRunes(s string, n int) string {
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:n-3]) + "..."
}

func padRunes(s string, n int) string {
	if k := utf8.RuneCountInString(s); k < n {
		return s + strings.Repeat(" ", n-k)
	}
	return s
}

func firstLines(s string, n int) string { return strings.Join(headLines(s, n), "\n") }

func capitalize(s string) string {
	if s == "" {
		return s
	}
	r := []rune(s)
	return strings.ToUpper(string(r[0])) + string(r[1:])
}
