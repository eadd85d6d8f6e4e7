// Package report reads a kernel's console into typed reports: every form
// of trouble a Linux 6.1 kernel prints (oops, BUG, WARNING, soft and hard
// lockups, hung tasks, RCU stalls, panics) becomes a Report with its kind,
// a title, the frames of its trace and the frame to blame, read once as
// the console arrives (Reader). Decode (decode.go) then turns the frames
// into function and file:line from the kernel's own debug information.
//
// It is the shape of syzkaller's pkg/report, cut to the kernels patchbot
// builds: one architecture (x86-64), the frame-pointer unwinder, no
// sanitizers. Parsing is pure: console text in, reports out; nothing here
// touches the disk but Decode, which reads the vmlinux it is given.
package report

import (
	"fmt"
	"strings"
)

// Kind is the form of trouble a report is. Its values are stable words,
// shown in replies and stored with runs.
type Kind string

const (
	// KindBUG is a BUG() or BUG_ON() hit: "kernel BUG at file:line!".
	KindBUG Kind = "kernel BUG"
	// KindOops is a fault in the kernel: a NULL pointer dereference, a
	// page fault, a general protection fault, an invalid opcode, or any
	// other "BUG: ..." the kernel prints before it kills the task.
	KindOops Kind = "oops"
	// KindWarning is a WARN_ON() or WARN() hit: the kernel goes on.
	KindWarning Kind = "WARNING"
	// KindSoftLockup is a CPU that ran kernel code for 20 s without
	// scheduling.
	KindSoftLockup Kind = "soft lockup"
	// KindHardLockup is a CPU that ran with interrupts off past the NMI
	// watchdog's threshold.
	KindHardLockup Kind = "hard lockup"
	// KindHungTask is a task in D state that has not run for the hung
	// task timeout.
	KindHungTask Kind = "hung task"
	// KindRCUStall is an RCU grace period that did not end: a CPU that
	// does not pass through a quiescent state (a loop with preemption or
	// interrupts off).
	KindRCUStall Kind = "RCU stall"
	// KindPanic is a panic with no oops before it ("Kernel panic - not
	// syncing: VFS: Unable to mount root fs").
	KindPanic Kind = "kernel panic"
)

// Fatal says whether trouble of this kind ends a round: everything but a
// warning, after which the kernel runs on as users' kernels do. A
// transient kind ends it only once confirmed (Reader).
func (k Kind) Fatal() bool { return k != KindWarning && k != "" }

// Transient says whether a report of this kind may be the host's doing
// rather than the kernel's: the soft-lockup watchdog and the RCU stall
// detector time a CPU against the wall clock, and under TCG a guest's
// wall clock runs at the host's pace while its vCPU may get a fraction of
// a busy host's core: a kernel path of two seconds of CPU can look like a
// 21-second stall (seen on this host: "rcu_sched self-detected stall" in
// the hist triggers' allocation, tracing_map_init, on a base kernel at
// load 17). Such a report ends the round only when the kernel reports
// trouble again within TransientWindow (a CPU that is really stuck is
// reported again: the soft-lockup watchdog every 20-30 s, RCU at its
// next check, or as the hung tasks it causes); one that passes is
// counted with the warnings.
func (k Kind) Transient() bool { return k == KindSoftLockup || k == KindRCUStall }

// TransientWindow is how long, in the kernel's time, a transient report
// waits for the report that confirms it.
const TransientWindow = 90.0

// Report is one piece of trouble as the console showed it.
type Report struct {
	Kind Kind `json:"kind"`
	// Title names the trouble and where it happened, as the kernel test
	// robot and syzbot title theirs: "kernel BUG in squashfs_cache_get",
	// "WARNING in squashfs_read_data", "INFO: task hung in
	// squashfs_cache_get". Reports of the same bug have the same title.
	Title string `json:"title"`
	// Header is the line that began the report, without its time stamp.
	Header string `json:"header"`
	// Location is the file:line the kernel itself printed (BUG and
	// WARNING, with CONFIG_DEBUG_BUGVERBOSE), "" when it printed none.
	Location string `json:"location,omitempty"`
	// Message is what a WARN() or panic() said, if anything.
	Message string `json:"message,omitempty"`
	// Time is the kernel's time stamp of the header (seconds since
	// boot), -1 when the line had none.
	Time float64 `json:"time"`
	// Frames are the frames of the trace: the faulting instruction (RIP)
	// first when the kernel printed one, then the call trace, innermost
	// first.
	Frames []Frame `json:"frames,omitempty"`
	// Guilty is the index in Frames of the frame to blame: the first
	// reliable frame outside the kernel's reporting, scheduling, locking
	// and interrupt machinery; -1 when there is none.
	Guilty int `json:"guilty"`
	// Lines are the report's console lines as received (time stamps
	// kept), control characters escaped and long lines cut: what a reply
	// quotes.
	Lines []string `json:"lines"`
	// Corrupted says why the report is not whole ("no call trace", "cut
	// at 200 lines", "the console ended within it"), "" when it is.
	Corrupted string `json:"corrupted,omitempty"`
	// Decoded says where the frames' files and lines came from ("DWARF of
	// /path/vmlinux"), or why they could not be had; "" before Decode.
	Decoded string `json:"decoded,omitempty"`
	// Again is the header of the later report that confirmed a transient
	// one (Kind.Transient), with its time stamp: "[   48.186330] watchdog:
	// BUG: soft lockup - CPU#0 stuck for 44s! [sqfs-sample:29]".
	Again string `json:"again,omitempty"`

	complete bool // ended by its own end marker, a new report or End
	trace    int  // 0: no "Call Trace:" yet; 1: in it; 2: it ended
	ctx      string
}

// Frame is one frame of a trace, as "func+0x70/0x243" names it.
type Frame struct {
	Func   string `json:"func"`
	Offset uint64 `json:"offset"`
	Size   uint64 `json:"size"`
	// Module is the module the function is in, "" for the kernel.
	Module string `json:"module,omitempty"`
	// Unreliable: the unwinder printed the frame with "? ", an address
	// found on the stack that the frame chain does not vouch for.
	Unreliable bool `json:"unreliable,omitempty"`
	// Context is the part of the trace the frame is in: "RIP" for the
	// faulting instruction, else "TASK", "IRQ", "SOFTIRQ", "NMI" or "".
	Context string `json:"context,omitempty"`

	// File and Line are the source line of the frame's address, decoded
	// on the host (Decode): for the RIP frame the instruction itself, for
	// a call trace frame the call. When calls were inlined at the
	// address, File and Line are the innermost one's, and Inlined lists
	// the functions they were inlined into, innermost first.
	File    string   `json:"file,omitempty"`
	Line    int      `json:"line,omitempty"`
	Inlined []Inline `json:"inlined,omitempty"`
}

// Inline is a function a frame's code was inlined into, and the line in
// it of the inlined call.
type Inline struct {
	Func string `json:"func"`
	File string `json:"file"`
	Line int    `json:"line"`
}

// String is the frame as a trace prints it, with its source line when
// decoded: "squashfs_cache_get+0x70/0x243 fs/squashfs/cache.c:71".
func (f Frame) String() string {
	s := fmt.Sprintf("%s+0x%x/0x%x", f.Func, f.Offset, f.Size)
	if f.Size == 0 && f.Offset == 0 {
		s = f.Func // an address no function symbol holds (Sample)
	}
	if f.Module != "" {
		s += " [" + f.Module + "]"
	}
	if f.File != "" {
		s += fmt.Sprintf(" %s:%d", f.File, f.Line)
	}
	return s
}

// Source is where the frame's code is: "fs/squashfs/cache.c:71", with
// the functions it was inlined into ("(inlined into f at file:line)");
// "" before Decode.
func (f Frame) Source() string {
	if f.File == "" {
		return ""
	}
	s := fmt.Sprintf("%s:%d", f.File, f.Line)
	for _, in := range f.Inlined {
		s += fmt.Sprintf(" (inlined into %s at %s:%d)", in.Func, in.File, in.Line)
	}
	return s
}

// Trace is the frame as a decoded trace quotes it, the functions inlined
// at its address first, as syzbot prints them: "__list_add
// include/linux/list.h:69 [inline]" lines, then "squashfs_cache_get+0x70/
// 0x243 fs/squashfs/cache.c:71".
func (f Frame) Trace() []string {
	var out []string
	for _, in := range f.Inlined {
		out = append(out, fmt.Sprintf("%s %s:%d [inline]", in.Func, in.File, in.Line))
	}
	s := f.String()
	if f.Unreliable {
		s = "? " + s
	}
	return append(out, s)
}

// Trace is the report's frames as a decoded trace quotes them (Frame.Trace),
// the guilty frame's last line marked with "<-- guilty".
func (r *Report) Trace() []string {
	var out []string
	for i, f := range r.Frames {
		lines := f.Trace()
		if f.Context == "RIP" {
			lines[len(lines)-1] = "RIP: " + lines[len(lines)-1]
		}
		if i == r.Guilty {
			lines[len(lines)-1] += "  <-- guilty"
		}
		out = append(out, lines...)
	}
	return out
}

// GuiltyFrame is the frame to blame, or nil.
func (r *Report) GuiltyFrame() *Frame {
	if r == nil || r.Guilty < 0 || r.Guilty >= len(r.Frames) {
		return nil
	}
	return &r.Frames[r.Guilty]
}

// Where is the report's place in the source: the guilty frame's decoded
// line when there is one, else the location the kernel printed, else the
// guilty function.
func (r *Report) Where() string {
	if f := r.GuiltyFrame(); f != nil && f.File != "" {
		return fmt.Sprintf("%s (%s:%d)", f.Func, f.File, f.Line)
	}
	if r.Location != "" {
		if f := r.GuiltyFrame(); f != nil {
			return fmt.Sprintf("%s (%s)", f.Func, r.Location)
		}
		return r.Location
	}
	if f := r.GuiltyFrame(); f != nil {
		return f.Func
	}
	return ""
}

// Complete says whether the report has ended: by its end marker, the
// next report, or the end of the console (Reader.End).
func (r *Report) Complete() bool { return r.complete }

// Text is the report's lines, one a line.
func (r *Report) Text() string { return strings.Join(r.Lines, "\n") }
