package reports

import (
	"bytes"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/patchbot/patchbot/judge"
	"github.com/patchbot/patchbot/judge/stats"
	"github.com/patchbot/patchbot/suites"
)

// samples makes one Result of a metric with the given values per round.
func samples(kernel, suite, workload, metric string, higher bool, params map[string]string, values ...float64) suites.Result {
	r := suites.Result{Suite: suite, Kernel: kernel}
	for i, v := range values {
		r.Samples = append(r.Samples, suites.Sample{Suite: suite, Workload: workload, Params: params,
			Metric: metric, Unit: "u", HigherIsBetter: higher, Round: i, Value: v})
	}
	return r
}

func mustCompare(t *testing.T, base, patched []suites.Result) *judge.Comparison {
	c, err := judge.Compare(base, patched, judge.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestCompareJudgesOnlyWithThreeRuns(t *testing.T) {
	base := []suites.Result{
		samples("base", "s", "w", "big", true, nil, 100, 101, 99),
		samples("base", "s", "w", "few", true, nil, 100, 101),
	}
	patched := []suites.Result{
		samples("patched", "s", "w", "big", true, nil, 200, 201, 199),
		samples("patched", "s", "w", "few", true, nil, 500, 501),
	}
	c := mustCompare(t, base, patched)
	if len(c.Rows) != 2 || !c.Rows[0].Judged || c.Rows[1].Judged || c.Rows[1].Significant {
		t.Fatalf("rows %+v", c.Rows)
	}
	v := Verdict(c)
	if !strings.Contains(v, "big") || strings.Contains(v, "few") {
		t.Errorf("verdict %q must cite the judged change only", v)
	}
	var buf bytes.Buffer
	WriteTable(&buf, c, Commits{}, DefaultNoiseShown)
	if !strings.Contains(buf.String(), "+398.0% ?") {
		t.Errorf("the unjudged row is not marked:\n%s", buf.String())
	}
}

func TestStddevShownOnlyWhenItMatters(t *testing.T) {
	c := mustCompare(t,
		[]suites.Result{samples("base", "s", "w", "quiet", true, nil, 1000, 1001, 999), samples("base", "s", "w", "noisy", true, nil, 1000, 1200, 800)},
		[]suites.Result{samples("p", "s", "w", "quiet", true, nil, 1000, 1001, 999), samples("p", "s", "w", "noisy", true, nil, 1000, 1200, 800)})
	var buf bytes.Buffer
	WriteTable(&buf, c, Commits{}, DefaultNoiseShown)
	for _, line := range strings.Split(buf.String(), "\n") {
		switch {
		case strings.HasSuffix(line, "quiet (u)") && strings.Contains(line, "±"):
			t.Errorf("0.1%% noise shown: %q", line)
		case strings.HasSuffix(line, "noisy (u)") && !strings.Contains(line, "± 20%"):
			t.Errorf("20%% noise not shown: %q", line)
		}
	}
}

func TestLocksCurve(t *testing.T) {
	var base, patched []suites.Result
	// The seed's shape: without the patch acquisitions fall off steeply
	// with contenders; with it they stay level, a little lower at first.
	for _, n := range []int{1, 20, 100, 1000} {
		p := map[string]string{"contenders": strconv.Itoa(n)}
		b := 1.8e6 / (1 + float64(n)/60)
		base = append(base, samples("base", "locks", "flock", "acquisitions_per_s", true, p, b*0.99, b, b*1.01))
		patched = append(patched, samples("patched", "locks", "flock", "acquisitions_per_s", true, p, 1.39e6, 1.4e6, 1.41e6))
	}
	c := mustCompare(t, base, patched)
	var buf bytes.Buffer
	if err := WriteCurves(&buf, c); err != nil {
		t.Fatal(err)
	}
	out := buf.String()
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 6 {
		t.Fatalf("curve has %d lines, want a title, a heading and 4 points:\n%s", len(lines), out)
	}
	// Ordered by contenders numerically (1, 20, 100, 1000, not as text).
	for i, n := range []string{"1", "20", "100", "1000"} {
		if f := strings.Fields(lines[2+i]); f[0] != n {
			t.Errorf("point %d is for %s contenders, want %s", i, f[0], n)
		}
	}
	if !strings.Contains(lines[5], "+") || !strings.Contains(lines[5], "#") {
		t.Errorf("1000 contenders should show a large gain with a bar: %q", lines[5])
	}
	checkWidth(t, out)
}

func TestReadaheadGridLayout(t *testing.T) {
	var base, patched []suites.Result
	for _, b := range []string{"lt256K", "gt5M"} {
		for _, rd := range []string{"16", "1", "4"} {
			p := map[string]string{"bucket": b, "readers": rd}
			base = append(base, samples("base", "readahead", "bucket-read", "elapsed", false, p, 1, 1.01, 0.99))
			patched = append(patched, samples("patched", "readahead", "bucket-read", "elapsed", false, p, 2, 2.02, 1.98))
		}
	}
	c := mustCompare(t, base, patched)
	var buf bytes.Buffer
	if err := WriteGrids(&buf, c); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(buf.String(), "\n")
	head := strings.Fields(lines[1])
	if strings.Join(head, " ") != "bucket readers=1 readers=4 readers=16" {
		t.Errorf("heading %q: readers must be in numeric order", lines[1])
	}
	if f := strings.Fields(lines[2]); f[0] != "lt256K" || f[1] != "+100.0%" {
		t.Errorf("first row %q", lines[2])
	}
	checkWidth(t, buf.String())
}

func checkWidth(t *testing.T, s string) {
	for _, line := range strings.Split(s, "\n") {
		if utf8.RuneCountInString(line) > MaxColumns {
			t.Errorf("line of %d columns: %q", utf8.RuneCountInString(line), line)
		}
	}
}

func TestTableWidthWithLongNames(t *testing.T) {
	long := "a_metric_with_a_name_long_enough_to_push_the_row_past_eighty_columns"
	c := mustCompare(t, []suites.Result{samples("base", "s", "w", long, true, nil, 1, 2, 3)},
		[]suites.Result{samples("p", "s", "w", long, true, nil, 1, 2, 3)})
	var buf bytes.Buffer
	WriteTable(&buf, c, Commits{}, DefaultNoiseShown)
	checkWidth(t, buf.String())
	if !strings.Contains(buf.String(), long) {
		t.Error("the long name was lost")
	}
}

func BenchmarkCompareAndRender(b *testing.B) {
	run, err := LoadRun("testdata/runs/squashfs-improvement")
	if err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		if _, err := Render(run, testOptions); err != nil {
			b.Fatal(err)
		}
	}
}

func TestMissingCountersAreListed(t *testing.T) {
	base := samples("base", "cache-contention", "stat-storm", "files_per_s", true, nil, 1, 2, 3)
	base.Missing = []suites.Missing{{Suite: "cache-contention", Workload: "stat-storm", Metric: "cache_releases",
		Reason: "kprobe on squashfs_cache_put: no such symbol"}}
	patched := samples("patched", "cache-contention", "stat-storm", "files_per_s", true, nil, 1, 2, 3)
	patched.Missing = base.Missing
	c := mustCompare(t, []suites.Result{base}, []suites.Result{patched})
	var buf bytes.Buffer
	WriteTable(&buf, c, Commits{}, DefaultNoiseShown)
	if n := strings.Count(buf.String(), "cache_releases: kprobe on squashfs_cache_put"); n != 1 {
		t.Errorf("the missing counter is listed %d times, want once:\n%s", n, buf.String())
	}
}

// The primary block: one line per primary metric in the suite's order,
// with its interval and a word, within 80 columns; the mechanism counters
// below them, apart.
func TestWritePrimary(t *testing.T) {
	ms := []metric{
		{"mixed", "ops_per_s", "ops/s", true, runs(180, 0.3), runs(170, 0.3)},
		{"read-storm", "wakeups_per_release", "wakeups/release", false, runs(19.1, 0.04), runs(0.97, 0.02)},
		{"read-storm", "files_per_s", "files/s", true, runs(21, 0.1), runs(40, 0.06)},
		{"stat-storm", "files_per_s", "files/s", true, runs(900, 0.01), runs(901, 0.01)},
		{"read-storm", "sched_wakeup", "count", false, runs(27000, 0.1), runs(9000, 0.1)},
	}
	out := primaryBlock(t, ms)
	want := []string{"better files_per_s", "open   ops_per_s", "same   files_per_s", "mechanism counters", "better wakeups_per_release"}
	last := -1
	for _, w := range want {
		i := strings.Index(out, w)
		if i < 0 || i < last {
			t.Errorf("%q missing or out of the suite's order:\n%s", w, out)
		}
		last = i
	}
	if strings.Contains(out, "sched_wakeup") {
		t.Errorf("a derived counter in the primary block:\n%s", out)
	}
	if !strings.Contains(out, "-94.9% [-95.2%, -94.7%]") {
		t.Errorf("no interval for wake-ups per release:\n%s", out)
	}
}

func TestRunsLine(t *testing.T) {
	b, p := results([]metric{{"read-storm", "files_per_s", "files/s", true, runs(100, 0.3), runs(100, 0.3)}})
	b[0].Plan, p[0].Plan = stats.RuleBefore.String(), stats.RuleBefore.String()
	b[0].Stop, p[0].Stop = suites.StopMax, suites.StopMax
	c, err := judge.Compare(b, p, judge.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if got := RunsLine(c); got != "5 per kernel, interleaved; the maximum was reached before the primary metrics were settled (the rule runs 3 to 10)" {
		t.Errorf("runs line %q", got)
	}
	b[0].Plan, p[0].Plan, b[0].Stop, p[0].Stop = "", "", suites.StopFixed, suites.StopFixed
	c, _ = judge.Compare(b, p, judge.Options{})
	if got := RunsLine(c); got != "5 per kernel, interleaved" {
		t.Errorf("runs line %q", got)
	}
}

// A round the host was busy for is named in the notes; repeated ones are
// counted.
func TestNotesBusyRounds(t *testing.T) {
	b, p := results([]metric{{"read-storm", "files_per_s", "files/s", true, runs(100, 0.01), runs(100, 0.01)}})
	busy := &suites.HostLoad{Busy: 0.62}
	quiet := &suites.HostLoad{Busy: 0.03}
	b[0].Rounds = []suites.Round{{N: 1, Before: quiet, After: busy, Busy: true, Repeated: true}, {N: 1, Before: quiet, After: quiet}}
	p[0].Rounds = []suites.Round{{N: 1, Before: busy, After: quiet, Busy: true}}
	c, err := judge.Compare(b, p, judge.Options{})
	if err != nil {
		t.Fatal(err)
	}
	notes := strings.Join(Notes(c), "\n")
	for _, want := range []string{"1 round was repeated because the host was busy around it.",
		"cache-contention round 1 on patched ran while the host was busy (62% and 3% of its CPU time before and after)."} {
		if !strings.Contains(notes, want) {
			t.Errorf("notes lack %q:\n%s", want, notes)
		}
	}
}

// The host's calibration is said in milliseconds: it takes about ten, and
// a reply's times are read as multiples of it.
func TestNotesCalibration(t *testing.T) {
	b, p := results([]metric{{"read-storm", "files_per_s", "files/s", true, runs(100, 0.01), runs(100, 0.01)}})
	b[0].Calibration = &suites.Calibration{What: "gunzip of 8 MiB on the host", Seconds: 0.01234, Repeats: 3}
	c, err := judge.Compare(b, p, judge.Options{})
	if err != nil {
		t.Fatal(err)
	}
	want := "The host's calibration before the rounds (gunzip of 8 MiB on the host) took 12.3 ms, the best of 3."
	if notes := strings.Join(Notes(c), "\n"); !strings.Contains(notes, want) {
		t.Errorf("notes lack %q:\n%s", want, notes)
	}
}

// The primary block's legend names the words the table uses, and says why
// a row can read "same" beside a 95% interval clear of zero: the interval
// is the metric's own, the call is made after the family's correction.
func TestPrimaryLegend(t *testing.T) {
	legend := func(statPatched float64) string {
		t.Helper()
		return primaryBlock(t, []metric{
			{"read-storm", "files_per_s", "files/s", true, runs(21, 0.01), runs(40, 0.01)},
			{"mixed", "ops_per_s", "ops/s", true, runs(180, 0.01), runs(180, 0.01)},
			{"stat-storm", "files_per_s", "files/s", true, runs(900, 0.01), runs(statPatched, 0.01)},
		})
	}
	// +1.6%: significant alone (p below 0.05), not after Holm over three.
	out := legend(914.5)
	if !strings.Contains(out, "+1.6") || !strings.Contains(out, "same   files_per_s") {
		t.Fatalf("stat-storm's row is not the case under test (+1.6%%, same):\n%s", out)
	}
	for _, w := range []string{"reach: the smallest change", "better, worse: a change, called.",
		"same: the interval lies within ±10%", "clear of zero can still read same"} {
		if !strings.Contains(strings.Join(strings.Fields(out), " "), w) {
			t.Errorf("legend without %q:\n%s", w, out)
		}
	}
	if strings.Contains(out, "open:") || strings.Contains(out, "guard:") {
		t.Errorf("the legend explains a word the table does not use:\n%s", out)
	}
	// An interval around zero needs no such sentence.
	if out := legend(900); strings.Contains(out, "clear of zero") {
		t.Errorf("the sentence on intervals clear of zero, with none:\n%s", out)
	}
	// Every row a change called: no legend at all.
	if out := primaryBlock(t, []metric{{"read-storm", "files_per_s", "files/s", true, runs(21, 0.01), runs(40, 0.01)}}); strings.Contains(out, "better, worse:") {
		t.Errorf("a legend under a table of changes called:\n%s", out)
	}
}

// primaryBlock is WritePrimary's block for the two kernels' metrics ms,
// checked to fit 80 columns.
func primaryBlock(t *testing.T, ms []metric) string {
	t.Helper()
	b, p := results(ms)
	c, err := judge.Compare(b, p, judge.Options{})
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := WritePrimary(&buf, c); err != nil {
		t.Fatal(err)
	}
	checkWidth(t, buf.String())
	return buf.String()
}
