package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"math"
	"sort"
	"strings"
	"text/tabwriter"

	"github.com/patchbot/patchbot/judge"
	"github.com/patchbot/patchbot/judge/stats"
	"github.com/patchbot/patchbot/reports"
	"github.com/patchbot/patchbot/suites"
)

func init() {
	register(&command{
		name:       "suite reach",
		positional: true,
		summary:    "judge measured runs as the pipeline would: where each stopped, its verdict, each primary metric's reach",
		usage:      "suite reach [--rule RULE] [--aa] RESULTS.json...",
		desc: `Reads 'patchbot suite run --json' outputs of two kernels (base and patched;
for an A/A run, the same kernel on both sides), measured with a fixed number
of rounds, and judges each as the pipeline's sequential rule would have,
round by round (as 'patchbot panel' does): the look it stops at and why, the
outcome, and each primary metric's minimum detectable effect there (80%
power), against its suite's promise. With --aa every file is an A/A run, and
an outcome other than "no change" counts as a false positive. Then, per suite:
the runs, the median rounds a side, the median and the worst reach of each
primary metric, and the rounds' wall time as a multiple of the host's
calibration. With --aa and 3 runs or more, also how far the A/A changes
spread against their intervals: each change over its standard error as a
normal score (through its own t distribution), whose spread is 1 when the
intervals are right; a spread past what chance gives (95%) is variance the
rounds did not show, and is marked "the intervals are too narrow".`,
		example: `patchbot suite reach --aa aa/cache-contention-*.json`,
		flags: func(fs *flag.FlagSet) func(context.Context, []string) error {
			rule := fs.String("rule", stats.DefaultRule.String(), "the sequential `rule` to judge with")
			aa := fs.Bool("aa", false, "every file is an A/A run: any change is a false positive")
			return func(ctx context.Context, args []string) error {
				if len(args) == 0 {
					return usagef("want at least one results file")
				}
				r, err := stats.ParseRule(*rule)
				if err != nil {
					return usageError{err.Error()}
				}
				return runReach(stdout, args, r, *aa)
			}
		},
	})
}

// reachRun is one file judged.
type reachRun struct {
	file    string
	suite   string
	stop    string
	runs    int
	outcome judge.Outcome
	reach   map[string]float64 // primary metric → its minimum detectable effect at the stop
	// est: primary metric → the test's estimate at the stop, its
	// log-ratio with the standard error and degrees of freedom its
	// interval is built on; metrics without a log estimate are left out.
	est     map[string]stats.Estimate
	promise float64
	wall    float64 // seconds of the rounds, wall time (the longer side)
	calib   float64 // the host's calibration, seconds
}

func runReach(w io.Writer, files []string, rule stats.Rule, aa bool) error {
	runs, err := judgeReach(files, rule)
	if err != nil {
		return err
	}
	return printReach(w, runs, aa)
}

// judgeReach judges each file as the rule would have stopped it.
func judgeReach(files []string, rule stats.Rule) ([]reachRun, error) {
	var runs []reachRun
	for _, f := range files {
		rs, err := reports.ReadResults(f)
		if err != nil {
			return nil, err
		}
		var base, patched []suites.Result
		for _, r := range rs {
			if r.Kernel == "base" || len(base) == 0 && len(rs) == 2 && r.Kernel != "patched" {
				base = append(base, r)
			} else {
				patched = append(patched, r)
			}
		}
		if len(base) != 1 || len(patched) != 1 {
			return nil, fmt.Errorf("%s: want one result of each kernel, base and patched (have %d and %d)", f, len(base), len(patched))
		}
		c, err := judge.Replay(base, patched, rule, judge.Options{})
		if err != nil {
			return nil, fmt.Errorf("%s: %w", f, err)
		}
		suite := base[0].Suite
		j, _ := c.Judgement(suite)
		run := reachRun{file: f, suite: suite, runs: j.Runs, outcome: c.Outcome(), reach: map[string]float64{}, promise: j.SmallestEffect,
			est: map[string]stats.Estimate{}}
		switch {
		case j.Settled:
			run.stop = suites.StopSettled
		case j.Futile:
			run.stop = suites.StopFutile
		case j.Runs < rule.Max:
			run.stop = judge.StopTruncated
		default:
			run.stop = suites.StopMax
		}
		for _, r := range c.PrimaryRows() {
			name := r.Workload + " " + r.Metric
			if cell := r.Cell(); cell != "" {
				name += " [" + cell + "]"
			}
			run.reach[name] = r.Detectable
			if e := r.Estimate; e.Defined && e.Log && e.SE > 0 {
				run.est[name] = e
			}
		}
		for _, side := range []suites.Result{base[0], patched[0]} {
			secs := 0.0
			for _, rd := range side.Rounds {
				if rd.N <= j.Runs {
					secs += rd.Seconds
				}
			}
			run.wall = math.Max(run.wall, secs)
			if side.Calibration != nil {
				run.calib = side.Calibration.Seconds
			}
		}
		runs = append(runs, run)
	}
	return runs, nil
}

// printReach prints each run and, per suite, the runs, rounds, false
// positives (aa) and each primary metric's reach.
func printReach(w io.Writer, runs []reachRun, aa bool) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "file\tsuite\trounds\tstop\toutcome\twidest reach\t")
	for _, r := range runs {
		name, widest := "", 0.0
		for m, d := range r.reach {
			if d > widest {
				name, widest = m, d
			}
		}
		outcome := string(r.outcome)
		if aa && r.outcome != judge.NoChange {
			outcome += " (false positive)"
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\t%.1f%% %s\t\n", r.file, r.suite, r.runs, r.stop, outcome, 100*widest, name)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(w)
	bySuite := map[string][]reachRun{}
	var names []string
	for _, r := range runs {
		if _, ok := bySuite[r.suite]; !ok {
			names = append(names, r.suite)
		}
		bySuite[r.suite] = append(bySuite[r.suite], r)
	}
	sort.Strings(names)
	for _, s := range names {
		rs := bySuite[s]
		var rounds, walls []float64
		positives := 0
		metrics := map[string][]float64{}
		for _, r := range rs {
			rounds = append(rounds, float64(r.runs))
			if r.calib > 0 {
				walls = append(walls, r.wall/r.calib)
			}
			if r.outcome != judge.NoChange {
				positives++
			}
			for m, d := range r.reach {
				metrics[m] = append(metrics[m], d)
			}
		}
		fmt.Fprintf(w, "%s: %d runs, median %.1f rounds a side", s, len(rs), stats.Summarize(rounds).Median)
		if aa {
			fmt.Fprintf(w, ", %d false positives (%.0f%%)", positives, 100*float64(positives)/float64(len(rs)))
		}
		if len(walls) > 0 {
			fmt.Fprintf(w, ", the rounds' wall time median %.0f calibrations", stats.Summarize(walls).Median)
		}
		fmt.Fprintf(w, "; promise %.0f%%\n", 100*rs[0].promise)
		var ms []string
		for m := range metrics {
			ms = append(ms, m)
		}
		sort.Strings(ms)
		for _, m := range ms {
			ds := metrics[m]
			worst := 0.0
			for _, d := range ds {
				worst = math.Max(worst, d)
			}
			mark := ""
			if stats.Summarize(ds).Median > rs[0].promise+1e-9 {
				mark = "  (wider than the promise)"
			}
			fmt.Fprintf(w, "  %-50s reach median %5.1f%%, widest %5.1f%%%s\n", strings.TrimSpace(m), 100*stats.Summarize(ds).Median, 100*worst, mark)
		}
		if aa {
			printCalibration(w, rs, ms)
		}
	}
	return nil
}

// printCalibration holds each metric's A/A changes against what their
// intervals assume. Each change over its standard error is put on the
// normal scale through its own t distribution (stats.Estimate.Score): the
// scores of intervals that are right spread by 1 whatever each run's
// rounds, where the changes over their standard errors spread by
// sqrt(DF/(DF-2)), 1.73 at 4 paired rounds (3 DF). A spread of the scores
// beyond what 1 gives by chance (95%, chi-square over the runs) is
// variance the rounds did not show (two boots that differ, when each side
// is one boot), and intervals that narrow call changes that are not
// there. Only with 3 runs or more.
func printCalibration(w io.Writer, rs []reachRun, metrics []string) {
	if len(rs) < 3 {
		return
	}
	fmt.Fprintln(w, "  the A/A changes against their intervals: each change over its standard error as a normal score, which spreads by 1 when the intervals are right:")
	for _, m := range metrics {
		var changes, ses, scores []float64
		for _, r := range rs {
			if e, ok := r.est[m]; ok {
				changes, ses, scores = append(changes, e.D), append(ses, e.SE), append(scores, e.Score())
			}
		}
		if len(changes) < 3 {
			continue
		}
		spread, bound := stats.ScoresSpread(scores)
		mark := ""
		if spread > bound {
			mark = "  (the intervals are too narrow)"
		}
		fmt.Fprintf(w, "  %-50s changes %5.2f%%, standard error %5.2f%% (median); scores spread %.2f (by chance at most %.2f)%s\n",
			strings.TrimSpace(m), 100*stats.Summarize(changes).Stddev, 100*stats.Summarize(ses).Median, spread, bound, mark)
	}
}
