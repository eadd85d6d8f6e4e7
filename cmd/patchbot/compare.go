package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/patchbot/patchbot/reports"
	"github.com/patchbot/patchbot/reports/stats"
)

func init() {
	register(command{
		name:  "compare",
		usage: "BASE.json PATCHED.json [--json] [--alpha A] [--test welch|mann-whitney]: compare two result files",
		run:   func(ctx context.Context, args []string) error { return runCompare(args, os.Stdout) },
	})
}

// parseInterspersed parses flags that may come before, between or after the
// positional arguments ("compare a.json b.json --json").
func parseInterspersed(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		args = fs.Args()
		if len(args) == 0 {
			return pos, nil
		}
		pos = append(pos, args[0])
		args = args[1:]
	}
}

func runCompare(args []string, w io.Writer) error {
	fs := flag.NewFlagSet("compare", flag.ContinueOnError)
	asJSON := fs.Bool("json", false, "print the comparison as JSON")
	alpha := fs.Float64("alpha", 0.05, "family-wise significance level")
	test := fs.String("test", "welch", "significance test: welch or mann-whitney")
	pos, err := parseInterspersed(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 2 {
		return fmt.Errorf("want two result files, BASE.json and PATCHED.json; got %d arguments", len(pos))
	}
	t, err := stats.ParseTest(*test)
	if err != nil {
		return err
	}
	base, err := reports.ReadResults(pos[0])
	if err != nil {
		return err
	}
	patched, err := reports.ReadResults(pos[1])
	if err != nil {
		return err
	}
	c, err := reports.Compare(base, patched, reports.Options{Alpha: *alpha, Test: t})
	if err != nil {
		return err
	}
	if *asJSON {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(c)
	}
	fmt.Fprintln(w, reports.Wrap(reports.Verdict(c), 72))
	fmt.Fprintln(w)
	if err := reports.WriteTable(w, c, reports.Commits{Base: c.Base, Patched: c.Patched}); err != nil {
		return err
	}
	fmt.Fprintln(w)
	if err := reports.WriteGrids(w, c); err != nil {
		return err
	}
	return reports.WriteCurves(w, c)
}
