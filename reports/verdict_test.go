package reports

import (
	"math"
	"strings"
	"testing"

	"github.com/patchbot/patchbot/judge"
	"github.com/patchbot/patchbot/judge/stats"
	"github.com/patchbot/patchbot/suites"
)

// deviates are five standardised deviations (mean 0, sample sd 1): runs
// made from them have exactly the geometric mean and log-scale spread
// asked for.
var deviates = func() []float64 {
	z := []float64{-1.2, -0.6, 0.1, 0.5, 1.2}
	var m, ss float64
	for _, v := range z {
		m += v
	}
	m /= float64(len(z))
	for _, v := range z {
		ss += (v - m) * (v - m)
	}
	sd := math.Sqrt(ss / float64(len(z)-1))
	out := make([]float64, len(z))
	for i, v := range z {
		out[i] = (v - m) / sd
	}
	return out
}()

// runs are five runs with geometric mean gm and log-scale sd s.
func runs(gm, s float64) []float64 {
	out := make([]float64, len(deviates))
	for i, z := range deviates {
		out[i] = gm * math.Exp(s*z)
	}
	return out
}

// metric is one metric of a cache-contention workload on both kernels.
type metric struct {
	workload, name, unit string
	higher               bool
	base, patched        []float64
}

// results makes the two kernels' results of cache-contention from metrics,
// one sample per run, as RunAB returns them.
func results(ms []metric) (base, patched []suites.Result) {
	return resultsOf("cache-contention", ms)
}

func resultsOf(suite string, ms []metric) (base, patched []suites.Result) {
	b := suites.Result{Suite: suite, Kernel: "base"}
	p := suites.Result{Suite: suite, Kernel: "patched"}
	params := map[string]string{"threads": "64"}
	for _, m := range ms {
		for i, v := range m.base {
			b.Samples = append(b.Samples, suites.Sample{Suite: b.Suite, Workload: m.workload, Params: params,
				Metric: m.name, Unit: m.unit, HigherIsBetter: m.higher, Round: i + 1, Value: v})
		}
		for i, v := range m.patched {
			p.Samples = append(p.Samples, suites.Sample{Suite: p.Suite, Workload: m.workload, Params: params,
				Metric: m.name, Unit: m.unit, HigherIsBetter: m.higher, Round: i + 1, Value: v})
		}
	}
	return []suites.Result{b}, []suites.Result{p}
}

// regressionCase is the squashfs patch that costs a quarter of the
// read-storm throughput: files/s -26% at p = 0.004 before correction, p99
// latency +160%, wake-ups per release doubled, while the mixed workload's
// median latency fell from 113 ms to 36.5 ms; 37 metrics in all, as
// cache-contention measures them.
func regressionCase() []metric {
	ms := []metric{
		{"read-storm", "files_per_s", "files/s", true, runs(100, 0.118), runs(74, 0.118)},
		{"mixed", "latency_p99", "ms", false, runs(1200, 0.2), runs(3120, 0.2)},
		{"read-storm", "wakeups_per_release", "wakeups/release", false, runs(9.5, 0.05), runs(19, 0.05)},
		{"mixed", "latency_p50", "ms", false, runs(113, 0.08), runs(36.5, 0.08)},
		{"stat-storm", "files_per_s", "files/s", true, runs(900, 0.2), runs(880, 0.2)},
		{"stat-storm", "latency_p99", "ms", false, runs(50, 0.3), runs(52, 0.3)},
		{"read-storm", "latency_p99", "ms", false, runs(400, 0.4), runs(430, 0.4)},
		{"mixed", "ops_per_s", "ops/s", true, runs(180, 0.3), runs(170, 0.3)},
		{"mixed", "wakeups_per_release", "wakeups/release", false, runs(19, 0.05), runs(19.5, 0.05)},
	}
	// The derived counters, as many as the suite measures, most of them
	// unmoved and noisy.
	derived := []string{"sched_wakeup", "context_switches", "ttwu", "cache_puts", "release_wake_calls",
		"release_wakeups", "waking_events", "cache_wakeups", "cache_wakeups_per_put"}
	for _, w := range []string{"stat-storm", "read-storm", "mixed"} {
		for _, d := range derived {
			ms = append(ms, metric{w, d, "count", false, runs(1000, 0.3), runs(1050, 0.3)})
		}
	}
	extra := []metric{
		{"read-storm", "mib_per_s", "MiB/s", true, runs(2, 0.2), runs(1.9, 0.2)},
		{"read-storm", "latency_p50", "ms", false, runs(30, 0.2), runs(31, 0.2)},
		{"stat-storm", "latency_p50", "ms", false, runs(20, 0.2), runs(21, 0.2)},
		{"mixed", "latency_mean", "ms", false, runs(300, 0.2), runs(310, 0.2)},
	}
	return append(ms, extra...)
}

// Holm over every metric of the reply cost the suite's own metrics their
// power: the -26% throughput loss became "not significant" and the reply
// opened with an improvement. Judged as its own family, the primary
// metrics' regression leads.
func TestRegressionLeadsWhenPrimaryMetricsRegress(t *testing.T) {
	ms := regressionCase()
	if len(ms) < 37 {
		t.Fatalf("the case has %d metrics, want the issue's 37 or more", len(ms))
	}
	p := stats.LogWelch.PValue(ms[0].base, ms[0].patched)
	if p < 0.003 || p > 0.005 {
		t.Fatalf("throughput p = %.4f before correction, want the issue's 0.004", p)
	}
	// The failure, reproduced: Holm across all 37 loses the throughput.
	var all []float64
	for _, m := range ms {
		all = append(all, stats.LogWelch.PValue(m.base, m.patched))
	}
	if adj := stats.Holm(all)[0]; adj < 0.05 {
		t.Fatalf("Holm over all %d metrics gives the throughput %.3f: the case no longer shows the failure", len(ms), adj)
	}

	base, patched := results(ms)
	c, err := judge.Compare(base, patched, judge.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if o := c.Outcome(); o != judge.Regression {
		t.Errorf("outcome %q, want regression", o)
	}
	v := Verdict(c)
	for _, want := range []string{"Regression: the patch lowers read-storm throughput by 26% (95% interval",
		"and raises mixed 99th percentile latency from 1200 ms to 3120 ms, by 160%",
		"Behind it: the patch raises read-storm scheduler wake-ups per cache release from 9.5 to 19, by 100% (95% interval 85.9% to 115%)"} {
		if !strings.Contains(v, want) {
			t.Errorf("verdict lacks %q:\n%s", want, v)
		}
	}
	if first := strings.SplitN(v, ".", 2)[0]; strings.Contains(first, "median latency") || strings.HasPrefix(v, "Improvement") {
		t.Errorf("the first sentence cites a derived counter or an improvement: %q", first)
	}
	if h := Headline(c); h != "patchbot noticed a +160.0% regression of cache-contention.mixed.latency_p99" {
		t.Errorf("headline %q", h)
	}
	if tags := Tags(c, "patchbot <patchbot@example.org>", "https://lore.example.org/r/1"); len(tags) != 2 ||
		tags[0] != "Reported-by: patchbot <patchbot@example.org>" || tags[1] != "Closes: https://lore.example.org/r/1" {
		t.Errorf("tags %q", tags)
	}
	var through judge.Row
	for _, r := range c.Rows {
		if r.Workload == "read-storm" && r.Metric == "files_per_s" {
			through = r
		}
	}
	if !through.Primary || !through.Called || through.AdjustedP >= 0.05 || !near(through.Interval.Ratio, 0.74, 1e-9) ||
		!(through.Interval.Low < 0.74 && through.Interval.High < 1) {
		t.Errorf("read-storm throughput row: %+v", through)
	}
	// The median latency's fall is a derived counter's, reported below.
	for _, r := range c.Rows {
		if r.Metric == "latency_p50" && r.Workload == "mixed" && (r.Primary || !r.Called) {
			t.Errorf("mixed median latency: primary %v called %v, want a called derived change", r.Primary, r.Called)
		}
	}
}

func near(a, b, tol float64) bool { return math.Abs(a-b) <= tol }

// same is a metric that does not change: the same runs on both kernels.
func same(w, m, unit string, higher bool, v, s float64) metric {
	return metric{w, m, unit, higher, runs(v, s), runs(v, s)}
}

// The first sentence's outcome word, for each kind of result.
func TestVerdictOutcomes(t *testing.T) {
	quiet := []metric{
		same("stat-storm", "files_per_s", "files/s", true, 900, 0.01),
		same("stat-storm", "latency_p99", "ms", false, 50, 0.01),
		same("read-storm", "latency_p99", "ms", false, 400, 0.01),
		same("mixed", "latency_p99", "ms", false, 1200, 0.01),
		same("mixed", "wakeups_per_release", "wakeups/release", false, 19, 0.01),
	}
	with := func(ms ...metric) []metric { return append(append([]metric{}, quiet...), ms...) }
	tests := []struct {
		name    string
		ms      []metric
		outcome judge.Outcome
		opens   string
		has     []string
	}{
		{"improvement", with(
			metric{"read-storm", "wakeups_per_release", "wakeups/release", false, runs(19.1, 0.04), runs(0.97, 0.02)},
			metric{"read-storm", "files_per_s", "files/s", true, runs(21, 0.1), runs(40, 0.06)},
			same("mixed", "ops_per_s", "ops/s", true, 180, 0.01)),
			judge.Improvement, "Improvement: the patch improves read-storm throughput by 90.5% (95% interval",
			[]string{"Behind it: the patch cuts read-storm scheduler wake-ups per cache release from 19.1 to 0.97, by 94.9%", "The other 5 primary metrics are within ±10%"}},
		{"regression", with(
			metric{"read-storm", "files_per_s", "files/s", true, runs(100, 0.02), runs(74, 0.02)},
			same("read-storm", "wakeups_per_release", "wakeups/release", false, 19, 0.01),
			same("mixed", "ops_per_s", "ops/s", true, 180, 0.01)),
			judge.Regression, "Regression: the patch lowers read-storm throughput by 26% (95% interval 2", nil},
		{"mixed", with(
			metric{"read-storm", "files_per_s", "files/s", true, runs(100, 0.02), runs(190, 0.02)},
			metric{"mixed", "ops_per_s", "ops/s", true, runs(180, 0.02), runs(120, 0.02)},
			same("read-storm", "wakeups_per_release", "wakeups/release", false, 19, 0.01)),
			judge.Mixed, "Mixed: the patch improves read-storm throughput by 90% (95% interval", []string{", but lowers mixed throughput by 33.3%"}},
		{"no change", with(
			same("read-storm", "files_per_s", "files/s", true, 100, 0.01),
			same("read-storm", "wakeups_per_release", "wakeups/release", false, 19, 0.01),
			same("mixed", "ops_per_s", "ops/s", true, 180, 0.3)),
			judge.NoChange, "No change: none of the 6 primary metrics of cache-contention changed significantly.",
			[]string{"5 are within ±10% (the smallest effect of interest)", "1 is not settled after 5 runs a side",
				"No change: none of the 6 primary metrics of cache-contention changed significantly. The reach is short of cache-contention's promise to see a change of 10%: this run could only have seen mixed throughput from 129% (80% power), and a smaller change may have gone unseen.",
				"The smallest changes this run could have detected (80% power): read-storm throughput 2.8%, read-storm 99th percentile latency 2.8%, "}},
		{"counters only", with(
			same("read-storm", "files_per_s", "files/s", true, 100, 0.01),
			same("mixed", "ops_per_s", "ops/s", true, 180, 0.01),
			metric{"read-storm", "wakeups_per_release", "wakeups/release", false, runs(19, 0.02), runs(3, 0.02)}),
			judge.NoChange, "No change in throughput or latency; the patch cuts read-storm scheduler wake-ups per cache release from 19 to 3, by 84.2% (95% interval",
			[]string{"None of the 6 primary metrics of cache-contention changed significantly.", "All 6 are within ±10%"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			base, patched := results(tt.ms)
			c, err := judge.Compare(base, patched, judge.Options{})
			if err != nil {
				t.Fatal(err)
			}
			v := Verdict(c)
			if c.Outcome() != tt.outcome || !strings.HasPrefix(v, tt.opens) {
				t.Errorf("outcome %q, verdict:\n%s\nwant %q, opening %q", c.Outcome(), v, tt.outcome, tt.opens)
			}
			for _, h := range tt.has {
				if !strings.Contains(v, h) {
					t.Errorf("verdict lacks %q:\n%s", h, v)
				}
			}
			if (Headline(c) == "") != (tt.outcome == judge.NoChange) {
				t.Errorf("headline %q for %s", Headline(c), tt.outcome)
			}
			if (Tags(c, "bot <b@x>", "") != nil) != (tt.outcome == judge.Regression || tt.outcome == judge.Mixed) {
				t.Errorf("tags %q for %s", Tags(c, "bot <b@x>", ""), tt.outcome)
			}
		})
	}
}

func TestHeadlineWords(t *testing.T) {
	ms := []metric{
		{"read-storm", "wakeups_per_release", "wakeups/release", false, runs(19.1, 0.04), runs(0.974, 0.02)},
		{"read-storm", "files_per_s", "files/s", true, runs(21, 0.1), runs(40, 0.06)},
	}
	base, patched := results(ms)
	c, err := judge.Compare(base, patched, judge.Options{})
	if err != nil {
		t.Fatal(err)
	}
	// Wake-ups per release explains; the headline is about what users feel.
	if h := Headline(c); h != "patchbot noticed a 90.5% improvement of cache-contention.read-storm.files_per_s" {
		t.Errorf("headline %q", h)
	}
	base, patched = results(ms[:1])
	c, _ = judge.Compare(base, patched, judge.Options{})
	if h := Headline(c); h != "" {
		t.Errorf("a mechanism counter alone made the headline %q", h)
	}
	base, patched = results(ms[1:])
	c, _ = judge.Compare(base, patched, judge.Options{})
	if h := Headline(c); h != "patchbot noticed a 90.5% improvement of cache-contention.read-storm.files_per_s" {
		t.Errorf("headline %q", h)
	}
}

// The guards: a significant change below the noise floor, or one whose
// two kernels' runs overlap, is not called a change.
func TestGuards(t *testing.T) {
	tests := []struct {
		name    string
		base    []float64
		patched []float64
		guard   string
	}{
		// 3% apart with 0.5% noise: significant, under the 5% floor.
		{"below the noise floor", runs(100, 0.005), runs(103, 0.005), judge.GuardNoiseFloor},
		// A mean moved by one far run: the medians lie in each other's
		// middle half.
		// Two values in both kernels, in other proportions: the means
		// differ by 5.7%, significantly over 20 runs, but each median lies
		// in the other kernel's middle half.
		{"overlapping runs", repeat(100, 14, 115, 6), repeat(100, 6, 115, 14), judge.GuardOverlap},
		{"a change", runs(100, 0.02), runs(120, 0.02), ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			base, patched := results([]metric{{"read-storm", "files_per_s", "files/s", true, tt.base, tt.patched}})
			c, err := judge.Compare(base, patched, judge.Options{Test: stats.Welch})
			if err != nil {
				t.Fatal(err)
			}
			r := c.Rows[0]
			if !r.Significant || r.Guard != tt.guard || r.Called != (tt.guard == "") {
				t.Fatalf("row: significant %v (p %.3g), guard %q, called %v; want significant, guard %q",
					r.Significant, r.AdjustedP, r.Guard, r.Called, tt.guard)
			}
			if tt.guard != "" {
				if c.Outcome() != judge.NoChange || !strings.Contains(strings.Join(Notes(c), " "), "not called a change: "+tt.guard) {
					t.Errorf("outcome %q, notes %q", c.Outcome(), Notes(c))
				}
			}
		})
	}
}

// repeat is n of a then m of b.
func repeat(a float64, n int, b float64, m int) []float64 {
	var out []float64
	for i := 0; i < n; i++ {
		out = append(out, a)
	}
	for i := 0; i < m; i++ {
		out = append(out, b)
	}
	return out
}

// A base whose runs fall in two modes is flagged, not averaged silently.
func TestBimodalBaseIsFlagged(t *testing.T) {
	// The seconds per storm, as files/s of 4,000 files.
	var base, patched []float64
	for _, s := range []float64{21.9, 20.5, 7.9, 23.7, 22.4} {
		base = append(base, 4000/s)
	}
	for _, s := range []float64{10.8, 12.5, 11.6, 11.1} {
		patched = append(patched, 4000/s)
	}
	b, p := results([]metric{{"read-storm", "files_per_s", "files/s", true, base, patched}})
	c, err := judge.Compare(b, p, judge.Options{})
	if err != nil {
		t.Fatal(err)
	}
	notes := strings.Join(Notes(c), "\n")
	if !strings.Contains(notes, "The base kernel's read-storm throughput fell in two modes: 4 runs at 169-195 files/s and 1 run at 506 files/s") {
		t.Errorf("notes:\n%s", notes)
	}
	// In an A/A run the second side is the base again: no "patched
	// kernel" in prose about a run that has none.
	c, err = judge.Compare(p, b, judge.Options{})
	if err != nil {
		t.Fatal(err)
	}
	c.AA = true
	notes = strings.Join(Notes(c), "\n")
	if !strings.Contains(notes, "The second base kernel's read-storm throughput fell in two modes") || strings.Contains(notes, "patched") {
		t.Errorf("A/A notes:\n%s", notes)
	}
}

// The verdict cites the seed's own metric, a mechanism counter, ahead of a
// derived counter that changed by a larger factor (but only after saying
// that throughput and latency did not change), and writes large counts
// without exponents.
func TestVerdictPrefersPrimaryMetrics(t *testing.T) {
	ms := []metric{
		same("read-storm", "files_per_s", "files/s", true, 100, 0.01),
		{"read-storm", "release_wakeups", "count", false, runs(6811, 0.02), runs(69.3, 0.02)},
		{"read-storm", "wakeups_per_release", "wakeups/release", false, runs(8.05, 0.02), runs(0.925, 0.02)},
		{"read-storm", "sched_wakeup", "count", false, runs(15550, 0.02), runs(8803, 0.02)},
	}
	b, p := results(ms)
	c, err := judge.Compare(b, p, judge.Options{})
	if err != nil {
		t.Fatal(err)
	}
	v := Verdict(c)
	if !strings.HasPrefix(v, "No change in throughput or latency; the patch cuts read-storm scheduler wake-ups per cache release from 8.05 to 0.925") {
		t.Errorf("verdict does not lead with wake-ups per release: %q", v)
	}
	if strings.Contains(v, "release wakeups") || !strings.Contains(v, "2 of the 2 derived counters changed significantly") {
		t.Errorf("verdict should cite the primary metric, and count the derived ones: %q", v)
	}
	for v, want := range map[float64]string{4938.2: "4938", 463.4: "463", 9.71: "9.71", 0.925: "0.925"} {
		if got := short3(v); got != want {
			t.Errorf("short3(%g) = %q, want %q", v, got, want)
		}
	}
}

func TestLayoutNote(t *testing.T) {
	if n := LayoutNote([]byte("CONFIG_SMP=y\nCONFIG_DEBUG_FORCE_FUNCTION_ALIGN_64B=y\n")); !strings.HasPrefix(n, "functions aligned to 64 bytes") {
		t.Errorf("note %q", n)
	}
	if n := LayoutNote([]byte("# CONFIG_DEBUG_FORCE_FUNCTION_ALIGN_64B is not set\n")); n != "" {
		t.Errorf("note %q for a config without the option", n)
	}
}

func TestNoticedReadsItsNumber(t *testing.T) {
	for amount, want := range map[string]string{
		"88.6%": "an", "8.0%": "an", "11.0%": "an", "18.2%": "an", "+11.5%": "an",
		"12.0%": "a", "94.9%": "a", "110.0%": "a", "-26.0%": "a", "181.0%": "a",
	} {
		got := noticed(amount, "reduction", "x")
		if !strings.HasPrefix(got, "patchbot noticed "+want+" "+amount+" ") {
			t.Errorf("noticed(%s) = %q, want the article %q", amount, got, want)
		}
	}
}

// A ratio whose denominator changed significantly is cited with both
// totals: the calls that a patch adds on an empty queue make wake-ups per
// release fall while nobody waits less (the panel's wake-unconditional).
func TestRatioDenominatorShown(t *testing.T) {
	ms := []metric{
		same("read-storm", "files_per_s", "files/s", true, 100, 0.02),
		same("mixed", "ops_per_s", "ops/s", true, 180, 0.02),
		same("read-storm", "release_wakeups", "count", false, 18000, 0.02),
		{"read-storm", "release_wake_calls", "count", false, runs(900, 0.02), runs(5400, 0.02)},
		{"read-storm", "wakeups_per_release", "wakeups/release", false, runs(20, 0.02), runs(3.33, 0.02)},
	}
	b, p := results(ms)
	c, err := judge.Compare(b, p, judge.Options{})
	if err != nil {
		t.Fatal(err)
	}
	v := Verdict(c)
	for _, want := range []string{
		"No change in throughput or latency; the patch cuts read-storm scheduler wake-ups per cache release from 20 to 3.33",
		"Read-storm scheduler wake-ups per cache release is release wake-ups over release wake calls, and the denominator changed significantly too: release wake-ups 18000 to 18000, release wake calls 900 to 5400 (+500%).",
	} {
		if !strings.Contains(v, want) {
			t.Errorf("verdict lacks %q:\n%s", want, v)
		}
	}
	if c.Outcome() != judge.NoChange || Headline(c) != "" {
		t.Errorf("outcome %q, headline %q: want no change and none", c.Outcome(), Headline(c))
	}
}
