// Package bisect traces a series' change to the patch it comes from: when
// the whole series (or the range measured) changed a primary metric, it
// measures prefixes of the series against the same A side, with the same
// suite and fewer rounds, in a binary search for the first prefix that
// carries the change. Whether a prefix carries it, and whether one patch
// does, is the comparison's rule (reports: KeyChange, Bisection.StepOf,
// Carries, Conclude); this package only searches.
//
// It is a stage of its own, as syzkaller's pkg/bisect is: a Config in, a
// Run over what tests a pair of kernels, its own tests; the pipeline only
// calls it.
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
	"github.com/patchbot/patchbot/reports"
	"github.com/patchbot/patchbot/reports/stats"
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
	Options       reports.Options
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
func Run(ctx context.Context, cfg Config) (*reports.Bisection, error) {
	c, err := reports.Compare(cfg.Base, cfg.Patched, cfg.Options)
	if err != nil {
		return nil, nil // the reply reports it
	}
	key, ok := reports.KeyChange(c)
	if !ok {
		return nil, nil
	}
	if whole := key.LogRatio(); whole == 0 || math.IsNaN(whole) {
		return nil, nil
	}
	n := len(cfg.Titles)
	bi := reports.NewBisection(key, cfg.Last, reports.Title(cfg.Titles, cfg.Last, ""))
	runs := StepRuns(cfg.Runs)
	lo, hi := cfg.First-1, cfg.Last
	for hi-lo > 1 {
		m := (lo + hi) / 2
		if cfg.Prefixes[m] == nil {
			bi.Stopped = fmt.Sprintf("%d/%d does not build", m, n)
			break
		}
		if cfg.OnStep != nil {
			cfg.OnStep(fmt.Sprintf("bisect: %s with patches 1-%d", key.Suite, m))
		}
		out, err := cfg.Tester.Test(ctx, invm.Spec{Suite: key.Suite, Profile: cfg.Profile, Runs: runs,
			Base: cfg.A, Patched: cfg.Prefixes[m], Progress: cfg.Progress})
		bi.Measurements++
		if err != nil {
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			if err = invm.Reblame(err, cfg.A.Series > 0); blame.IsPatch(err) {
				bi.Stopped = fmt.Sprintf("%d/%d fails: %s", m, n, reports.FailureOf(err).Detail)
			} else {
				bi.Stopped = "an infrastructure failure (kept in the log)"
				if cfg.Progress != nil {
					fmt.Fprintf(cfg.Progress, "bisect: %v\n", err)
				}
			}
			break
		}
		if cfg.RunDir != "" {
			for side, r := range map[string]*suites.Result{"base": out.Base, "patched": out.Patched} {
				if data, err := json.MarshalIndent(r, "", "  "); err == nil {
					os.WriteFile(filepath.Join(cfg.RunDir, fmt.Sprintf("bisect-%d-%s.json", m, side)), data, 0o600)
				}
			}
		}
		sc, err := reports.Compare([]suites.Result{*out.Base}, []suites.Result{*out.Patched}, cfg.Options)
		step, found := reports.BisectStep{}, false
		if err == nil {
			step, found = bi.StepOf(sc, m, reports.Title(cfg.Titles, m, ""), runs)
		}
		if !found {
			bi.Stopped = fmt.Sprintf("%d/%d did not measure %s", m, n, key.Metric)
			break
		}
		bi.Add(step)
		if step.Carries() {
			hi = m
		} else {
			lo = m
		}
	}
	bi.Conclude(lo, hi, cfg.First)
	return bi, nil
}
