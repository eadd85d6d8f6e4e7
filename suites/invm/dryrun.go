package invm

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/patchbot/patchbot/suites"
	"github.com/patchbot/patchbot/vmrunner"
	"github.com/patchbot/patchbot/vmrunner/proto"
)

// DryRunTester measures nothing: it is the measuring stage of a dry run
// (the config's dry_run:, with images.DryRun building nothing). It boots
// both "kernels" on the fake VM backend (the real agent protocol, no VM)
// and runs its rounds interleaved, base, patched, …, each taking Round,
// in which the "guest" answers with made-up samples: the patched kernel
// wakes a ninth as many tasks per cache release, with 2% of noise. The
// outcome's backend is "dry-run" and its accelerator DryRunAccel, which
// the reply's test setup shows.
type DryRunTester struct {
	Round time.Duration
}

// DryRunAccel is a dry run's accelerator, as the reply says it.
const DryRunAccel = "dry run (nothing built or booted)"

// Test runs the spec's rounds: the fewest its plan's Stop allows.
func (d DryRunTester) Test(ctx context.Context, s Spec) (*Outcome, error) {
	pool, err := vmrunner.New("fake", vmrunner.Config{Limit: 2, RunSuite: func(ctx context.Context, req proto.Request) (any, error) {
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(d.Round):
		}
		wpr := 9.6
		if req.Params[suites.ParamKernel] == "patched" {
			wpr = 1.1
		}
		noise := float64(req.Round%3-1) * 0.02
		return &suites.Result{Suite: req.Suite, Profile: req.Profile, Kernel: req.Params[suites.ParamKernel],
			Accel: "none", CPUs: DefaultCPUs, MemMiB: DefaultMemMiB, Samples: []suites.Sample{{Suite: req.Suite,
				Workload: "read-storm", Metric: "wakeups_per_release", Unit: "count", Round: req.Round, Value: wpr * (1 + noise)}}}, nil
	}})
	if err != nil {
		return nil, err
	}
	defer pool.Close()
	sides := []struct {
		label string
		path  string
	}{{"base", s.Base.BzImage}, {"patched", s.Patched.BzImage}}
	var guests []vmrunner.Instance
	for _, side := range sides {
		vm, err := pool.Create(ctx, vmrunner.Spec{Name: side.label, Kernel: side.path, CPUs: DefaultCPUs, MemMiB: DefaultMemMiB})
		if err != nil {
			return nil, fmt.Errorf("dry run: creating the %s VM: %w", side.label, err)
		}
		defer vm.Close()
		if _, err := vm.Boot(ctx); err != nil {
			return nil, fmt.Errorf("dry run: booting the %s VM: %w", side.label, err)
		}
		guests = append(guests, vm)
	}
	n, _ := s.Plan.stop().Bounds()
	rounds := make([][]*suites.Result, 2)
	for r := 1; r <= max(n, 1); r++ {
		for i, side := range sides {
			raw, err := guests[i].Do(ctx, proto.Request{Op: proto.OpRunSuite, Suite: s.Suite, Profile: s.Plan.Profile, Round: r,
				Params: map[string]string{suites.ParamKernel: side.label}}, nil)
			if err != nil {
				return nil, err
			}
			var res suites.Result
			if err := json.Unmarshal(raw, &res); err != nil {
				return nil, err
			}
			rounds[i] = append(rounds[i], &res)
		}
		if s.Plan.Progress != nil {
			fmt.Fprintf(s.Plan.Progress, "dry run: round %d of %d a side\n", r, max(n, 1))
		}
	}
	return &Outcome{Base: suites.Merge(rounds[0]), Patched: suites.Merge(rounds[1]), Backend: "dry-run", Accel: DryRunAccel,
		CPUs: DefaultCPUs, MemMiB: DefaultMemMiB}, nil
}
