package reports

import (
	"fmt"
	"strings"
	"time"

	"github.com/patchbot/patchbot/judge"
)

// The kernel's own health in a reply: its trouble (quoted as the kernel
// test robot quotes a splat, with the decoded trace, the suite and round,
// and what the base did), the new warnings beside the table, and whether
// the suites ran the code the series changed.

// KernelTrouble says whether the patched kernel reported trouble the
// base kernel did not: fatal trouble (Failure.Trouble: an oops, a BUG, a
// lockup, a hung task, an RCU stall, a panic, a hang) or a warning the
// base never printed (judge.WarningCount.New). Such a run is the patch's
// fault (patchbot run exits 3) even when it measured.
func (run *Run) KernelTrouble() bool {
	return run.Failure != nil && run.Failure.Trouble != nil || len(judge.NewWarnings(run.KernelWarnings)) > 0
}

// troubleVerdict is a run's first paragraph when the patched kernel got
// into trouble: what, where in the source, when, and why it is the
// patch's. It is not a throughput verdict: the run stopped there.
func troubleVerdict(run *Run, t *judge.Trouble, patch string) string {
	what := map[string]string{
		"hang":    "hung",
		"stopped": "stopped",
	}[t.Kind]
	if what == "" {
		what = "reported " + article(t.Kind) + " " + t.Kind
	}
	s := fmt.Sprintf("The kernel with the patch%s applied %s %s: %s.", patch, what, t.When(), t.Headline())
	if t.Op == "" {
		s = fmt.Sprintf("The kernel with the patch%s applied does not boot: it %s: %s.", patch, what, t.Headline())
	}
	if t.Base != "" {
		s += " " + upperFirst(t.Base) + "."
	}
	if t.Kind == "hang" || t.Kind == "stopped" {
		s += " The run stopped there: no throughput or latency was compared."
	} else {
		s += " The run stopped there: no throughput or latency was compared. The report and its trace, decoded with the patched kernel's own debug information, are below."
	}
	if n := len(judge.NewWarnings(run.KernelWarnings)); n > 0 {
		s += fmt.Sprintf(" Before it, the patched kernel printed %s the base did not (below).", plural(n, "kernel warning"))
	}
	return s
}

func article(kind string) string {
	if kind == "" {
		return "a"
	}
	switch kind[0] {
	case 'a', 'e', 'i', 'o', 'u':
		return "an"
	}
	return "a"
}

func upperFirst(s string) string {
	if s == "" {
		return s
	}
	return strings.ToUpper(s[:1]) + s[1:]
}

// crawl is the rate of a hung guest's clock, against the host's, below
// which the reply says how long its watchdogs would take (a guest
// on instruction-counted time whose vCPUs spin on PAUSE: 1/19, measured
// on loop-in-syscall; an idle one runs ahead of the host).
const crawl = 0.2

// troubleEvidence is the trouble's report and decoded trace, quoted.
func troubleEvidence(t *judge.Trouble) string {
	if t == nil {
		return ""
	}
	var b strings.Builder
	head := "Console, the kernel's report:"
	if t.Kind == "hang" || t.Kind == "stopped" {
		head = "Console, its last lines:"
	}
	b.WriteString(head + "\n\n" + quote(strings.Join(t.Report, "\n")) + "\n")
	if len(t.CPUs) > 0 {
		b.WriteString("\n" + wrap(fmt.Sprintf("The kernel printed no report of its own. Where its vCPUs were, read from the hypervisor %s, when the hang was called:", t.Sampled), 72) + "\n\n")
		b.WriteString(quote(strings.Join(t.CPUs, "\n")) + "\n")
		if r := t.ClockRate; r > 0 && r < crawl {
			wait := (time.Duration(float64(20*time.Second) / r)).Round(time.Second)
			b.WriteString("\n" + wrap(fmt.Sprintf("The guest's clock ran at 1/%.0f of the host's while it hung: at that rate the 20 s of its own time that the kernel's soft-lockup watchdog waits for would take %s of the host's.", 1/r, wait), 72) + "\n")
		}
	}
	if len(t.Trace) > 0 && len(t.CPUs) > 0 {
		b.WriteString("\n" + wrap("The busy vCPU's stack, the guest stopped, walked by its frame pointers and decoded to function and file:line from the patched kernel's vmlinux:", 72) + "\n\n")
		b.WriteString(quote(strings.Join(t.Trace, "\n")) + "\n")
	} else if len(t.Trace) > 0 {
		b.WriteString("\n" + wrap("The trace, decoded to function and file:line from the patched kernel's vmlinux:", 72) + "\n\n")
		b.WriteString(quote(strings.Join(t.Trace, "\n")) + "\n")
	} else if t.Decoded != "" {
		b.WriteString("\n" + wrap("The trace could not be decoded: "+t.Decoded+".", 72) + "\n")
	}
	if t.Corrupted != "" {
		what := "The report is not whole: "
		if len(t.CPUs) > 0 {
			what = "The stack is not whole: "
		}
		b.WriteString("\n" + wrap(what+t.Corrupted+".", 72) + "\n")
	}
	return strings.TrimRight(b.String(), "\n")
}

// troubleBisectText is the patch the trouble came from, prefix by prefix.
func troubleBisectText(run *Run) string {
	tb := run.TroubleBisection
	if tb == nil || len(tb.Steps) == 0 {
		return ""
	}
	var b strings.Builder
	b.WriteString(wrap(fmt.Sprintf("Patch by patch: each prefix of the series against the base, in the suite and rounds the trouble came in (%s):", tb.Title), 72))
	b.WriteString("\n\n")
	for _, s := range tb.Steps {
		what := fmt.Sprintf("clean in %s", plural(s.Rounds, "round"))
		if s.Trouble != "" {
			what = s.Trouble
		}
		if s.Whole {
			what += " (the series' own run)"
		}
		label := padRunes(truncRunes(fmt.Sprintf("%-5s %s", fmt.Sprintf("%d/%d", s.Prefix, run.Series), s.Subject), 36), 36)
		b.WriteString(fmt.Sprintf("  %s %s\n", label, what))
	}
	b.WriteString("\n")
	switch {
	case tb.Cause > 0:
		subject := ""
		for _, s := range tb.Steps {
			if s.Prefix == tb.Cause {
				subject = s.Subject
			}
		}
		msg := fmt.Sprintf("The trouble comes with %d/%d", tb.Cause, run.Series)
		if subject != "" {
			msg += fmt.Sprintf(" (\"%s\")", subject)
		}
		b.WriteString(wrap(msg+": the prefixes before it ran the same rounds clean, which is evidence, not proof, for trouble that comes under load.", 72))
	case tb.Stopped != "":
		b.WriteString(wrap("The search stopped: "+tb.Stopped+".", 72))
	}
	return strings.TrimRight(b.String(), "\n")
}

// warningsLead is the sentence ahead of the verdict when the patched
// kernel printed warnings the base did not: they count in the outcome.
func warningsLead(run *Run) string {
	nw := judge.NewWarnings(run.KernelWarnings)
	if len(nw) == 0 {
		return ""
	}
	var names []string
	for _, w := range nw[:min(3, len(nw))] {
		names = append(names, fmt.Sprintf("%s, %s", w.Title, howOften(w.Patched)))
	}
	if len(nw) > 3 {
		names = append(names, fmt.Sprintf("%d more", len(nw)-3))
	}
	return fmt.Sprintf("Kernel warnings: the patched kernel printed %s the base kernel did not print in the same suites (%s; below).",
		plural(len(nw), "warning"), strings.Join(names, "; "))
}

func howOften(n int) string {
	if n == 1 {
		return "once"
	}
	return fmt.Sprintf("%d times", n)
}

// warningsText lists the kernel warnings beside the table, each counted
// on both kernels, with the first new one's report and decoded trace.
func warningsText(run *Run) string {
	ws := run.KernelWarnings
	if len(ws) == 0 {
		return ""
	}
	var b strings.Builder
	b.WriteString("Kernel warnings (WARN_ON, WARN), counted on each kernel:\n\n")
	b.WriteString(fmt.Sprintf("  %-44s %7s %7s\n", "warning", "base", "patched"))
	transient := false
	for _, w := range ws {
		name := w.Title
		switch {
		case w.New():
			name += " (new)"
		case w.Transient():
			name += " (passed)"
			transient = true
		}
		b.WriteString(fmt.Sprintf("  %-44s %7d %7d\n", truncRunes(name, 44), w.Base, w.Patched))
		if w.Where != "" {
			b.WriteString("    at " + w.Where + "\n")
		}
	}
	if transient {
		b.WriteString("\n" + wrap("A stall or lockup marked (passed) was reported once and the kernel went on: under TCG a busy host can starve a guest's vCPU for as long, so it counts against neither kernel.", 72) + "\n")
	}
	for _, w := range judge.NewWarnings(ws) {
		b.WriteString("\n" + wrap(fmt.Sprintf("The first %s on the patched kernel:", w.Title), 72) + "\n\n")
		b.WriteString(quote(strings.Join(w.Report, "\n")) + "\n")
		if len(w.Trace) > 0 {
			b.WriteString("\nIts trace, decoded:\n\n" + quote(strings.Join(w.Trace, "\n")) + "\n")
		}
		break // the first new one; the run's files keep the rest
	}
	return strings.TrimRight(b.String(), "\n")
}

// exercisedText says whether the suites ran the code the series changed:
// each changed function with its calls during the measured rounds.
func exercisedText(run *Run) string {
	r := run.Exercised
	if r == nil {
		return ""
	}
	var b strings.Builder
	b.WriteString(wrap("Did the suites run the changed code? Calls of the functions the patch changes, counted by a kprobe in every measured round:", 72))
	b.WriteString("\n\n")
	if len(r.Funcs) == 0 {
		b.WriteString(wrap(upperFirst(r.Note)+".", 72) + "\n")
		return strings.TrimRight(b.String(), "\n")
	}
	for _, f := range r.Funcs {
		var line string
		switch {
		case f.Code == "gone":
			line = fmt.Sprintf("  %-34s %12s", f.Func, "removed")
			if f.BaseCounted {
				line += fmt.Sprintf("  (base: %d calls)", f.Base)
			}
			line += "\n" + wrapIndent("the patched kernel has no such function: the series removed it, or the compiler now inlines or drops it", "      ", 72)
		case !f.Counted():
			line = fmt.Sprintf("  %-34s not counted: %s", f.Func, f.Err)
		case f.Patched == 0:
			line = fmt.Sprintf("  %-34s %12s  not exercised", f.Func, "0 calls")
		default:
			line = fmt.Sprintf("  %-34s %12s", f.Func, fmt.Sprintf("%d calls", f.Patched))
			if f.BaseCounted {
				line += fmt.Sprintf("  (base: %d)", f.Base)
			}
		}
		b.WriteString(line + "\n")
		switch {
		case len(f.Lines) > 0 && f.Code == "same":
			b.WriteString(wrapIndent("changed: "+strings.Join(f.Lines, ", ")+"; its compiled code is the base's", "      ", 72) + "\n")
		case len(f.Lines) > 0:
			b.WriteString(wrapIndent("changed: "+strings.Join(f.Lines, ", "), "      ", 72) + "\n")
		case f.Code == "differs":
			b.WriteString(wrapIndent("no changed line in it, but its compiled code differs from the base's (a changed macro, constant or type it uses)", "      ", 72) + "\n")
		}
		if len(f.Inlined) > 0 {
			b.WriteString(wrapIndent("holds the inlined "+strings.Join(f.Inlined, ", ")+": their calls are its calls", "      ", 72) + "\n")
		}
	}
	if r.Note != "" {
		b.WriteString("\n" + wrap(upperFirst(r.Note)+".", 72) + "\n")
	}
	return strings.TrimRight(b.String(), "\n")
}

func wrapIndent(s, indent string, width int) string {
	return indent + hanging(s, len(indent), width)
}

// exercisedLead opens a "No change" on code the suites never ran, or on a
// series that changed no machine code: its first sentence says so.
func exercisedLead(run *Run, verdict string) string {
	if !strings.HasPrefix(verdict, "No change") {
		return verdict
	}
	if run.Exercised.NoMachineCode() {
		return "No change, on a series that changes no machine code: every function of the patched kernel compiles to the base kernel's code. " + verdict
	}
	if !run.Exercised.NeverRan() {
		return verdict
	}
	var names []string
	for _, f := range run.Exercised.Funcs {
		names = append(names, f.Func)
	}
	fns := strings.Join(names[:min(4, len(names))], ", ")
	if len(names) > 4 {
		fns += fmt.Sprintf(" and %d more", len(names)-4)
	}
	return fmt.Sprintf("No change, on code the suites never ran: the functions the patch changes (%s) were not called in any measured round, so this run says nothing of the change itself. ", fns) + verdict
}
