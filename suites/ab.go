package suites

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"time"

	"github.com/patchbot/patchbot/blame"
	"github.com/patchbot/patchbot/vmrunner/proto"
)

// Guest runs requests on a booted VM's agent; vmrunner.Instance is one.
// Declared here so that this package does not depend on vmrunner (it is
// linked into the agent).
type Guest interface {
	Do(ctx context.Context, req proto.Request, onEvent func(proto.Event)) (json.RawMessage, error)
}

// Side is one kernel of a comparison: a label ("base", "patched") and the
// guest that runs it.
type Side struct {
	Label string
	// Kernel says who is to blame when the side fails (base: the
	// infrastructure; patched: the patch). Empty blames nobody in
	// particular: a failure is the infrastructure's.
	Kernel blame.Kernel
	Guest  Guest
	Accel  string // from the boot, for the Result
	// Params are extra request parameters, e.g. ParamImage = "/dev/vda".
	Params map[string]string
}

// RunAB runs rounds of cfg on every side, interleaved (A B A B …, so that
// drift hits both sides alike), and returns one Result per side with the
// samples of all rounds. Progress gets a line per round and side.
func RunAB(ctx context.Context, cfg *Config, sides []Side, rounds int, progress io.Writer) ([]*Result, error) {
	if len(sides) == 0 {
		return nil, errors.New("no kernels to run")
	}
	if rounds < 1 {
		return nil, fmt.Errorf("rounds = %d: want at least 1", rounds)
	}
	if progress == nil {
		progress = io.Discard
	}
	out := make([]*Result, len(sides))
	start := time.Now()
	for n := 1; n <= rounds; n++ {
		for i, s := range sides {
			params := map[string]string{ParamKernel: s.Label, ParamAccel: s.Accel}
			for k, v := range s.Params {
				params[k] = v
			}
			req := proto.Request{
				ID: fmt.Sprintf("%s-%s-%d", cfg.Suite, s.Label, n), Op: proto.OpRunSuite,
				Suite: cfg.Suite, Profile: cfg.Profile, Round: n, Params: params,
			}
			t0 := time.Now()
			raw, err := s.Guest.Do(ctx, req, nil)
			if err != nil {
				if s.Kernel != "" {
					err = blame.On(s.Kernel, err)
				}
				return out, fmt.Errorf("%s round %d on %s: %w", cfg.Suite, n, s.Label, err)
			}
			var res Result
			if err := json.Unmarshal(raw, &res); err != nil {
				return out, fmt.Errorf("%s round %d on %s: decoding the guest's result: %w", cfg.Suite, n, s.Label, err)
			}
			fmt.Fprintf(progress, "%s round %d/%d %-8s %6.1fs  (%s elapsed)\n",
				cfg.Suite, n, rounds, s.Label, time.Since(t0).Seconds(), time.Since(start).Round(time.Second))
			out[i] = merge(out[i], &res)
		}
	}
	for _, r := range out {
		r.Notes["rounds"] = strconv.Itoa(rounds)
	}
	return out, nil
}

// merge appends round's samples to acc (nil: round becomes acc).
func merge(acc, round *Result) *Result {
	if round.Notes == nil {
		round.Notes = map[string]string{}
	}
	if acc == nil {
		return round
	}
	acc.Samples = append(acc.Samples, round.Samples...)
	for _, m := range round.Missing {
		dup := false
		for _, have := range acc.Missing {
			dup = dup || have.Workload == m.Workload && have.Metric == m.Metric
		}
		if !dup {
			acc.Missing = append(acc.Missing, m)
		}
	}
	for k, v := range round.Notes {
		if _, ok := acc.Notes[k]; !ok {
			acc.Notes[k] = v
		}
	}
	acc.Finished = round.Finished
	return acc
}

// Merge combines the Results of successive rounds on one kernel, as RunAB
// does; --local uses it.
func Merge(rounds []*Result) *Result {
	var acc *Result
	for _, r := range rounds {
		acc = merge(acc, r)
	}
	return acc
}
