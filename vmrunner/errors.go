package vmrunner

import (
	"bytes"
	"errors"
	"fmt"

	"github.com/patchbot/patchbot/blame"
)

// BootError is the kernel's fault: it panicked, oopsed, hung past a
// deadline, or never reported ready. Excerpt is the console around the
// first sign of trouble, to quote to the patch's author.
type BootError struct {
	Reason  string // e.g. "kernel panic", "oops", "no agent ready within 60s"
	Excerpt []byte
	// Limit, when set, says that the kernel failed twice at a limit its
	// base kept within in the same VM (Compared): "time", "the VM's".
	Limit string `json:",omitempty"`
}

// Blame: a kernel that does not boot is at fault (which kernel, base or
// patched, is for the caller to say with blame.On).
func (e *BootError) Blame() blame.Blame { return blame.Patch }

func (e *BootError) Error() string {
	if len(e.Excerpt) == 0 {
		return "boot failure: " + e.Reason
	}
	return fmt.Sprintf("boot failure: %s:\n%s", e.Reason, bytes.TrimRight(e.Excerpt, "\n"))
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
