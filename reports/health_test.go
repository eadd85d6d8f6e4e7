package reports

import (
	"os"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/patchbot/patchbot/blame"
	"github.com/patchbot/patchbot/judge"
	"github.com/patchbot/patchbot/suites"
	"github.com/patchbot/patchbot/vmrunner"
	"github.com/patchbot/patchbot/vmrunner/report"
)

// healthRun is a run of the seed's thread, finished, with nothing
// measured yet.
func healthRun(t *testing.T) *Run {
	t.Helper()
	run, err := LoadRun("testdata/runs/boot-panic")
	if err != nil {
		t.Fatal(err)
	}
	run.Failure = nil
	run.Finished = time.Date(2026, 12, 5, 12, 0, 0, 0, time.UTC)
	return run
}

// sampleReport is a real kernel's report (vmrunner/report/testdata), its
// guilty frame decoded as Decode would.
func sampleReport(t *testing.T, name string) *report.Report {
	t.Helper()
	data, err := os.ReadFile("../vmrunner/report/testdata/" + name + ".console")
	if err != nil {
		t.Fatal(err)
	}
	reps := report.Parse(data)
	if len(reps) == 0 {
		t.Fatalf("%s: no report", name)
	}
	r := reps[0]
	r.Frames[r.Guilty].File, r.Frames[r.Guilty].Line = "fs/squashfs/super.c", 640
	r.Decoded = "DWARF of the patched kernel's vmlinux: 1 of 9 frames placed"
	return r
}

func checkColumns(t *testing.T, body string) {
	t.Helper()
	for i, line := range strings.Split(body, "\n") {
		if n := utf8.RuneCountInString(line); n > MaxColumns {
			t.Errorf("line %d is %d columns: %q", i+1, n, line)
		}
	}
}

// The patched kernel's BUG in a round: the reply quotes the report and
// its decoded trace, names the suite and round and what the base did, and
// is no throughput verdict.
func TestReplyKernelTrouble(t *testing.T) {
	run := healthRun(t)
	err := blame.On(blame.Patched, &vmrunner.BootError{Reason: "kernel BUG", Report: sampleReport(t, "bug-verbose"),
		Op: "run-suite", Suite: "cache-contention", Round: 2, After: 51 * time.Second})
	run.Record(Findings{Failed: err})
	f := run.Failure
	if f == nil || f.Stage != judge.StageKernel || f.Trouble == nil || f.Trouble.Kind != "kernel BUG" {
		t.Fatalf("failure %+v", f)
	}
	reply, rerr := Render(run, testOptions)
	if rerr != nil {
		t.Fatal(rerr)
	}
	prose := strings.Join(strings.Fields(reply.Body), " ")
	for _, want := range []string{
		"The kernel with the patch applied reported a kernel BUG in round 2 of cache-contention",
		"kernel BUG in squashfs_sample (fs/squashfs/super.c:640)",
		"The base kernel ran rounds 1 to 2 of cache-contention clean",
		"no throughput or latency was compared",
	} {
		if !strings.Contains(prose, want) {
			t.Errorf("reply lacks %q:\n%s", want, reply.Body)
		}
	}
	for _, want := range []string{
		"| [    1.688215] kernel BUG at fs/squashfs/super.c:640!",
		"| RIP: squashfs_sample+0x2b/0x12f fs/squashfs/super.c:640  <-- guilty",
		"do_one_initcall+0x79/0x16a",
	} {
		if !strings.Contains(reply.Body, want) {
			t.Errorf("reply lacks %q:\n%s", want, reply.Body)
		}
	}
	for _, deny := range []string{"does not boot", "Improvement", "No change", "%change"} {
		if strings.Contains(reply.Body, deny) {
			t.Errorf("reply says %q", deny)
		}
	}
	checkColumns(t, reply.Body)
}

// A run that measured, with a warning the base never printed and the
// changed functions' calls: the warning leads, is listed beside the table
// counted on both kernels, and the reach names each function.
func TestReplyWarningsAndExercised(t *testing.T) {
	run, err := LoadRun("testdata/runs/squashfs-improvement")
	if err != nil {
		t.Fatal(err)
	}
	w := sampleReport(t, "warn-once")
	kw := suites.KernelWarning{Title: w.Title, Where: w.Where(), Count: 3, Report: w.Lines, Trace: w.Trace()}
	run.Patched[0].Warnings = []suites.KernelWarning{kw}
	run.Patched[0].Calls = []suites.Calls{
		{Func: "squashfs_cache_get", Count: 123456, Rounds: 5, Lines: []string{"fs/squashfs/cache.c:91-92"}, Inlined: []string{"squashfs_cache_wake_block"}},
		{Func: "squashfs_cache_wake_function", Count: 0, Rounds: 5, Lines: []string{"fs/squashfs/cache.c:60-75"}},
		{Func: "squashfs_fill_super", Count: 2, Rounds: 5, Code: "differs"},
		{Func: "squashfs_cache_put", Count: 120000, Rounds: 5, Lines: []string{"fs/squashfs/cache.c:180"}, Code: "same"},
		{Func: "squashfs_readahead", Err: "no such function in this kernel", Code: "gone"},
	}
	run.Base[0].Calls = []suites.Calls{{Func: "squashfs_cache_get", Count: 120001, Rounds: 5}, {Func: "squashfs_readahead", Count: 5150, Rounds: 5}}
	run.Record(Findings{})
	if len(run.KernelWarnings) != 1 || !run.KernelWarnings[0].New() || run.Exercised == nil || len(run.Exercised.Funcs) != 5 {
		t.Fatalf("warnings %+v, reach %+v", run.KernelWarnings, run.Exercised)
	}
	reply, rerr := Render(run, testOptions)
	if rerr != nil {
		t.Fatal(rerr)
	}
	prose := strings.Join(strings.Fields(reply.Body), " ")
	lead := strings.Index(prose, "Kernel warnings: the patched kernel printed 1 warning the base kernel did not")
	verdict := strings.Index(prose, "Improvement:")
	if lead < 0 || verdict < 0 || lead > verdict {
		t.Errorf("the new warning does not lead the verdict:\n%s", reply.Body)
	}
	for _, want := range []string{
		"WARNING in squashfs_sample (new) 0 3",
		"squashfs_cache_get 123456 calls (base: 120001)",
		"holds the inlined squashfs_cache_wake_block",
		"squashfs_cache_wake_function 0 calls not exercised",
		"squashfs_fill_super 2 calls no changed line in it, but its compiled code differs from the base's (a changed macro, constant or type it uses)",
		"changed: fs/squashfs/cache.c:180; its compiled code is the base's",
		"squashfs_readahead removed (base: 5150 calls) the patched kernel has no such function",
		"| [ 1.174888] squashfs: sample warning",
	} {
		if !strings.Contains(prose, want) {
			t.Errorf("reply lacks %q:\n%s", want, reply.Body)
		}
	}
	checkColumns(t, reply.Body)
}

// A "No change" on code no measured round ran says so in its first
// sentence.
func TestReplyNoChangeOnCodeNeverRun(t *testing.T) {
	run, err := LoadRun("testdata/runs/aa-no-change")
	if err != nil {
		t.Fatal(err)
	}
	for i := range run.Patched {
		run.Patched[i].Calls = []suites.Calls{{Func: "squashfs_readahead", Rounds: 5}}
	}
	run.Record(Findings{})
	reply, rerr := Render(run, testOptions)
	if rerr != nil {
		t.Fatal(rerr)
	}
	first := strings.SplitN(strings.Join(strings.Fields(strings.SplitN(reply.Body, "\n\n", 3)[1]), " "), ". ", 2)[0]
	if !strings.Contains(first, "No change, on code the suites never ran") || !strings.Contains(first, "squashfs_readahead") {
		t.Errorf("the first sentence %q does not say the changed code never ran", first)
	}
}

// A "No change" on a series that changes no machine code says so in its
// first sentence: whether the changed lines' functions compile to the
// base's code, or no function differs at all.
func TestReplyNoChangeOnNoMachineCode(t *testing.T) {
	for name, calls := range map[string][]suites.Calls{
		"the lines' functions the same": {{Func: "squashfs_readahead", Count: 40, Rounds: 5, Lines: []string{"fs/squashfs/file.c:556"}, Code: "same"}},
		"no function differs":           nil,
	} {
		run, err := LoadRun("testdata/runs/aa-no-change")
		if err != nil {
			t.Fatal(err)
		}
		for i := range run.Patched {
			run.Patched[i].Calls = calls
			if calls == nil {
				run.Patched[i].Notes = map[string]string{"changed-functions": suites.NoCompiledChange}
			}
		}
		run.Record(Findings{})
		reply, rerr := Render(run, testOptions)
		if rerr != nil {
			t.Fatal(rerr)
		}
		first := strings.SplitN(strings.Join(strings.Fields(strings.SplitN(reply.Body, "\n\n", 3)[1]), " "), ". ", 2)[0]
		if !strings.HasPrefix(first, "No change, on a series that changes no machine code") {
			t.Errorf("%s: the first sentence %q does not say the series changed no machine code", name, first)
		}
	}
	// One function that differs, and the lead is the plain verdict's.
	run, err := LoadRun("testdata/runs/aa-no-change")
	if err != nil {
		t.Fatal(err)
	}
	for i := range run.Patched {
		run.Patched[i].Calls = []suites.Calls{{Func: "squashfs_fill_super", Count: 2, Rounds: 5, Code: "differs"}}
	}
	run.Record(Findings{})
	reply, _ := Render(run, testOptions)
	if strings.Contains(reply.Body, "changes no machine code") {
		t.Errorf("a series whose code differs reads as one that changes none:\n%s", reply.Body)
	}
}

// A patched kernel that hung without a report of its own (a flock that
// spins on cpu_relax() under instruction-counted time, which keeps the
// watchdogs quiet): the reply names the hang and where the host's
// samples found the vCPUs, quotes the busy vCPU's stack decoded, and
// cuts the console to its last lines.
func TestReplyKernelHangSampled(t *testing.T) {
	run := healthRun(t)
	var console strings.Builder
	for i := 0; i < 40; i++ {
		console.WriteString("[    0.9] boot line\n")
	}
	console.WriteString("[    1.8] clocksource: Switched to clocksource tsc\n")
	spin := report.Frame{Func: "locks_lock_inode_wait", Offset: 0xc5, Size: 0xe3, Context: "RIP", File: "fs/locks.c", Line: 2060,
		Inlined: []report.Inline{{Func: "cpu_relax", File: "arch/x86/include/asm/vdso/processor.h", Line: 19}, {Func: "flock_lock_inode_wait", File: "fs/locks.c", Line: 2039}}}
	stack := &report.Report{Title: "a hang in locks_lock_inode_wait", Time: -1, Guilty: 0, Decoded: "DWARF of vmlinux: 3 of 3 frames placed",
		Frames: []report.Frame{spin, {Func: "__do_sys_flock", Offset: 0x146, Size: 0x174, File: "fs/locks.c", Line: 2130}}}
	top := spin
	sampled := &report.Sampled{Samples: 10, Every: 100 * time.Millisecond, GuestClock: 4 * time.Millisecond, HostClock: 920 * time.Millisecond,
		CPUs: []report.CPUSeen{{CPU: 0, Busy: 10, Top: &top, TopCount: 10}, {CPU: 1, Busy: 9, Halted: 1, Top: &top, TopCount: 9}}, Stack: stack}
	err := blame.On(blame.Patched, &suites.TogetherError{Round: 1, OthersDone: true, Err: &vmrunner.BootError{
		Reason:  "hang: no answer to run-suite locks round 1, nor progress, within 3m0s; the base kernel's same request took 16s",
		Excerpt: []byte(console.String()), Sampled: sampled, Op: "run-suite", Suite: "locks", Round: 1, After: 191 * time.Second}})
	run.Record(Findings{Failed: err})
	tr := run.Failure.Trouble
	if tr == nil || tr.Kind != "hang" || tr.Where != "locks_lock_inode_wait (fs/locks.c:2060)" || len(tr.Report) != 12 ||
		len(tr.CPUs) != 3 || tr.CPUs[0] != "vCPU 0: busy in the kernel in 10 (10 at locks_lock_inode_wait+0xc5/0xe3 fs/locks.c:2060), of 10 samples" {
		t.Fatalf("trouble %+v", tr)
	}
	reply, rerr := Render(run, testOptions)
	if rerr != nil {
		t.Fatal(rerr)
	}
	prose := strings.Join(strings.Fields(reply.Body), " ")
	for _, want := range []string{
		"The kernel with the patch applied hung in round 1 of locks: a vCPU busy in locks_lock_inode_wait (fs/locks.c:2060); no answer to run-suite locks round 1",
		"The base kernel ran round 1 of locks clean, at the same time",
		"read from the hypervisor 10 times, 100ms apart, when the hang was called",
		"vCPU 0: busy in the kernel in 10 (10 at",
		"vCPU 1: busy in the kernel in 9 (9 at",
		"the guest's clock (jiffies) advanced 4ms while the host's",
		"The guest's clock ran at 1/230 of the host's while it hung: at that rate the 20 s of its own time that the kernel's soft-lockup watchdog waits for would take 1h16m40s of the host's.",
		"flock_lock_inode_wait fs/locks.c:2039 [inline]",
		"__do_sys_flock+0x146/0x174 fs/locks.c:2130",
	} {
		if !strings.Contains(prose, want) {
			t.Errorf("reply lacks %q:\n%s", want, reply.Body)
		}
	}
	if strings.Count(reply.Body, "boot line") != 11 {
		t.Errorf("the console is quoted with %d of its 40 boot lines, want its last 12 lines:\n%s", strings.Count(reply.Body, "boot line"), reply.Body)
	}
	checkColumns(t, reply.Body)
}

// The reply's VM line states the instruction-counted clock's rate, at the
// default shift and at any other.
func TestReplyStatesTheClock(t *testing.T) {
	for clock, want := range map[string]string{"icount": "instruction-counted time: 4 ns a guest instruction",
		"icount:0": "instruction-counted time: 1 ns a guest instruction", "host": "TCG, no KVM (times are slow and noisy"} {
		run, err := LoadRun("testdata/runs/squashfs-improvement")
		if err != nil {
			t.Fatal(err)
		}
		run.CPUs, run.MemMiB, run.Accel, run.Clock = 2, 1024, "tcg", clock
		run.Record(Findings{})
		reply, err := Render(run, testOptions)
		if err != nil {
			t.Fatal(err)
		}
		if prose := strings.Join(strings.Fields(reply.Body), " "); !strings.Contains(prose, want) {
			t.Errorf("%s: the reply lacks %q:\n%s", clock, want, reply.Body)
		}
	}
}
