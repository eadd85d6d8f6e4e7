package reports

import (
	"fmt"
	"io"
	"math"
	"sort"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/patchbot/patchbot/judge"
	"github.com/patchbot/patchbot/judge/stats"
)

// MaxColumns is the widest line a reply may have: mail clients and the
// kernel's own mail etiquette expect plain text that fits 80 columns.
const MaxColumns = 80

// Commits names the two kernels in a table heading.
type Commits struct {
	Base, BaseTitle       string
	Patched, PatchedTitle string
}

// Change markers in the %change column.
const (
	markNotSignificant = "ns"
	markGuarded        = "~"
	markNotJudged      = "?"
)

// WriteTable writes the comparison in the layout of the kernel test robot:
// the two commits, then one line per metric
//
//	base ±stddev  %change  patched ±stddev  metric (unit)
//
// the suites' primary metrics first, then the derived counters, each
// grouped by suite and workload, and a legend saying how changes were
// judged. A spread is shown from noise of the mean (Options.Noise).
func WriteTable(w io.Writer, c *judge.Comparison, commits Commits, noise float64) error {
	tw := &lineWriter{w: w}
	if commits.Base != "" || commits.Patched != "" {
		tw.line("commit:")
		tw.line("  %s  %s", short(commits.Base), quoteTitle(commits.BaseTitle))
		tw.line("  %s  %s", short(commits.Patched), quoteTitle(commits.PatchedTitle))
		tw.line("")
		tw.line("%s%s", pad(short(commits.Base), 20, false), short(commits.Patched))
		tw.line("----------------  --------------------------------")
	}
	tw.line("         %%stddev     %%change         %%stddev")
	tw.line("             \\          |                \\")
	for _, sec := range []struct {
		title string
		rows  []judge.Row
	}{{"primary metrics:", c.PrimaryRows()}, {"derived counters:", c.DerivedRows()}} {
		if len(sec.rows) == 0 {
			continue
		}
		tw.line("%s", sec.title)
		group := ""
		for _, r := range sec.rows {
			if g := groupName(r); g != group {
				tw.text(g)
				group = g
			}
			tw.row(r, noise)
		}
	}
	tw.line("")
	tw.legend(c, noise)
	tw.missing(c)
	return tw.err
}

// groupName is a row's heading: "cache-contention / mixed (threads=64)".
func groupName(r judge.Row) string {
	g := r.Suite + " / " + r.Workload
	if cell := r.Cell(); cell != "" {
		g += " (" + cell + ")"
	}
	return g
}

// WritePrimary writes the primary metrics with how big each change is: the
// two kernels' geometric means (means where a value is not positive), the
// change with its 95% interval, the reach (the smallest change the run
// could have detected, stats.DetectablePower; "-" for a change called),
// and the judgement:
//
//	better, worse  a change, called
//	same           the interval excludes a change of the smallest effect of interest
//	open           not settled: neither significant nor excluded
//	guard          significant, but not called (noise floor, overlapping runs)
//	?              fewer than 3 runs a side
func WritePrimary(w io.Writer, c *judge.Comparison) error {
	tw := &lineWriter{w: w}
	rows := c.PrimaryRows()
	if len(rows) == 0 {
		return nil
	}
	byRank(rows)
	mech := c.MechanismRows()
	byRank(mech)
	tw.line("     base   patched  change  95%% interval       reach  metric")
	group := ""
	all := append(rows, mech...)
	for i, r := range all {
		if i == len(rows) {
			tw.text("mechanism counters (they explain a change, never decide it):")
			group = ""
		}
		if g := groupName(r); g != group {
			tw.text(g)
			group = g
		}
		b, p := centres(r)
		change, iv := "", ""
		if r.Interval.Defined {
			change, iv = intervalText(r.Interval)
		}
		reach := "-"
		if reachShown(r) {
			reach = "±" + pct(r.Detectable)
		}
		prefix := pad(formatValue(b), 9, true) + " " + pad(formatValue(p), 9, true) + " " +
			pad(change, 7, true) + " " + pad(iv, 18, false) + " " + pad(reach, 6, true) + " " + pad(judgement(r), 6, false) + " "
		name := metricName(r.Metric, r.Unit)
		if utf8.RuneCountInString(prefix+name) > MaxColumns {
			name = r.Metric
		}
		tw.line("%s%s", prefix, name)
	}
	if l := primaryLegend(c, all); l != "" {
		tw.line("")
		tw.line("%s", wrap(l, MaxColumns))
	}
	return tw.err
}

// primaryLegend says what the last columns of WritePrimary mean, naming
// only the words the table uses, and nothing where every row is a change
// called. Where a row reads "same" or "open" with
// a 95% interval clear of zero, it says why: the interval is the metric's
// own, while a change is called only after the family's correction
// (Holm-Bonferroni over the suite's primary metrics), so a reader does
// not take such a row for a missed change.
func primaryLegend(c *judge.Comparison, rows []judge.Row) string {
	used := map[string]bool{}
	clear, reach, onlyCalled := false, false, true
	for _, r := range rows {
		w := judgement(r)
		used[w] = true
		if (w == "same" || w == "open") && r.Interval.Defined && (r.Interval.Low > 1 || r.Interval.High < 1) {
			clear = true
		}
		reach = reach || reachShown(r)
		onlyCalled = onlyCalled && (w == "better" || w == "worse")
	}
	if onlyCalled {
		return "" // every row a change called: nothing to explain
	}
	// "±10%", or where the suites differ, what each promised
	within, smallest := "± the suite's smallest effect of interest", "± the suite's smallest effect of interest"
	if len(c.Suites) > 0 {
		e := c.Suites[0].SmallestEffect
		for _, s := range c.Suites[1:] {
			if s.SmallestEffect != e {
				e = 0
			}
		}
		if e > 0 {
			within, smallest = "±"+pct(e), "±"+pct(e)+", the smallest effect of interest"
		}
	}
	var parts []string
	if reach {
		parts = append(parts, "reach: the smallest change this run could have detected (80% power).")
	}
	if used["better"] || used["worse"] {
		parts = append(parts, "better, worse: a change, called.")
	}
	if used["same"] {
		parts = append(parts, "same: the interval lies within "+smallest+".")
	}
	if used["open"] {
		parts = append(parts, "open: not settled, neither a change called nor within "+within+".")
	}
	if used["guard"] {
		parts = append(parts, "guard: significant, but below the noise floor or with the two kernels' runs overlapping, so not called.")
	}
	if used[markNotJudged] {
		parts = append(parts, fmt.Sprintf("%s: fewer than %d runs a side, not judged.", markNotJudged, stats.MinSamples))
	}
	if clear {
		parts = append(parts, "Each interval is the metric's own; a change is called only when it stays significant after "+
			correctionText(c)+" within its family, so an interval clear of zero can still read same or open.")
	}
	return strings.Join(parts, " ")
}

// reachShown: the row's reach is worth showing, a judged metric with no
// change called and a detectable effect computed.
func reachShown(r judge.Row) bool { return r.Judged && !r.Called && r.Detectable > 0 }

// judgement is a primary row's verdict in one word (see WritePrimary).
func judgement(r judge.Row) string {
	switch {
	case !r.Judged:
		return markNotJudged
	case r.Called && r.Better():
		return "better"
	case r.Called:
		return "worse"
	case r.Significant:
		return "guard"
	case r.Within:
		return "same"
	}
	return "open"
}

// intervalText writes a change and its interval: "-94.9%" and "[-95.6%,
// -94.1%]", or from a doubling on as factors, "2.6x" and "[2.1x, 3.2x]";
// an interval that reaches below a doubling stays in percent, "[-35.8%,
// +190%]".
func intervalText(iv stats.Interval) (change, bounds string) {
	if iv.Ratio >= 2 && iv.Low >= 2 {
		return times(iv.Ratio), "[" + times(iv.Low) + ", " + times(iv.High) + "]"
	}
	change = signedPct(iv.Ratio - 1)
	if iv.Ratio >= 2 {
		change = times(iv.Ratio)
	}
	return change, "[" + signedPct(iv.Low-1) + ", " + signedPct(iv.High-1) + "]"
}

// missing lists the counters a kernel could not provide: they are absent
// from the table, and a reader must not take their absence for zero.
func (t *lineWriter) missing(c *judge.Comparison) {
	seen := map[string]bool{}
	first := true
	for _, m := range c.Missing {
		line := fmt.Sprintf("%s / %s %s: %s", m.Suite, m.Workload, m.Metric, m.Reason)
		if seen[line] {
			continue
		}
		seen[line] = true
		if first {
			t.line("")
			t.line("Not measured (missing, not zero):")
			first = false
		}
		t.line("%s", indent("  ", wrap(line, MaxColumns-4)))
	}
}

// lineWriter writes lines and remembers the first error, so that table code
// reads as layout rather than error plumbing.
type lineWriter struct {
	w   io.Writer
	err error
}

func (t *lineWriter) line(format string, args ...any) {
	if t.err != nil {
		return
	}
	s := strings.TrimRight(fmt.Sprintf(format, args...), " ")
	_, t.err = io.WriteString(t.w, s+"\n")
}

// text writes s wrapped to MaxColumns.
func (t *lineWriter) text(s string) {
	for _, l := range strings.Split(wrap(s, MaxColumns), "\n") {
		t.line("%s", l)
	}
}

func (t *lineWriter) row(r judge.Row, noise float64) {
	name := r.Metric
	if r.Unit != "" {
		name += " (" + r.Unit + ")"
	}
	change, mark := changeColumn(r)
	prefix := pad(side(r.Base), 12, true) + " " + pad(spread(r.Base, noise), 5, false) + " " +
		pad(change, 8, true) + pad(mark, 3, false) + " " +
		pad(side(r.Patched), 12, true) + " " + pad(spread(r.Patched, noise), 5, false) + "  "
	if utf8.RuneCountInString(prefix+name) > MaxColumns {
		// Drop the unit before breaking the row: a name on a line of its
		// own sits between two rows' numbers, and reads as the next row's.
		name = r.Metric
	}
	if utf8.RuneCountInString(prefix+name) > MaxColumns {
		// A name too long even alone goes on lines of its own below the numbers.
		t.line("%s", prefix)
		for _, l := range strings.Split(wrap(name, MaxColumns-4), "\n") {
			t.line("    %s", l)
		}
		return
	}
	t.line("%s%s", prefix, name)
}

func (t *lineWriter) legend(c *judge.Comparison, noise float64) {
	primary, derived := 0, 0
	for _, s := range c.Suites {
		primary += s.Primary
		derived += s.Derived
	}
	var fams []string
	if primary > 0 {
		fams = append(fams, "the "+plural(primary, "primary metric"))
	}
	if derived > 0 {
		fams = append(fams, "the "+plural(derived, "derived counter"))
	}
	t.line("%s", wrap(fmt.Sprintf("%%change: patched vs base mean. Judged by %s, two-sided, "+
		"%s within each family (%s) at %s. "+
		"\"%s\": not significant. \"%s\": significant, but below the noise floor or with the two kernels' runs "+
		"overlapping, so not called a change. \"%s\": fewer than %d runs a side, not judged. "+
		"±N%%: stddev, shown from %g%% of the mean.",
		c.Test, correctionText(c), strings.Join(fams, "; "), levelText(c),
		markNotSignificant, markGuarded, markNotJudged, stats.MinSamples, noise*100), MaxColumns))
}

// levelText says the level the families were judged at: "alpha 0.05", or
// for a sequential run "alpha 0.043, the sequential rule's level after 10
// runs a side (3 to 10, alpha 0.05 in all)".
func levelText(c *judge.Comparison) string {
	var parts []string
	for _, s := range c.Suites {
		p := "alpha " + strconv.FormatFloat(s.Level, 'g', 3, 64)
		if s.Rule.Sequential() {
			p += fmt.Sprintf(", the sequential rule's level after %d runs a side (%d to %d, alpha %g in all)",
				s.Runs, s.Rule.Min, s.Rule.Max, s.Rule.Alpha)
		}
		if len(c.Suites) > 1 {
			p = s.Suite + " " + p
		}
		parts = append(parts, p)
	}
	if len(parts) == 0 {
		return "alpha " + strconv.FormatFloat(c.Alpha, 'g', 3, 64)
	}
	return strings.Join(parts, "; ")
}

// correctionText names the family correction of the comparison's rules.
func correctionText(c *judge.Comparison) string {
	name := map[stats.Correction]string{stats.CorrectHolm: "Holm-Bonferroni", stats.CorrectHochberg: "Hochberg's step-up"}
	seen := map[stats.Correction]bool{}
	var out []string
	for _, s := range c.Suites {
		if k := s.Rule.Corrects(); !seen[k] {
			seen[k] = true
			out = append(out, name[k])
		}
	}
	if len(out) == 0 {
		return name[stats.CorrectHolm]
	}
	return strings.Join(out, " or ")
}

// plural is "1 judged metric" or "16 judged metrics".
func plural(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}

func changeColumn(r judge.Row) (change, mark string) {
	switch {
	case r.Base.N == 0 || r.Patched.N == 0:
		change = ""
	case !r.HasChange():
		change = "n/a"
	default:
		change = fmt.Sprintf("%+.1f%%", r.Change*100)
	}
	switch {
	case !r.Judged:
		mark = " " + markNotJudged
	case !r.Significant:
		mark = " " + markNotSignificant
	case !r.Called:
		mark = " " + markGuarded
	}
	return change, mark
}

func side(s stats.Summary) string {
	if s.N == 0 {
		return "-"
	}
	return formatValue(s.Mean)
}

func spread(s stats.Summary, noise float64) string {
	if s.N < 2 || s.RelStddev() < noise {
		return ""
	}
	pct := s.RelStddev() * 100
	if pct >= 999.5 {
		return "±999%"
	}
	return fmt.Sprintf("±%3.0f%%", pct)
}

// formatValue prints a mean with as many digits as a reader can use:
// whole numbers from 1000, three significant digits below.
func formatValue(v float64) string {
	a := math.Abs(v)
	switch {
	case a >= 1000:
		return strconv.FormatFloat(v, 'f', 0, 64)
	case a >= 100:
		return strconv.FormatFloat(v, 'f', 1, 64)
	case a >= 1:
		return strconv.FormatFloat(v, 'f', 2, 64)
	case a == 0:
		return "0"
	}
	return strconv.FormatFloat(v, 'g', 3, 64)
}

// pad pads s with spaces to width runes (on the left when right is true).
func pad(s string, width int, right bool) string {
	n := width - utf8.RuneCountInString(s)
	if n <= 0 {
		return s
	}
	if right {
		return strings.Repeat(" ", n) + s
	}
	return s + strings.Repeat(" ", n)
}

func short(commit string) string {
	if len(commit) > 12 {
		return commit[:12]
	}
	return commit
}

// quoteTitle quotes a commit title for the heading, shortened to fit the
// line beside its commit id.
func quoteTitle(title string) string {
	if title == "" {
		return ""
	}
	const room = MaxColumns - 2 - 12 - 2 - 4 // indent, id, gap, ("")
	if r := []rune(title); len(r) > room {
		title = string(r[:room-3]) + "..."
	}
	return "(\"" + title + "\")"
}

// Wrap breaks text into lines of at most width runes at spaces, as the
// reply does.
func Wrap(text string, width int) string { return wrap(text, width) }

// wrap breaks text into lines of at most width runes at spaces. A word
// longer than width is cut.
func wrap(text string, width int) string {
	var lines []string
	for _, para := range strings.Split(text, "\n") {
		line := ""
		for _, word := range strings.Fields(para) {
			for utf8.RuneCountInString(word) > width {
				if line != "" {
					lines = append(lines, line)
					line = ""
				}
				r := []rune(word)
				lines = append(lines, string(r[:width]))
				word = string(r[width:])
			}
			switch {
			case line == "":
				line = word
			case utf8.RuneCountInString(line)+1+utf8.RuneCountInString(word) <= width:
				line += " " + word
			default:
				lines = append(lines, line)
				line = word
			}
		}
		lines = append(lines, line)
	}
	return strings.Join(lines, "\n")
}

// grid is a workload whose cells form a two-way table (readahead: bucket ×
// readers) or a curve (locks: contenders).
type grid struct {
	suite, workload, metric, unit string
	rows                          []judge.Row
}

// grids collects, per suite, workload and metric, the rows that carry all
// of keys among their params.
func grids(c *judge.Comparison, keys ...string) []*grid {
	var out []*grid
	index := map[string]*grid{}
	for _, r := range c.Rows {
		ok := true
		for _, k := range keys {
			if _, has := r.Params[k]; !has {
				ok = false
			}
		}
		if !ok {
			continue
		}
		id := r.Suite + "\x00" + r.Workload + "\x00" + r.Metric
		g := index[id]
		if g == nil {
			g = &grid{suite: r.Suite, workload: r.Workload, metric: r.Metric, unit: r.Unit}
			index[id] = g
			out = append(out, g)
		}
		g.rows = append(g.rows, r)
	}
	return out
}

// ParamValues returns the values of param key in first-seen order, or in
// numeric order when they are all numbers: the axes of the reply's grids
// and curves, and of the dashboard's.
func ParamValues(rows []judge.Row, key string) []string {
	var vals []string
	seen := map[string]bool{}
	numeric := true
	for _, r := range rows {
		v := r.Params[key]
		if !seen[v] {
			seen[v] = true
			vals = append(vals, v)
			if _, err := strconv.ParseFloat(v, 64); err != nil {
				numeric = false
			}
		}
	}
	if numeric {
		sort.SliceStable(vals, func(i, j int) bool {
			a, _ := strconv.ParseFloat(vals[i], 64)
			b, _ := strconv.ParseFloat(vals[j], 64)
			return a < b
		})
	}
	return vals
}

// WriteGrids writes every readahead-style workload (params "bucket" and
// "readers") as a file-size bucket × reader threads table of %change.
func WriteGrids(w io.Writer, c *judge.Comparison) error {
	tw := &lineWriter{w: w}
	for _, g := range grids(c, "bucket", "readers") {
		readers := ParamValues(g.rows, "readers")
		buckets := ParamValues(g.rows, "bucket")
		cells := map[[2]string]judge.Row{}
		for _, r := range g.rows {
			cells[[2]string{r.Params["bucket"], r.Params["readers"]}] = r
		}
		tw.text(fmt.Sprintf("%s / %s: %s, %%change by file size and readers", g.suite, g.workload, metricName(g.metric, g.unit)))
		const first, col = 10, 12
		cols := (MaxColumns - first) / col
		for start := 0; start < len(readers); start += cols {
			end := min(start+cols, len(readers))
			head := pad("bucket", first, false)
			for _, rd := range readers[start:end] {
				head += pad("readers="+rd, col, true)
			}
			tw.line("%s", head)
			for _, b := range buckets {
				line := pad(b, first, false)
				for _, rd := range readers[start:end] {
					r, ok := cells[[2]string{b, rd}]
					cell := "-"
					if ok {
						change, mark := changeColumn(r)
						cell = change + pad(mark, 3, false)
					}
					line += pad(cell, col, true)
				}
				tw.line("%s", line)
			}
		}
		tw.line("")
	}
	return tw.err
}

// WriteCurves writes every locks-style workload (param "contenders") as the
// metric by contender count, with a bar per kernel: '#' is patched, '|'
// marks base.
func WriteCurves(w io.Writer, c *judge.Comparison) error {
	tw := &lineWriter{w: w}
	for _, g := range grids(c, "contenders") {
		sort.SliceStable(g.rows, func(i, j int) bool {
			a, _ := strconv.ParseFloat(g.rows[i].Params["contenders"], 64)
			b, _ := strconv.ParseFloat(g.rows[j].Params["contenders"], 64)
			return a < b
		})
		tw.text(fmt.Sprintf("%s / %s: %s by contenders", g.suite, g.workload, metricName(g.metric, g.unit)))
		tw.line("contenders        base     patched  %%change   ('#' patched, '|' base)")
		peak := 0.0
		for _, r := range g.rows {
			peak = math.Max(peak, math.Max(r.Base.Mean, r.Patched.Mean))
		}
		const barWidth = 25
		for _, r := range g.rows {
			change, mark := changeColumn(r)
			bar := ""
			if peak > 0 {
				p := int(math.Round(r.Patched.Mean / peak * barWidth))
				b := int(math.Round(r.Base.Mean / peak * barWidth))
				cells := []rune(strings.Repeat("#", p) + strings.Repeat(" ", max(0, b-p)))
				if b > 0 {
					cells[b-1] = '|'
				}
				bar = string(cells)
			}
			tw.line("%s %s %s %s%s %s", pad(r.Params["contenders"], 10, true), pad(side(r.Base), 11, true),
				pad(side(r.Patched), 11, true), pad(change, 8, true), pad(mark, 3, false), bar)
		}
		tw.line("")
	}
	return tw.err
}

func metricName(metric, unit string) string {
	if unit == "" {
		return metric
	}
	return metric + " (" + unit + ")"
}
