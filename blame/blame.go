// Package blame says whose fault a failure is, so that every stage can
// answer that question with a type rather than with wording.
//
// The rule is written here once: an error is the patch's fault only when a
// stage proved it (a series that does not apply, a kernel that does not
// build, boot or survive its suite) and it happened on the patched kernel.
// Everything else — a missing tool, a full disk, a VM that would not start,
// a cancelled context, an error nobody classified, and any failure of the
// base kernel — is the infrastructure's: retried, logged, never mailed to an
// author as theirs.
package blame

import "errors"

// Blame is whose fault a failure is. It is stored with a job and shown in
// JSON and on pages, so its values are stable words.
type Blame string

const (
	// None: nothing failed.
	None Blame = ""
	// Patch: the series is at fault; the author is told, with the evidence.
	Patch Blame = "patch"
	// Infra: patchbot or its machine is at fault; the job is retried.
	Infra Blame = "infra"
)

// Blamer is implemented by errors that know whose fault they are: each
// stage's patch errors (images.ApplyError, images.BuildError,
// vmrunner.BootError, vmrunner.GuestError) and infrastructure errors.
type Blamer interface {
	Blame() Blame
}

// Of returns whose fault err is. The outermost error in err's chain that
// says decides, so that a wrapper (KernelError) can overrule what it wraps;
// an error that says nothing is the infrastructure's.
func Of(err error) Blame {
	if err == nil {
		return None
	}
	var b Blamer
	if errors.As(err, &b) {
		return b.Blame()
	}
	return Infra
}

// IsPatch reports whether err is the patch's fault.
func IsPatch(err error) bool { return Of(err) == Patch }

// Kernel names one side of a comparison.
type Kernel string

const (
	Base    Kernel = "base"
	Patched Kernel = "patched"
)

// KernelError is a failure on one kernel. The base kernel is patchbot's
// choice, so its failure is the infrastructure's whatever it wraps.
type KernelError struct {
	Kernel Kernel
	Err    error
}

func (e *KernelError) Error() string { return string(e.Kernel) + " kernel: " + e.Err.Error() }
func (e *KernelError) Unwrap() error { return e.Err }

// Blame is the wrapped error's on the patched kernel, and Infra on any
// other.
func (e *KernelError) Blame() Blame {
	if e.Kernel != Patched {
		return Infra
	}
	if b := Of(e.Err); b != None {
		return b
	}
	return Infra
}

// On says that err happened on kernel k; nil stays nil.
func On(k Kernel, err error) error {
	if err == nil {
		return nil
	}
	return &KernelError{Kernel: k, Err: err}
}

// KernelOf is the kernel err happened on, or "" when it names none.
func KernelOf(err error) Kernel {
	var k *KernelError
	if errors.As(err, &k) {
		return k.Kernel
	}
	return ""
}
