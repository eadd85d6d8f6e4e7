package report

import (
	"bufio"
	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// A sample is a console a real kernel printed, in testdata/*.console,
// with what must be read from it in "# key: value" lines at its top (a
// blank line ends them), as syzkaller's pkg/report/testdata has its
// TITLE: lines:
//
//	# kind: kernel BUG            the first fatal report's (or, with none, the first warning's)
//	# title: kernel BUG in f
//	# location: fs/x.c:12         the file:line the kernel printed
//	# guilty: f                   the guilty frame's function
//	# frames: 9                   at least this many frames
//	# warnings: 1                 warnings in the console
//	# corrupted: true             the report is not whole
//	# source: how it was made
type sample struct {
	name    string
	want    map[string]string
	console []byte
}

func loadSamples(t *testing.T) []sample {
	t.Helper()
	files, err := filepath.Glob("testdata/*.console")
	if err != nil || len(files) == 0 {
		t.Fatalf("no samples in testdata: %v", err)
	}
	var out []sample
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		s := sample{name: strings.TrimSuffix(filepath.Base(f), ".console"), want: map[string]string{}}
		sc := bufio.NewScanner(bytes.NewReader(data))
		n := 0
		for sc.Scan() {
			line := sc.Text()
			n += len(line) + 1
			if line == "" {
				break
			}
			k, v, ok := strings.Cut(strings.TrimPrefix(line, "# "), ": ")
			if !ok || !strings.HasPrefix(line, "# ") {
				t.Fatalf("%s: header line %q", f, line)
			}
			s.want[k] = v
		}
		s.console = data[min(n, len(data)):]
		out = append(out, s)
	}
	return out
}

func TestSamples(t *testing.T) {
	for _, s := range loadSamples(t) {
		t.Run(s.name, func(t *testing.T) {
			// Read as the console arrives, line by line, to its end.
			var r Reader
			for _, line := range bytes.Split(s.console, []byte("\n")) {
				r.Line(line)
			}
			r.End()
			first := r.Fatal()
			ws, _ := r.Warnings()
			warnings := 0
			for _, w := range ws {
				if w.Report.Kind == KindWarning {
					warnings += w.Count
				}
			}
			if first == nil && len(ws) > 0 {
				first = ws[0].Report
			}
			if w, ok := s.want["warnings"]; ok && strconv.Itoa(warnings) != w {
				t.Errorf("%d warnings, want %s", warnings, w)
			}
			if first == nil {
				if s.want["kind"] != "" {
					t.Fatalf("no report, want %s", s.want["kind"])
				}
				return
			}
			check := func(key, got string) {
				if want, ok := s.want[key]; ok && got != want {
					t.Errorf("%s = %q, want %q", key, got, want)
				}
			}
			check("kind", string(first.Kind))
			check("title", first.Title)
			check("location", first.Location)
			check("message", first.Message)
			guilty := ""
			if f := first.GuiltyFrame(); f != nil {
				guilty = f.Func
			}
			check("guilty", guilty)
			check("corrupted", strconv.FormatBool(first.Corrupted != ""))
			if w, ok := s.want["frames"]; ok {
				n, _ := strconv.Atoi(w)
				if len(first.Frames) < n {
					t.Errorf("%d frames, want at least %d: %+v", len(first.Frames), n, first.Frames)
				}
			}
			if len(first.Lines) == 0 || !strings.Contains(first.Text(), first.Header) {
				t.Errorf("the report's lines lack its header %q", first.Header)
			}
			if first.Kind.Transient() && first.Again == "" {
				t.Errorf("a transient %s made fatal without the report that confirmed it", first.Kind)
			}
			// Parse finds the same report among all of them.
			found := false
			for _, p := range Parse(s.console) {
				found = found || p.Title == first.Title && len(p.Frames) == len(first.Frames)
			}
			if !found {
				t.Errorf("Parse did not find %q", first.Title)
			}
		})
	}
}

// A transient report (a soft lockup, an RCU stall) that the kernel does
// not confirm with another report within TransientWindow passes: the
// round goes on, and it is counted with the warnings; one confirmed is the
// fatal report, the cause.
func TestTransientReports(t *testing.T) {
	stall := func(ts string) []string {
		return []string{
			"[" + ts + "] rcu: INFO: rcu_sched self-detected stall on CPU",
			"[" + ts + "] RIP: 0010:slob_alloc.isra.0+0xfb/0x1d1",
			"[" + ts + "] Call Trace:",
			"[" + ts + "]  <TASK>",
			"[" + ts + "]  tracing_map_init+0xbc/0x223",
			"[" + ts + "]  </TASK>",
			"[" + ts + "] loop0: detected capacity change from 0 to 32264",
		}
	}
	var r Reader
	for _, l := range stall("   40.540681") {
		r.Line([]byte(l))
	}
	if r.FatalKind() != "" {
		t.Fatalf("a lone stall is fatal: %q", r.FatalKind())
	}
	ws, _ := r.Warnings()
	if len(ws) != 1 || ws[0].Report.Title != "INFO: rcu detected stall in slob_alloc" {
		t.Fatalf("the passing stall is not counted: %+v", ws)
	}
	// Another report 100 s later is not its confirmation.
	for _, l := range stall("  140.540681") {
		r.Line([]byte(l))
	}
	if r.FatalKind() != "" {
		t.Fatalf("two stalls 100 s apart are fatal")
	}
	// One 30 s after that is.
	r.Line([]byte("[  170.1] INFO: task agent:94 blocked for more than 30 seconds."))
	f := r.Fatal()
	if f == nil || f.Kind != KindRCUStall || !strings.Contains(f.Again, "blocked for more than") {
		t.Fatalf("fatal %+v, want the stall confirmed by the hung task", f)
	}
	if ws, _ := r.Warnings(); len(ws) != 1 || ws[0].Count != 1 {
		t.Errorf("the confirmed stall is still counted as a passing one: %+v", ws)
	}
}

// A console that floods costs bounded memory: a report keeps MaxLines
// lines, the warnings MaxWarnings titles, and the rest is counted.
func TestReaderBounds(t *testing.T) {
	var r Reader
	for i := 0; i < 500; i++ {
		r.Line([]byte("[    1.0] ------------[ cut here ]------------"))
		r.Line([]byte("[    1.0] WARNING: CPU: 0 PID: 1 at fs/x.c:" + strconv.Itoa(i) + " f" + strconv.Itoa(i) + "+0x1/0x2"))
		r.Line([]byte("[    1.0] ---[ end trace 0000000000000000 ]---"))
	}
	ws, more := r.Warnings()
	if len(ws) != MaxWarnings || more != 500-MaxWarnings {
		t.Errorf("%d warnings kept, %d more; want %d and %d", len(ws), more, MaxWarnings, 500-MaxWarnings)
	}
	r.Line([]byte("[    2.0] BUG: soft lockup - CPU#0 stuck for 22s! [x:1]"))
	r.Line([]byte("[    2.0] Call Trace:"))
	for i := 0; i < 10000; i++ {
		r.Line([]byte("[    2.0]  f+0x1/0x2"))
	}
	r.End()
	f := r.Fatal()
	if f == nil || len(f.Lines) > MaxLines || f.Corrupted == "" || !f.Complete() {
		t.Fatalf("a report of 10,000 frames: %d lines kept, corrupted %q", len(f.Lines), f.Corrupted)
	}
	// The same warning again is counted, not kept again (the soft
	// lockup, made fatal when the console ended, is not counted).
	r.Line([]byte("[    3.0] ------------[ cut here ]------------"))
	r.Line([]byte("[    3.0] WARNING: CPU: 0 PID: 1 at fs/x.c:0 f0+0x1/0x2"))
	r.Line([]byte("[    3.0] ---[ end trace 0000000000000000 ]---"))
	ws, _ = r.Warnings()
	if ws[0].Count != 2 {
		t.Errorf("the first warning counted %d times, want 2", ws[0].Count)
	}
}

// Lines a guest prints to hide or fake trouble are escaped in what a
// report keeps; a line that only mentions a sign far from a header is
// nothing.
func TestReaderQuotesControlCharacters(t *testing.T) {
	reps := Parse([]byte("[    1.0] Kernel panic - not syncing: \x1b]0;owned\x07 done\n"))
	if len(reps) != 1 || strings.ContainsAny(reps[0].Text(), "\x1b\x07") {
		t.Fatalf("reports %+v", reps)
	}
	if reps := Parse([]byte("[    1.0] squashfs: all fine, no WARNING here\n[    1.1] the CPU: is fine\n")); len(reps) != 0 {
		t.Errorf("reports in a clean console: %+v", reps)
	}
}

// Every header form of the kinds, as 6.1 prints them, each alone.
func TestHeaders(t *testing.T) {
	for _, tc := range []struct{ line, kind string }{
		{"rcu: INFO: rcu_sched detected stalls on CPUs/tasks:", "RCU stall"},
		{"rcu: INFO: rcu_sched self-detected stall on CPU", "RCU stall"},
		{"rcu: INFO: rcu_sched detected expedited stalls on CPUs/tasks: { 0-.... } 5428 jiffies s: 9 root: 0x1/.", "RCU stall"},
		{"INFO: task agent:94 blocked for more than 30 seconds.", "hung task"},
		{"watchdog: BUG: soft lockup - CPU#0 stuck for 22s! [agent:94]", "soft lockup"},
		{"NMI watchdog: Watchdog detected hard LOCKUP on cpu 1", "hard lockup"},
		{"kernel BUG at fs/squashfs/cache.c:71!", "kernel BUG"},
		{"WARNING: CPU: 1 PID: 1 at fs/x.c:12 f+0x1/0x2", "WARNING"},
		{"BUG: kernel NULL pointer dereference, address: 0000000000000008", "oops"},
		{"BUG: unable to handle page fault for address: ffffc90010000000", "oops"},
		{"BUG: scheduling while atomic: agent/94/0x00000002", "oops"},
		{"general protection fault, probably for non-canonical address 0xdead000000000100: 0000 [#1] SMP", "oops"},
		{"invalid opcode: 0000 [#1] SMP", "oops"},
		{"divide error: 0000 [#1] SMP", "oops"},
		{"Kernel panic - not syncing: VFS: Unable to mount root fs on unknown-block(0,0)", "kernel panic"},
		{"squashfs: WARNING: not a WARN splat", ""},
		{"rcu: INFO: nothing stalled here", ""},
	} {
		kind, _, _ := header(tc.line)
		if string(kind) != tc.kind {
			t.Errorf("header(%q) = %q, want %q", tc.line, kind, tc.kind)
		}
	}
}
