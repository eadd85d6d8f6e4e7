package judge

import (
	"errors"
	"fmt"
	"strings"

	"github.com/patchbot/patchbot/suites"
	"github.com/patchbot/patchbot/vmrunner"
)

// Kernel trouble: what a real kernel reports (an oops, a BUG, a lockup, a
// hung task, an RCU stall, a panic) or a hang of the patched kernel, read
// by vmrunner from the console (vmrunner/report). It ends the run: the
// outcome is the trouble, not a throughput verdict. It is the patch's only
// when the base kernel ran the same work clean: the sides boot and
// prepare at once and run their rounds interleaved, the base's first, so
// a patched kernel's trouble in round n comes after the base's round n;
// on instruction-counted time they run each round at once, and the base's
// round n ran as far as the patched kernel's did (suites.TogetherError
// says whether it had finished); a base kernel in trouble is the
// infrastructure's (blame.KernelError) and never reaches a reply.

// Trouble is the patched kernel's trouble as a reply quotes it, in the
// run's record (Failure.Trouble): the field a reader of runs (the
// dashboard, the daemon's outcome classes) looks at for kernel trouble.
type Trouble struct {
	// Kind is the report's kind ("oops", "kernel BUG", "WARNING", "soft
	// lockup", "hard lockup", "hung task", "RCU stall", "kernel panic"),
	// or "hang" when the kernel reported nothing and outlived the base's
	// time (vmrunner.Pace), or "stopped" when its VM ended.
	Kind string `json:"kind"`
	// Title names it as the kernel test robot does: "kernel BUG in
	// squashfs_cache_get"; for a hang, what was not answered.
	Title string `json:"title"`
	// Where is the guilty function and its decoded file:line.
	Where string `json:"where,omitempty"`
	// Suite, Round and Op say when it came: the request ("run-suite",
	// "prepare-suite"; "" at boot), its suite and round (0: none).
	Suite string `json:"suite,omitempty"`
	Round int    `json:"round,omitempty"`
	Op    string `json:"op,omitempty"`
	// After is how long after the request (or the launch) it was seen,
	// in seconds.
	After float64 `json:"after_s,omitempty"`
	// Base says what the base kernel did over the same work: the reason
	// the trouble is the patch's.
	Base string `json:"base"`
	// Report is the report's console lines (a hang's: the console's last
	// lines); Trace its frames decoded to function and file:line, one a
	// line, the guilty one marked; Decoded where the lines came from.
	Report  []string `json:"report,omitempty"`
	Trace   []string `json:"trace,omitempty"`
	Decoded string   `json:"decoded,omitempty"`
	// Corrupted says why the report is not whole, "" when it is.
	Corrupted string `json:"corrupted,omitempty"`
	// CPUs, for a hang, is where each vCPU was in the samples the host
	// took of it (report.Sampled.Lines); then Trace is the stack of the
	// vCPU busy in the kernel, walked by its frame pointers, and Where
	// its guilty frame.
	CPUs []string `json:"cpus,omitempty"`
	// Sampled says how: "10 times, 100ms apart".
	Sampled string `json:"sampled,omitempty"`
	// ClockRate is how fast the guest's clock ran against the host's
	// over the samples (report.Sampled.GuestClock / HostClock); 0 when
	// it was not read.
	ClockRate float64 `json:"clock_rate,omitempty"`
}

// hangConsoleLines is how much of the console a hang's reply quotes when
// the host's samples say where the kernel was.
const hangConsoleLines = 12

// StageKernel is a run that stopped at the patched kernel's trouble
// during a request (a suite's preparation or round); trouble at boot stays
// StageBoot. Both carry Failure.Trouble.
const StageKernel Stage = "kernel"

// TroubleOf is the kernel trouble in err, nil when err is none: a
// vmrunner.BootError that carries the kernel's report, a hang of a
// request, or a VM that stopped during one.
func TroubleOf(err error) *Trouble {
	var be *vmrunner.BootError
	if !errors.As(err, &be) {
		return nil
	}
	var together *suites.TogetherError
	errors.As(err, &together)
	t := &Trouble{Suite: be.Suite, Round: be.Round, Op: be.Op, After: be.After.Seconds(), Base: baseDid(be, together)}
	switch r := be.Report; {
	case r != nil:
		t.Kind, t.Title, t.Where = string(r.Kind), r.Title, r.Where()
		t.Report, t.Trace, t.Decoded, t.Corrupted = r.Lines, r.Trace(), r.Decoded, r.Corrupted
	case strings.HasPrefix(be.Reason, "hang:"):
		t.Kind, t.Title = "hang", strings.TrimSpace(strings.TrimPrefix(be.Reason, "hang:"))
		t.Report = strings.Split(strings.TrimRight(string(be.Excerpt), "\n"), "\n")
		if s := be.Sampled; s != nil {
			t.CPUs, t.Sampled = s.Lines(), fmt.Sprintf("%d times, %s apart", s.Samples, s.Every)
			if s.HostClock > 0 {
				t.ClockRate = s.GuestClock.Seconds() / s.HostClock.Seconds()
			}
			if st := s.Stack; st != nil {
				t.Where, t.Trace, t.Decoded, t.Corrupted = st.Where(), st.Trace(), st.Decoded, st.Corrupted
				// The samples say where it hangs: of a console
				// silent since, its last lines are enough.
				t.Report = t.Report[max(0, len(t.Report)-hangConsoleLines):]
			}
		}
	case be.Op != "":
		t.Kind, t.Title = "stopped", be.Reason
		t.Report = strings.Split(strings.TrimRight(string(be.Excerpt), "\n"), "\n")
	default:
		return nil // a boot failure without a report: the boot's evidence says it
	}
	return t
}

// baseDid says what the base kernel did over the work the patched kernel
// failed at, from where the trouble came and, for rounds the sides ran at
// once (together), whether the base had finished its round by then.
func baseDid(be *vmrunner.BootError, together *suites.TogetherError) string {
	switch {
	case be.Round > 0 && together != nil:
		whole := "round 1"
		if be.Round > 1 {
			whole = fmt.Sprintf("rounds 1 to %d", be.Round)
		}
		if together.OthersDone {
			return fmt.Sprintf("the base kernel ran %s of %s clean, at the same time, in a VM of the same shape", whole, be.Suite)
		}
		before := ""
		switch {
		case be.Round == 2:
			before = fmt.Sprintf("ran round 1 of %s clean and ", be.Suite)
		case be.Round > 2:
			before = fmt.Sprintf("ran rounds 1 to %d of %s clean and ", be.Round-1, be.Suite)
		}
		return fmt.Sprintf("the base kernel %sran round %d of %s at the same time, in a VM of the same shape, clean for as long as the patched kernel ran it (the rounds run at once: the base's was stopped with it)", before, be.Round, be.Suite)
	case be.Op == "" && be.Limit != "":
		return "" // the boot's comparison with the base is in its reason
	case be.Op == "":
		return "the base kernel booted clean in a VM of the same shape, at the same time"
	case be.Round > 0:
		rounds := "round 1"
		if be.Round > 1 {
			rounds = fmt.Sprintf("rounds 1 to %d", be.Round)
		}
		return fmt.Sprintf("the base kernel ran %s of %s clean, in a VM of the same shape: the rounds are interleaved, the base's first", rounds, be.Suite)
	}
	return fmt.Sprintf("the base kernel ran %s of %s clean, in a VM of the same shape, at the same time", be.Op, be.Suite)
}

// Headline is the trouble in one line: "kernel BUG in
// squashfs_cache_get (fs/squashfs/cache.c:71)".
func (t *Trouble) Headline() string {
	if t.Kind == "hang" && t.Where != "" {
		return fmt.Sprintf("a vCPU busy in %s; %s", t.Where, t.Title)
	}
	s := t.Title
	if t.Where != "" && !strings.Contains(t.Title, t.Where) {
		if fn, _, ok := strings.Cut(t.Where, " ("); ok && strings.HasSuffix(t.Title, " in "+fn) {
			s += strings.TrimPrefix(t.Where, fn) // the title names the function: add its line
		} else {
			s += " at " + t.Where
		}
	}
	return s
}

// When says when the trouble came: "in round 2 of cache-contention",
// "while cache-contention was prepared", "at boot".
func (t *Trouble) When() string {
	switch {
	case t.Op == "":
		return "at boot"
	case t.Round > 0:
		return fmt.Sprintf("in round %d of %s", t.Round, t.Suite)
	case t.Suite != "":
		return fmt.Sprintf("while %s was prepared", t.Suite)
	}
	return "during " + t.Op
}
