package vmrunner

import (
	"bytes"
	"errors"
	"fmt"
	"time"

	"github.com/patchbot/patchbot/blame"
	"github.com/patchbot/patchbot/vmrunner/proto"
	"github.com/patchbot/patchbot/vmrunner/report"
)

// BootError is the kernel's fault: it panicked, oopsed, locked up, hung
// past a deadline, or never reported ready, at boot or during a request.
// Excerpt is the console around the first sign of trouble, to quote to
// the patch's author.
type BootError struct {
	// Reason is the kind of trouble: a report.Kind ("oops", "kernel
	// BUG", "soft lockup", "hung task", "RCU stall", "kernel panic", ...)
	// when the kernel reported it, else what was seen ("hang: no answer
	// to run-suite within 5m0s", "the VM stopped running run-suite").
	Reason  string
	Excerpt []byte
	// Limit, when set, says that the kernel failed twice at a limit its
	// base kept within in the same VM (Compared): "time", "the VM's".
	Limit string `json:",omitempty"`
	// Report is the kernel's own report of the trouble, read from the
	// console, its trace decoded to function and file:line from the
	// kernel's vmlinux; nil when the kernel reported nothing (a hang, a
	// VM that stopped).
	Report *report.Report `json:",omitempty"`
	// Sampled, for a hang, is where the vCPUs were when it was called,
	// read from the hypervisor (monitor.go): nil when it could not be.
	Sampled *report.Sampled `json:",omitempty"`
	// Op is the request the trouble came during ("run-suite",
	// "prepare-suite"), "" at boot, and Suite and Round the suite and
	// round it ran; After is how long after the request (or the launch)
	// it was seen.
	Op    string        `json:",omitempty"`
	Suite string        `json:",omitempty"`
	Round int           `json:",omitempty"`
	After time.Duration `json:",omitempty"`
}

// at says during which request (none at boot) the trouble came, and how
// long after it began.
func (e *BootError) at(req proto.Request, since time.Time) {
	e.Op, e.Suite, e.Round = req.Op, req.Suite, req.Round
	e.After = time.Since(since).Round(time.Millisecond)
}

// Blame: a kernel that does not boot is at fault (which kernel, base or
// patched, is for the caller to say with blame.On).
func (e *BootError) Blame() blame.Blame { return blame.Patch }

func (e *BootError) Error() string {
	what := "boot failure: " + e.Reason
	switch {
	case e.Report != nil && e.Op != "":
		what = fmt.Sprintf("kernel trouble during %s: %s", e.Op, e.Report.Title)
	case e.Report != nil:
		what = "boot failure: " + e.Report.Title
	case e.Op != "":
		what = fmt.Sprintf("kernel trouble during %s: %s", e.Op, e.Reason)
	}
	if len(e.Excerpt) == 0 {
		return what
	}
	return fmt.Sprintf("%s:\n%s", what, bytes.TrimRight(e.Excerpt, "\n"))
}

// InfraError is ours: QEMU missing, libvirtd unreachable, the VM would not
// start, the channel broke while the kernel looked healthy. Retry it; never
// blame the patch for it.
type InfraError struct {
	Op  string // what was being done, e.g. "start qemu"
	Err error
	// Output is what the failing tool printed (QEMU's stderr), if any.
	Output []byte
	// running: the VM had started the kernel when it failed (QEMU
	// exited with an error, the channel broke): what a kernel can cause,
	// so compared with the base (compare.go).
	running bool
}

func (e *InfraError) Error() string {
	s := fmt.Sprintf("vm infrastructure: %s: %v", e.Op, e.Err)
	if out := bytes.TrimSpace(e.Output); len(out) > 0 {
		s += ": " + string(out)
	}
	return s
}

func (e *InfraError) Unwrap() error      { return e.Err }
func (e *InfraError) Blame() blame.Blame { return blame.Infra }

// GuestError is an "error" event from the agent: the request failed inside
// a healthy guest (a suite crashed, a command was not found).
type GuestError struct {
	Op  string
	Msg string
}

// Blame: a request that fails inside a healthy guest is the kernel's (the
// caller says which kernel).
func (e *GuestError) Blame() blame.Blame { return blame.Patch }

func (e *GuestError) Error() string { return fmt.Sprintf("guest %s: %s", e.Op, e.Msg) }

// IsBoot reports whether err is the kernel's fault.
func IsBoot(err error) bool {
	var b *BootError
	return errors.As(err, &b)
}

// IsInfra reports whether err is the infrastructure's fault.
func IsInfra(err error) bool {
	var i *InfraError
	return errors.As(err, &i)
}
