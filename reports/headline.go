package reports

// The reply's lines around the verdict: the headline that names the top
// change, the subject's tags, the notes under the table (guards, modes,
// layouts) and the line that says how many rounds were run and why they
// stopped. Verdict, the paragraph itself, is in verdict.go.

import (
	"bufio"
	"bytes"
	"fmt"
	"strings"

	"github.com/patchbot/patchbot/judge"
	"github.com/patchbot/patchbot/judge/stats"
	"github.com/patchbot/patchbot/suites"
)

// Headline is the kernel test robot's opening line for the top change of
// the primary metrics, e.g. "patchbot noticed a 94.9% reduction of
// cache-contention.read-storm.wakeups_per_release" or "patchbot noticed a
// -26.0% regression of cache-contention.read-storm.files_per_s". The top
// change is the largest regression when there is one, else the largest
// improvement; "" when no primary metric changed.
func Headline(c *judge.Comparison) string {
	var better, worse []judge.Row
	for _, r := range c.PrimaryRows() {
		switch {
		case !r.Called || !r.Interval.Defined:
		case r.Better():
			better = append(better, r)
		case r.Worse():
			worse = append(worse, r)
		}
	}
	bySize(better)
	bySize(worse)
	change := 100 * (func() float64 {
		if len(worse) > 0 {
			return worse[0].Interval.Ratio - 1
		}
		if len(better) > 0 {
			return better[0].Interval.Ratio - 1
		}
		return 0
	})()
	switch {
	case len(worse) > 0:
		return noticed(fmt.Sprintf("%+.1f%%", change), "regression", worse[0].Name())
	case len(better) > 0 && better[0].HigherIsBetter:
		return noticed(fmt.Sprintf("%.1f%%", change), "improvement", better[0].Name())
	case len(better) > 0:
		return noticed(fmt.Sprintf("%.1f%%", -change), "reduction", better[0].Name())
	}
	return ""
}

// noticed writes "patchbot noticed a 12.0% ..." with the article the
// number is read with: "an 88.6%", "an 11.0%", "an 18.2%".
func noticed(amount, what, name string) string {
	a := "a"
	n := strings.TrimLeft(amount, "+-")
	if strings.HasPrefix(n, "8") || (strings.HasPrefix(n, "11") || strings.HasPrefix(n, "18")) && (len(n) == 2 || n[2] == '.') {
		a = "an"
	}
	return fmt.Sprintf("patchbot noticed %s %s %s of %s", a, amount, what, name)
}

// Tags are the trailers a regression reply suggests for the fix, as the
// kernel test robot's do: Reported-by: the bot, Closes: the report. None
// when no primary metric regressed (or from is empty).
func Tags(c *judge.Comparison, from, report string) []string {
	if !c.Regressed() || from == "" {
		return nil
	}
	tags := []string{"Reported-by: " + from}
	if report != "" {
		tags = append(tags, "Closes: "+report)
	}
	return tags
}

// Notes are what a reader must know beside the numbers, one sentence each:
// rounds measured on a busy host, kernels whose runs fell in two modes
// (which a mean hides), and primary changes the guards did not call.
func Notes(c *judge.Comparison) []string {
	var out []string
	if k := c.Calibration; k != nil {
		out = append(out, fmt.Sprintf("The host's calibration before the rounds (%s) took %.1f ms, the best of %d.", k.What, k.Seconds*1000, k.Repeats))
	}
	if c.Noisy {
		out = append(out, "The run is marked noisy: the host was busy around some rounds after their repeats ran out (below).")
	}
	if c.Reused > 0 {
		out = append(out, fmt.Sprintf("%s of the base kernel came from earlier runs on the same base, config and host, checked against fresh control rounds for drift; the sides are compared unpaired.", plural(c.Reused, "round")))
	}
	switch {
	case c.Repeated == 1:
		out = append(out, "1 round was repeated because the host was busy around it.")
	case c.Repeated > 1:
		out = append(out, fmt.Sprintf("%d rounds were repeated because the host was busy around them.", c.Repeated))
	}
	for _, b := range c.Busy {
		before, after := 0.0, 0.0
		if b.Round.Before != nil {
			before = b.Round.Before.Busy
		}
		if b.Round.After != nil {
			after = b.Round.After.Busy
		}
		out = append(out, fmt.Sprintf("%s round %d on %s ran while the host was busy (%s and %s of its CPU time before and after).",
			b.Suite, b.Round.N, sideName(c, b.Kernel), pct(before), pct(after)))
	}
	for _, r := range c.Rows {
		for _, side := range []struct {
			kernel string
			s      stats.Summary
		}{{"base", r.Base}, {"patched", r.Patched}} {
			if len(side.s.Modes) != 2 || !r.Primary {
				continue
			}
			lo, hi := side.s.Modes[0], side.s.Modes[1]
			out = append(out, fmt.Sprintf("The %s kernel's %s fell in two modes: %s at %s and %s at %s; its mean describes neither.",
				sideName(c, side.kernel), describe(r), plural(lo.N, "run"), span(lo, r.Unit), plural(hi.N, "run"), span(hi, r.Unit)))
		}
	}
	if n := modalDerived(c); n > 0 {
		out = append(out, fmt.Sprintf("%s fell in two modes on one kernel (see --json).", plural(n, "derived counter")))
	}
	for _, r := range c.PrimaryRows() {
		if r.Significant && !r.Called {
			out = append(out, fmt.Sprintf("%s moved by %s (significant), but is not called a change: %s.",
				describe(r), signedPct(r.Interval.Ratio-1), guardText(c, r)))
		}
	}
	return out
}

// sideName is how prose names a side's kernel: "base", "patched", or in
// an A/A run "second base" for the second.
func sideName(c *judge.Comparison, kernel string) string {
	if c.AA && kernel == "patched" {
		return "second base"
	}
	return kernel
}

func guardText(c *judge.Comparison, r judge.Row) string {
	if r.Guard == judge.GuardNoiseFloor {
		if j, ok := c.Judgement(r.Suite); ok {
			return fmt.Sprintf("%s of %s", r.Guard, pct(j.NoiseFloor))
		}
	}
	return r.Guard
}

func modalDerived(c *judge.Comparison) int {
	n := 0
	for _, r := range c.DerivedRows() {
		if len(r.Base.Modes) == 2 || len(r.Patched.Modes) == 2 {
			n++
		}
	}
	return n
}

func span(m stats.Mode, unit string) string {
	s := short3(m.Min)
	if m.Max != m.Min {
		s += "-" + short3(m.Max)
	}
	if unit != "" && unit != "count" {
		s += " " + unit
	}
	return s
}

// RunsLine says how many runs each kernel had and why they stopped, for
// the reply's setup: "6 per kernel, interleaved; the primary metrics were
// settled after 6 (the rule allows 3 to 10)".
func RunsLine(c *judge.Comparison) string {
	var parts []string
	for _, s := range c.Suites {
		line := fmt.Sprintf("%d per kernel, interleaved", s.Runs)
		if s.Rule.Sequential() {
			why := "the primary metrics were settled"
			switch {
			case s.Stop == suites.StopFutile || s.Stop == "" && s.Futile:
				why = "stopped for futility: more runs could not have settled the primary metrics"
			case s.Stop == suites.StopMax || !s.Settled:
				why = "the maximum was reached before the primary metrics were settled"
			}
			line += fmt.Sprintf("; %s (the rule runs %d to %d)", why, s.Rule.Min, s.Rule.Max)
		}
		if len(c.Suites) > 1 {
			line = s.Suite + ": " + line
		}
		parts = append(parts, line)
	}
	return strings.Join(parts, "; ")
}

// LayoutNote is the setup's line on code layout, from the kernel config:
// with CONFIG_DEBUG_FORCE_FUNCTION_ALIGN_64B=y every function starts on a
// 64-byte boundary, so a patch cannot win or lose by shifting the code
// after it (the kernel test robot traced phantom changes to alignment).
// "" when the config does not set it.
func LayoutNote(kconfig []byte) string {
	sc := bufio.NewScanner(bytes.NewReader(kconfig))
	for sc.Scan() {
		if strings.TrimSpace(sc.Text()) == "CONFIG_DEBUG_FORCE_FUNCTION_ALIGN_64B=y" {
			return "functions aligned to 64 bytes (DEBUG_FORCE_FUNCTION_ALIGN_64B)"
		}
	}
	return ""
}
