package main

import (
	"context"
	"flag"
	"fmt"
	"io"

	"github.com/patchbot/patchbot/judge"
	"github.com/patchbot/patchbot/judge/stats"
	"github.com/patchbot/patchbot/reports"
)

func init() {
	register(&command{
		name:       "compare",
		positional: true,
		summary:    "compare two result files as a reply would",
		usage:      "compare BASE.json PATCHED.json [--json] [--alpha A] [--test log-welch|welch|mann-whitney]",
		desc: `Judges the samples of two result files (a run directory's base.json and
patched.json, or 'patchbot suite run --json' output) with the test the
pipeline uses, and prints the verdict and the table of the reply. Re-judging a
run's files gives the reply's answer.`,
		example: `patchbot compare runs/job-12/base.json runs/job-12/patched.json`,
		flags: func(fs *flag.FlagSet) func(context.Context, []string) error {
			asJSON := fs.Bool("json", false, "print the comparison as JSON (schema 1)")
			alpha := fs.Float64("alpha", 0.05, "family-wise significance level, in (0, 0.5]")
			test := fs.String("test", "log-welch", "significance `test`: log-welch (the pipeline's), paired-log, welch or mann-whitney")
			return func(ctx context.Context, args []string) error {
				if len(args) != 2 {
					return usagef("want two result files, BASE.json and PATCHED.json; got %d arguments", len(args))
				}
				if *alpha <= 0 || *alpha > 0.5 {
					return usagef("--alpha %g: want a level in (0, 0.5]", *alpha)
				}
				t, err := stats.ParseTest(*test)
				if err != nil {
					return usageError{err.Error()}
				}
				return runCompare(args[0], args[1], judge.Options{Alpha: *alpha, Test: t}, *asJSON, stdout)
			}
		},
	})
}

func runCompare(basePath, patchedPath string, opt judge.Options, asJSON bool, w io.Writer) error {
	base, err := reports.ReadResults(basePath)
	if err != nil {
		return err
	}
	patched, err := reports.ReadResults(patchedPath)
	if err != nil {
		return err
	}
	c, err := judge.Compare(base, patched, opt)
	if err != nil {
		return err
	}
	if asJSON {
		return writeJSON(w, struct {
			Schema     int               `json:"schema"`
			Comparison *judge.Comparison `json:"comparison"`
		}{schemaVersion, c})
	}
	fmt.Fprintln(w, reports.Wrap(reports.Verdict(c), 72))
	fmt.Fprintln(w)
	if err := reports.WriteTable(w, c, reports.Commits{Base: c.Base, Patched: c.Patched}, reports.DefaultNoiseShown); err != nil {
		return err
	}
	fmt.Fprintln(w)
	if err := reports.WriteGrids(w, c); err != nil {
		return err
	}
	return reports.WriteCurves(w, c)
}
