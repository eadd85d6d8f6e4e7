// Package bisect traces a series' change to the patch it comes from: when
// the whole series (or the range measured) changed a primary metric, it
// measures prefixes of the series against the same A side, with the same
// suite and fewer rounds, in a binary search for the first prefix that
// carries the change. The metric it follows is the one the series changed
// most (judge.KeyChange); whether a prefix carries the change, and whether
// one patch does, is its own rule (result.go: Step.Carries, conclude).
//
// It is a stage of its own, as syzkaller's pkg/bisect is: a Config in, a
// Run over what tests a pair of kernels, the rule and its Result together,
// its own tests; the pipeline only calls it. It sits after judging and
// before the reply: the reply (package reports) presents its Result.
package bisect

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"

	"github.com/patchbot/patchbot/blame"
	"github.com/patchbot/patchbot/images"
	"github.com/patchbot/patchbot/judge"
	"github.com/patchbot/patchbot/judge/stats"
	"github.com/patchbot/patchbot/suites"
	"github.com/patchbot/patchbot/suites/invm"
)

// Config is one bisection: the series' own measurement, the kernels to
// search and how to test them.
type Config struct {
	// Tester measures a prefix against the A side.
	Tester invm.ABTester
	// Base and Patched are the whole series' (or range's) results, judged
	// with Options: the change the search follows.
	Base, Patched []suites.Result
	Options       judge.Options
	// A is the A side; Prefixes[k] the build of patches 1..k (nil where it
	// failed). First and Last are the patches measured (1-based).
	A           *images.Build
	Prefixes    []*images.Build
	First, Last int
	// Titles are the patches' titles, to name each step.
	Titles []string
	// Profile and Runs are the series' own; a step runs StepRuns(Runs).
	Profile string
	Runs    int
	// RunDir, when set, keeps each step's results (bisect-N-base.json,
	// bisect-N-patched.json).
	RunDir string
	// Progress gets the steps' boots and rounds, and an infrastructure
	// failure that ended the search.
	Progress io.Writer
	// OnStep is told each measurement as it starts; nil for none.
	OnStep func(name string)
}

// StepRuns is the runs a side at each step: half the series' own, at
// least the fewest a test can judge.
func StepRuns(runs int) int {
	return min(max(stats.MinSamples, (runs+1)/2), max(runs, stats.MinSamples))
}

// Run searches the series' prefixes for the patch its change comes from:
// at most ceil(log2 n) measurements for n patches. It returns nil when the
// series changed nothing to trace. A failure of a step ends the search,
// not the run (Bisection.Stopped says why): the series' own result
// stands. The error is the context's alone.
func Run(ctx context.Context, cfg Config) (*Result, error) {
	c, err := judge.Compare(cfg.Base, cfg.Patched, cfg.Options)
	if err != nil {
		return nil, nil // the reply reports it
	}
	key, ok := judge.KeyChange(c)
	if !ok {
		return nil, nil
	}
	if whole := key.LogRatio(); whole == 0 || math.IsNaN(whole) {
		return nil, nil
	}
	n := len(cfg.Titles)
	bi := newResult(key, cfg.Last, title(cfg.Titles, cfg.Last))
	runs := StepRuns(cfg.Runs)
	plan := invm.FixedPlan(cfg.Profile, runs, cfg.Progress)
	lo, hi, stopped, err := search(cfg.Prefixes, n, cfg.First-1, cfg.Last, func(m int) (bool, string, error) {
		if cfg.OnStep != nil {
			cfg.OnStep(fmt.Sprintf("bisect: %s with patches 1-%d", key.Suite, m))
		}
		out, err := cfg.Tester.Test(ctx, invm.Spec{Suite: key.Suite, Plan: plan, Base: cfg.A, Patched: cfg.Prefixes[m]})
		bi.Measurements++
		if err != nil {
			if ctx.Err() != nil {
				return false, "", ctx.Err()
			}
			if err = invm.Reblame(err, cfg.A.Series > 0); blame.IsPatch(err) {
				return false, fmt.Sprintf("%d/%d fails: %s", m, n, judge.FailureOf(err).Detail), nil
			}
			if cfg.Progress != nil {
				fmt.Fprintf(cfg.Progress, "bisect: %v\n", err)
			}
			return false, "an infrastructure failure (kept in the log)", nil
		}
		if cfg.RunDir != "" {
			for side, r := range map[string]*suites.Result{"base": out.Base, "patched": out.Patched} {
				if data, err := json.MarshalIndent(r, "", "  "); err == nil {
					os.WriteFile(filepath.Join(cfg.RunDir, fmt.Sprintf("bisect-%d-%s.json", m, side)), data, 0o600)
				}
			}
		}
		sc, err := judge.Compare([]suites.Result{*out.Base}, []suites.Result{*out.Patched}, cfg.Options)
		step, found := Step{}, false
		if err == nil {
			step, found = bi.stepOf(sc, m, title(cfg.Titles, m), runs)
		}
		if !found {
			return false, fmt.Sprintf("%d/%d did not measure %s", m, n, key.Metric), nil
		}
		bi.add(step)
		return step.Carries(), "", nil
	})
	if err != nil {
		return nil, err
	}
	bi.Stopped = stopped
	bi.conclude(lo, hi, cfg.First)
	return bi, nil
}

// search halves the series between prefix lo, which does not carry what
// is sought (below the first patch tested: the A side), and prefix hi,
// which does, testing the prefix between them with probe until they are
// neighbours: at most ceil(log2 (hi-lo)) probes. A prefix that did not
// build ends the search, as does a probe's stop (why, "" to go on); err
// is the probe's, and ends it too.
func search(prefixes []*images.Build, n, lo, hi int, probe func(m int) (carries bool, stop string, err error)) (int, int, string, error) {
	for hi-lo > 1 {
		m := (lo + hi) / 2
		if prefixes[m] == nil {
			return lo, hi, fmt.Sprintf("%d/%d does not build", m, n), nil
		}
		carries, stop, err := probe(m)
		if err != nil || stop != "" {
			return lo, hi, stop, err
		}
		if carries {
			hi = m
		} else {
			lo = m
		}
	}
	return lo, hi, "", nil
}

// title is patch i's (1-based) title, "" when it has none.
func title(titles []string, i int) string {
	if i >= 1 && i <= len(titles) {
		return titles[i-1]
	}
	return ""
}
