package invm

import (
	"context"
	"errors"
	"fmt"

	"github.com/patchbot/patchbot/blame"
	"github.com/patchbot/patchbot/images"
	"github.com/patchbot/patchbot/suites"
)

// ABTester measures one suite on two kernels, rounds interleaved: Tester,
// or a fake in tests.
type ABTester interface {
	Test(ctx context.Context, s Spec) (*Outcome, error)
}

var _ ABTester = (*Tester)(nil)

// Job is what one test measures on its two kernels.
type Job struct {
	// Suites are the suites asked for; none: those the touched Files
	// select (suites.Choose).
	Suites []string
	Files  []string
	// Plan is how each suite is measured (its Progress gets a line per
	// boot and round).
	Plan Plan
	// Base and Patched are the kernels: A and B.
	Base, Patched *images.Build
	// BaseIsPrefix says that the A side carries the series' first patches
	// (patches=M-N with M > 1), not the base alone: its failure is then
	// the patch's.
	BaseIsPrefix bool
	// OnSuite is told each suite as it starts, and how many there are;
	// nil for none.
	OnSuite func(name string, n int)
}

// Measured is each suite's results on both kernels, in the job's order,
// and the VM they were measured in.
type Measured struct {
	Base, Patched []suites.Result
	Accel         string
	Clock         string // "host" or "icount" (Outcome.Clock)
	CPUs, MemMiB  int
}

// Measure runs the job's suites one after the other, each A against B. A
// failure that is the patch's (a kernel that does not boot, a suite that
// fails in its guest) comes back as it is, blamed on its kernel, with the
// suites measured before it; any other error says which suite it stopped.
func Measure(ctx context.Context, t ABTester, j Job) (*Measured, error) {
	names, err := suites.Choose(j.Suites, j.Files, j.Plan.Profile)
	if err != nil {
		return nil, err
	}
	m := &Measured{}
	for _, name := range names {
		if j.OnSuite != nil {
			j.OnSuite(name, len(names))
		}
		out, err := t.Test(ctx, Spec{Suite: name, Plan: j.Plan, Base: j.Base, Patched: j.Patched})
		err = Reblame(err, j.BaseIsPrefix)
		if blame.IsPatch(err) {
			return m, err
		}
		if err != nil {
			return nil, fmt.Errorf("running suite %s: %w", name, err)
		}
		m.Base = append(m.Base, *out.Base)
		m.Patched = append(m.Patched, *out.Patched)
		m.Accel, m.Clock, m.CPUs, m.MemMiB = out.Accel, out.Clock, out.CPUs, out.MemMiB
	}
	return m, nil
}

// Reblame puts a failure of the A side on the patch when the A side is a
// prefix of the series (patches=M-N with M > 1), not the base.
func Reblame(err error, baseIsPrefix bool) error {
	var ke *blame.KernelError
	if err == nil || !baseIsPrefix || !errors.As(err, &ke) || ke.Kernel != blame.Base {
		return err
	}
	return blame.On(blame.Patched, ke.Err)
}
