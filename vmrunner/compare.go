package vmrunner

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/patchbot/patchbot/internal/inert"
)

// Blame by comparison, for boots. A patched kernel can make its VM look
// broken: break the agent's channel, make QEMU fail (a kernel too large
// for its address space), or hang until the boot's deadline. A VM that
// fails is the infrastructure's and is retried, not mailed; a hang is the
// kernel's. When the base kernel booted in a VM of the same shape on the
// same host, neither is left to chance: the patched kernel is booted once
// more (the caller does it, suites/invm), and when it fails again,
// Compared makes the failure the kernel's, saying which limit and what the
// base did under it.

// Recheck reports whether err, a boot's failure, is one to boot again and
// compare with the base: the VM failed once it ran the kernel (QEMU
// exited with an error, the agent's channel broke) or the kernel gave
// no answer within the boot's deadline. A panic, an oops or a kernel that
// stopped its VM are the kernel's at once; the caller's cancellation is
// nobody's.
func Recheck(err error) bool {
	var be *BootError
	var ie *InfraError
	switch {
	case err == nil:
		return false
	case errors.As(err, &ie):
		return ie.running // a VM that never started says nothing of the kernel
	case errors.As(err, &be):
		return strings.HasPrefix(be.Reason, "hang:")
	}
	return false
}

// Compared is the patched kernel's second failure (err), after base
// booted in a VM of the shape s: a *BootError that names the limit the
// kernel did not keep within and what the base did. It returns err itself
// when err is not one to compare (Recheck).
func Compared(err error, s Spec, base Info) error {
	if !Recheck(err) {
		return err
	}
	s.setDefaults()
	shape := fmt.Sprintf("%d vCPUs, %d MiB, %s to boot", s.CPUs, s.MemMiB, s.BootTimeout)
	baseDid := fmt.Sprintf("the base kernel was ready in %s in a VM of the same shape (%s)",
		base.BootDuration.Round(time.Millisecond), shape)
	var be *BootError
	if errors.As(err, &be) {
		return &BootError{
			Reason:  fmt.Sprintf("%s, twice; %s", be.Reason, baseDid),
			Excerpt: be.Excerpt,
			Limit:   "time",
		}
	}
	var ie *InfraError
	errors.As(err, &ie)
	return &BootError{
		Reason:  fmt.Sprintf("its VM failed twice (%s); %s", firstLine(ie.Error()), baseDid),
		Excerpt: inert.Bytes(ie.Output),
		Limit:   "the VM's",
	}
}

func firstLine(s string) string {
	s, _, _ = strings.Cut(strings.TrimSpace(s), "\n")
	if len(s) > 300 {
		s = s[:300] + "..."
	}
	return s
}
