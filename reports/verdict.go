package reports

import (
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"

	"github.com/patchbot/patchbot/judge"
	"github.com/patchbot/patchbot/judge/stats"
	"github.com/patchbot/patchbot/suites"
)

// phrases turn metric names into words for the verdict sentence. A metric
// not listed here reads as its name with spaces.
var phrases = map[string]string{
	"files_per_s":              "throughput",
	"mib_per_s":                "throughput",
	"ops_per_s":                "throughput",
	"latency_mean":             "mean latency",
	"latency_p50":              "median latency",
	"latency_p95":              "95th percentile latency",
	"latency_p99":              "99th percentile latency",
	"latency_max":              "worst-case latency",
	"elapsed":                  "time",
	"acquisitions_per_s":       "lock acquisitions per second",
	"curve_acquisitions_per_s": "lock acquisitions per second over the curve (geometric mean)",
	"sched_wakeup":             "scheduler wake-ups",
	"context_switches":         "context switches",
	"ttwu":                     "try-to-wake-up calls",
	"wakeups_per_release":      "scheduler wake-ups per cache release",
	"cache_releases":           "cache releases",
	"release_wake_calls":       "release wake calls",
	"release_wakeups":          "release wake-ups",
	"cache_puts":               "cache puts",
	"cache_wakeups":            "cache wake-ups",
	"cache_wakeups_per_put":    "cache wake-ups per put",
}

// describe names a row for a reader: "read-storm throughput", or for a
// cell "bucket-read time (bucket=lt256K readers=4)".
func describe(r judge.Row) string {
	p, ok := phrases[r.Metric]
	if !ok {
		p = strings.ReplaceAll(r.Metric, "_", " ")
	}
	s := r.Workload + " " + p
	if cell := r.NamedCell(); cell != "" {
		s += " (" + cell + ")"
	}
	return s
}

// centres are the two kernels' values a claim cites: the geometric means
// when the change is a ratio of geometric means, else the means.
func centres(r judge.Row) (base, patched float64) {
	if r.Interval.Log && r.Base.GeoMean > 0 && r.Patched.GeoMean > 0 {
		return r.Base.GeoMean, r.Patched.GeoMean
	}
	return r.Base.Mean, r.Patched.Mean
}

// claim says what the patch did to one called row, with its size and 95%
// interval: "improves read-storm throughput by 90% (95% interval 61% to
// 125%)" or "cuts read-storm scheduler wake-ups per cache release from 19.1
// to 0.97, by 94.9% (94.1% to 95.6%)".
func claim(r judge.Row, first bool) string {
	name := describe(r)
	b, p := centres(r)
	from, to := short3(b), short3(p)
	if r.Unit != "" && r.Unit != "count" && !strings.Contains(r.Unit, "/") {
		from, to = from+" "+r.Unit, to+" "+r.Unit
	}
	verb := map[[2]bool]string{ // [higher is better, went up]
		{true, true}: "improves", {true, false}: "lowers", {false, false}: "cuts", {false, true}: "raises",
	}[[2]bool{r.HigherIsBetter, r.Interval.Ratio > 1}]
	s := verb + " " + name
	if !r.HigherIsBetter {
		s += " from " + from + " to " + to + ","
	}
	return s + " by " + magnitude(r.Interval) + " (" + bounds(r.Interval, first) + ")"
}

// magnitude is the size of a change in words: "2.6x" from a doubling
// (when the whole interval is one), "90%" for a smaller rise, "94.9%" for
// a fall.
func magnitude(iv stats.Interval) string {
	if iv.Ratio >= 2 && iv.Low >= 2 {
		return times(iv.Ratio)
	}
	return pct(math.Abs(iv.Ratio - 1))
}

// bounds is the interval of a change in the words of magnitude: "95%
// interval 61% to 125%", the label only on the first claim of a sentence.
func bounds(iv stats.Interval, label bool) string {
	var s string
	switch {
	case iv.Ratio >= 2 && iv.Low >= 2:
		s = times(iv.Low) + " to " + times(iv.High)
	case iv.Ratio > 1 && iv.Low >= 1:
		s = pct(iv.Low-1) + " to " + pct(iv.High-1)
	case iv.Ratio < 1 && iv.High <= 1:
		s = pct(1-iv.High) + " to " + pct(1-iv.Low)
	default: // an interval across no change: a signed range
		s = signedPct(iv.Low-1) + " to " + signedPct(iv.High-1)
	}
	if label {
		return fmt.Sprintf("%g%% interval ", iv.Level*100) + s
	}
	return s
}

func times(r float64) string {
	if math.IsInf(r, 1) || r > 1e6 {
		return "an unbounded factor"
	}
	return strconv.FormatFloat(r, 'f', 1, 64) + "x"
}

// pct writes a fraction as a percentage with three significant digits at
// most: 0.949 is "94.9%", 1.6 is "160%", 0.0421 is "4.21%".
func pct(f float64) string { return short3(100*f) + "%" }

func signedPct(f float64) string {
	if f >= 0 {
		return "+" + pct(f)
	}
	return "-" + pct(-f)
}

// short3 prints three significant digits, and large counts whole rather
// than with an exponent, as a person writes them: 4938, 463, 9.71, 0.925.
func short3(v float64) string {
	if math.Abs(v) >= 1000 {
		return strconv.FormatFloat(v, 'f', 0, 64)
	}
	return strconv.FormatFloat(v, 'g', 3, 64)
}

// bySize orders rows by the size of their change, largest first.
func bySize(rs []judge.Row) {
	sort.SliceStable(rs, func(i, j int) bool { return rs[i].Ratio() > rs[j].Ratio() })
}

// byRank orders primary rows as their suite lists them.
func byRank(rs []judge.Row) {
	sort.SliceStable(rs, func(i, j int) bool {
		if rs[i].Suite != rs[j].Suite {
			return rs[i].Suite < rs[j].Suite
		}
		return rs[i].Rank < rs[j].Rank
	})
}

// maxClaims is how many changes the verdict cites of each direction.
const maxClaims = 2

// Verdict is the reply's first paragraph. Its first sentence is about the
// primary metrics alone and opens with the outcome: "Improvement:",
// "Regression:", "Mixed:" or "No change:"; every change it cites carries
// its 95% interval. The sentences after it say what the rest of the
// primary metrics did (no change of a size that matters, or not settled
// by the maximum of runs) and how many derived counters changed.
func Verdict(c *judge.Comparison) string {
	o := c.Outcome()
	if o == judge.NotJudged {
		if c.Judged() == 0 {
			return fmt.Sprintf("Too few runs to judge any change: every metric needs at least %d runs "+
				"on each kernel.", stats.MinSamples)
		}
		s := fmt.Sprintf("Not judged: no primary metric was measured with at least %d runs on each kernel.", stats.MinSamples)
		if t := derivedSentence(c); t != "" {
			s += " " + t
		}
		return s
	}
	var better, worse, rest []judge.Row
	judged := 0
	for _, r := range c.PrimaryRows() {
		if !r.Judged {
			continue
		}
		judged++
		switch {
		case r.Called && r.Better():
			better = append(better, r)
		case r.Called && r.Worse():
			worse = append(worse, r)
		default:
			rest = append(rest, r)
		}
	}
	byRank(better)
	byRank(worse)
	var s string
	of := fmt.Sprintf("%d primary metrics", judged)
	if len(c.Suites) == 1 {
		of += " of " + c.Suites[0].Suite
	}
	cite := func(rs []judge.Row, first bool) string {
		var cs []string
		for i, r := range rs[:min(maxClaims, len(rs))] {
			cs = append(cs, claim(r, first && i == 0))
		}
		return joinAnd(cs)
	}
	more := func(rs []judge.Row, verb string) string {
		if n := len(rs) - maxClaims; n > 0 {
			return fmt.Sprintf("; %d more primary %s %s (below)", n, map[bool]string{true: "metric", false: "metrics"}[n == 1], verb)
		}
		return ""
	}
	switch o {
	case judge.Improvement:
		s = "Improvement: the patch " + cite(better, true) + more(better, "improved") + "."
	case judge.Regression:
		s = "Regression: the patch " + cite(worse, true) + more(worse, "regressed") + "."
	case judge.Mixed:
		s = "Mixed: the patch " + cite(better, true) + more(better, "improved") + ", but " + cite(worse, false) + more(worse, "regressed") + "."
	case judge.NoChange:
		s = fmt.Sprintf("No change: none of the %s changed significantly.", of)
		if t := mechanismSentence(c, true); t != "" {
			s = "No change in throughput or latency; " + t + fmt.Sprintf(" None of the %s changed significantly.", of)
		} else if called := calledDerived(c); called > 0 {
			s = fmt.Sprintf("No change in throughput or latency; %d of the %d derived counters changed significantly (below). None of the %s changed significantly.",
				called, judgedDerived(c), of)
		}
	}
	// Where the run could not see what the suite promises, the first
	// paragraph says so, next to the outcome: a "No change" with a wide
	// reach is not a "fine".
	if t := reachSentence(c, rest); t != "" {
		s += " " + t
	}
	if o != judge.NoChange {
		if t := mechanismSentence(c, false); t != "" {
			s += " " + t
		}
	}
	if t := restSentence(c, rest, o == judge.NoChange); t != "" {
		s += " " + t
	}
	if t := detectableSentence(c, rest, o == judge.NoChange); t != "" {
		s += " " + t
	}
	if t := derivedSentence(c); t != "" && !(o == judge.NoChange && strings.HasPrefix(s, "No change in throughput or latency; ") && mechanismSentence(c, true) == "") {
		s += " " + t
	}
	return s
}

// mechanismSentence cites the mechanism counters (suites.Verdict.Mechanism)
// that changed, with their intervals, and says when a ratio's denominator
// changed too (ratioNote). lead: the sentence follows "No change in
// throughput or latency; " and starts in lower case. "" when none changed.
func mechanismSentence(c *judge.Comparison, lead bool) string {
	var rows []judge.Row
	for _, r := range c.Rows {
		if r.Mechanism && r.Called {
			rows = append(rows, r)
		}
	}
	if len(rows) == 0 {
		return ""
	}
	byRank(rows)
	var cs []string
	for i, r := range rows[:min(maxClaims, len(rows))] {
		cs = append(cs, claim(r, i == 0))
	}
	s := "the patch " + joinAnd(cs)
	if n := len(rows) - maxClaims; n > 0 {
		s += fmt.Sprintf("; %d more mechanism counters changed (below)", n)
	}
	if !lead {
		s = "Behind it: " + s
	}
	s += "."
	for _, r := range rows[:min(maxClaims, len(rows))] {
		if t := ratioNote(c, r); t != "" {
			s += " " + t
		}
	}
	return s
}

// ratioNote says, for a ratio row (suites.Verdict.Ratios) whose
// denominator changed significantly itself, that the ratio moved partly
// because its denominator did, and shows both totals: "Wake-ups per
// release is release wake-ups over release wake calls, and the calls
// changed too: release wake-ups 18730 to 679, release wake calls 936 to
// 1290 (+37.8%)." "" otherwise.
func ratioNote(c *judge.Comparison, r judge.Row) string {
	def, err := suites.Lookup(r.Suite)
	if err != nil {
		return ""
	}
	ratio, ok := def.Verdict.RatioOf(r.Metric)
	if !ok {
		return ""
	}
	var num, den *judge.Row
	for i := range c.Rows {
		o := &c.Rows[i]
		if o.Suite != r.Suite || o.Workload != r.Workload || o.Cell() != r.Cell() {
			continue
		}
		switch o.Metric {
		case ratio.Numerator:
			num = o
		case ratio.Denominator:
			den = o
		}
	}
	if num == nil || den == nil || !den.Significant || !den.Interval.Defined {
		return ""
	}
	total := func(x *judge.Row) string {
		b, p := centres(*x)
		return fmt.Sprintf("%s %s to %s", phraseOf(x.Metric), short3(b), short3(p))
	}
	return fmt.Sprintf("%s is %s over %s, and the denominator changed significantly too: %s, %s (%s).",
		capitalize(r.Workload+" "+phraseOf(r.Metric)), phraseOf(ratio.Numerator), phraseOf(ratio.Denominator),
		total(num), total(den), signedPct(den.Interval.Ratio-1))
}

func phraseOf(metric string) string {
	if p, ok := phrases[metric]; ok {
		return p
	}
	return strings.ReplaceAll(metric, "_", " ")
}

// detectableSentence says how small a change of the primary metrics that
// did not change this run could have seen: each one's minimum detectable
// effect (stats.Judgement.Detectable) at the last look, so that "no
// change" is a statement of reach. all: every primary metric (a no-change
// verdict); otherwise only those not settled. "" when there are none.
func detectableSentence(c *judge.Comparison, rest []judge.Row, all bool) string {
	var parts []string
	byRank(rest)
	for _, r := range rest {
		if r.Called || r.Detectable <= 0 || !all && r.Settled() || shortOfPromise(c, r) {
			continue // the short ones are in the reach sentence
		}
		parts = append(parts, describe(r)+" "+pct(r.Detectable))
	}
	if len(parts) == 0 {
		return ""
	}
	return fmt.Sprintf("The smallest changes this run could have detected (%g%% power): %s.",
		100*stats.DetectablePower, strings.Join(parts, ", "))
}

func calledDerived(c *judge.Comparison) int {
	n := 0
	for _, r := range c.DerivedRows() {
		if r.Judged && r.Called && !r.Mechanism {
			n++
		}
	}
	return n
}

func judgedDerived(c *judge.Comparison) int {
	n := 0
	for _, r := range c.DerivedRows() {
		if r.Judged && !r.Mechanism {
			n++
		}
	}
	return n
}

// restSentence says what the primary metrics not cited did: within the
// smallest effect of interest, not settled, or significant but stopped by a
// guard. none: no primary metric changed (the sentence follows "No
// change: ...").
func restSentence(c *judge.Comparison, rest []judge.Row, none bool) string {
	if len(rest) == 0 {
		return ""
	}
	var within, open, guarded []judge.Row
	for _, r := range rest {
		switch {
		case r.Significant:
			guarded = append(guarded, r)
		case r.Within:
			within = append(within, r)
		default:
			open = append(open, r)
		}
	}
	are := func(n int) string {
		if n == 1 {
			return "is"
		}
		return "are"
	}
	// Each part without its count, so that one kind alone reads "All 3
	// are within ..." or "The other primary metric is ...".
	type part struct {
		n    int
		what string
	}
	var parts []part
	if n := len(within); n > 0 {
		parts = append(parts, part{n, fmt.Sprintf("within ±%s (the smallest effect of interest)", smallestOf(c, within))})
	}
	if n := len(open); n > 0 {
		worst := 0.0
		for _, r := range open {
			if r.Interval.Defined {
				worst = math.Max(worst, math.Max(math.Abs(r.Interval.Low-1), math.Abs(r.Interval.High-1)))
			}
		}
		parts = append(parts, part{n, fmt.Sprintf("not settled after %s (95%% intervals reach ±%s)", runsOf(c), pct(worst))})
	}
	if n := len(guarded); n > 0 {
		parts = append(parts, part{n, fmt.Sprintf("significant but not called a change (%s)", guarded[0].Guard)})
	}
	if len(parts) == 1 {
		p := parts[0]
		switch {
		case none && p.n == 1:
			return "It is " + p.what + "."
		case none && p.n == 2:
			return "Both are " + p.what + "."
		case none:
			return fmt.Sprintf("All %d are %s.", p.n, p.what)
		case p.n == 1:
			return "The other primary metric is " + p.what + "."
		}
		return fmt.Sprintf("The other %d primary metrics are %s.", p.n, p.what)
	}
	var ws []string
	for _, p := range parts {
		ws = append(ws, fmt.Sprintf("%d %s %s", p.n, are(p.n), p.what))
	}
	if none {
		return "Of them, " + joinAnd(ws) + "."
	}
	return "Of the other primary metrics, " + joinAnd(ws) + "."
}

func smallestOf(c *judge.Comparison, rows []judge.Row) string {
	if j, ok := c.Judgement(rows[0].Suite); ok {
		return pct(j.SmallestEffect)
	}
	return pct(judge.DefaultSmallestEffect)
}

// runsOf is "10 runs a side", from the suites' judgements.
func runsOf(c *judge.Comparison) string {
	n := 0
	for _, s := range c.Suites {
		n = max(n, s.Runs)
	}
	return fmt.Sprintf("%d runs a side", n)
}

func derivedSentence(c *judge.Comparison) string {
	judged, called := 0, 0
	for _, r := range c.DerivedRows() {
		if r.Judged && !r.Mechanism {
			judged++
			if r.Called {
				called++
			}
		}
	}
	switch {
	case judged == 0:
		return ""
	case called == 0:
		return fmt.Sprintf("No significant change in the %d derived counters.", judged)
	}
	return fmt.Sprintf("%d of the %d derived counters changed significantly (below).", called, judged)
}

func joinAnd(parts []string) string {
	switch len(parts) {
	case 0:
		return ""
	case 1:
		return parts[0]
	}
	return strings.Join(parts[:len(parts)-1], ", ") + " and " + parts[len(parts)-1]
}

// shortOfPromise reports whether a primary metric that was not called a
// change could not have been seen to change by its suite's smallest
// effect (suites.Verdict.SmallestEffect): its minimum detectable effect
// at the run's last look is wider.
func shortOfPromise(c *judge.Comparison, r judge.Row) bool {
	if !r.Primary || !r.Judged || r.Called || r.Detectable <= 0 {
		return false
	}
	promise := judge.DefaultSmallestEffect
	for _, s := range c.Suites {
		if s.Suite == r.Suite && s.SmallestEffect > 0 {
			promise = s.SmallestEffect
		}
	}
	return r.Detectable > promise+1e-9
}

// reachSentence says, when some primary metric's reach is wider than its
// suite promises, how wide: "The reach is short of cache-contention's
// promise to see a change of 10%: this run could only have seen mixed p99
// latency change from 14.2% (80% power)." "" when every metric reaches.
func reachSentence(c *judge.Comparison, rest []judge.Row) string {
	bySuite := map[string][]string{}
	var order []string
	byRank(rest)
	for _, r := range rest {
		if !shortOfPromise(c, r) {
			continue
		}
		if _, ok := bySuite[r.Suite]; !ok {
			order = append(order, r.Suite)
		}
		bySuite[r.Suite] = append(bySuite[r.Suite], describe(r)+" from "+pct(r.Detectable))
	}
	var parts []string
	for _, suite := range order {
		promise := judge.DefaultSmallestEffect
		for _, s := range c.Suites {
			if s.Suite == suite && s.SmallestEffect > 0 {
				promise = s.SmallestEffect
			}
		}
		parts = append(parts, fmt.Sprintf("The reach is short of %s's promise to see a change of %s: this run could only have seen %s (%g%% power), and a smaller change may have gone unseen.",
			suite, pct(promise), joinAnd(bySuite[suite]), 100*stats.DetectablePower))
	}
	return strings.Join(parts, " ")
}
