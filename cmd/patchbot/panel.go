package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"

	"github.com/patchbot/patchbot/judge"
	"github.com/patchbot/patchbot/judge/stats"
	"github.com/patchbot/patchbot/reports"
)

func init() {
	register(&command{
		name:       "panel",
		positional: true,
		summary:    "judge the panel of known-effect patches and print its table",
		usage:      "panel [--panel FILE] [--rule RULE] [--test T] [--unfinished] [--measured] RESULTS_DIR | panel --list [--panel FILE]",
		desc: `Judges each patch of the panel (testdata/panel/panel.yaml: patches to the
default tree with known effects, and how each expectation was established)
from its measured results in RESULTS_DIR, NAME.json as 'patchbot suite run
--json' writes it or a run directory NAME/, with the sequential rule as the
pipeline would have stopped it, and prints the table: expected and reported
outcome, the primary metrics with their intervals, the rounds a side and
why they stopped, and how many verdicts are right. scripts/panel.sh
measures the panel. A patch without results is listed as missing, unless
--measured leaves out the patches RESULTS_DIR has no results for (a table
recorded before they joined the panel). --list
prints each patch's name, suite and mbox path, one a line, for scripts;
--unfinished, instead of the table, the same of each patch whose measured
rounds ran out before the rule would have stopped (to measure more, with
'patchbot suite run --continue').

Exit status: 0 every verdict right, 1 a verdict wrong or results missing,
2 usage error.`,
		example: `patchbot panel /var/tmp/panel/out`,
		flags: func(fs *flag.FlagSet) func(context.Context, []string) error {
			file := fs.String("panel", filepath.Join("testdata", "panel", "panel.yaml"), "the panel `file`")
			rule := fs.String("rule", stats.DefaultRule.String(), "the sequential `rule` to judge with")
			test := fs.String("test", "log-welch", "significance `test`: log-welch (the pipeline's), paired-log, welch or mann-whitney")
			list := fs.Bool("list", false, "list the panel's patches: name, suite, mbox")
			unfinished := fs.Bool("unfinished", false, "list the patches whose measured rounds ran out before the rule stopped: name, suite, mbox")
			measured := fs.Bool("measured", false, "leave out the patches without results in RESULTS_DIR instead of listing them as missing")
			return func(ctx context.Context, args []string) error {
				if *list {
					if len(args) != 0 {
						return usagef("--list takes no arguments")
					}
					p, err := judge.LoadPanel(*file)
					if err != nil {
						return err
					}
					for _, pp := range p.Patches {
						fmt.Fprintf(stdout, "%s %s %s\n", pp.Name, pp.Suite, filepath.Join(filepath.Dir(*file), pp.Mbox))
					}
					return nil
				}
				if len(args) != 1 {
					return usagef("want one results directory; got %d arguments", len(args))
				}
				r, err := stats.ParseRule(*rule)
				if err != nil {
					return usageError{err.Error()}
				}
				t, err := stats.ParseTest(*test)
				if err != nil {
					return usageError{err.Error()}
				}
				return runPanel(*file, args[0], r, judge.Options{Test: t}, *unfinished, *measured, stdout)
			}
		},
	})
}

func runPanel(file, dir string, rule stats.Rule, opt judge.Options, unfinished, measured bool, w io.Writer) error {
	p, err := judge.LoadPanel(file)
	if err != nil {
		return err
	}
	var vs []*judge.PanelVerdict
	var missing []string
	for _, pp := range p.Patches {
		path := filepath.Join(dir, pp.Name+".json")
		if _, err := os.Stat(path); err != nil {
			path = filepath.Join(dir, pp.Name)
		}
		base, patched, err := reports.ReadPanelResults(path)
		if errors.Is(err, os.ErrNotExist) {
			if !measured {
				missing = append(missing, pp.Name)
			}
			continue
		}
		if err != nil {
			return fmt.Errorf("%s: %w", pp.Name, err)
		}
		v, err := judge.JudgePanel(pp, base, patched, rule, opt)
		if err != nil {
			return fmt.Errorf("%s: %w", pp.Name, err)
		}
		vs = append(vs, v)
	}
	if unfinished {
		for _, v := range vs {
			if v.Stop == judge.StopTruncated {
				fmt.Fprintf(w, "%s %s %s\n", v.Patch.Name, v.Patch.Suite, filepath.Join(filepath.Dir(file), v.Patch.Mbox))
			}
		}
		return nil
	}
	if err := reports.WritePanel(w, vs); err != nil {
		return err
	}
	by := judge.RoundsByClass(vs)
	classes := make([]string, 0, len(by))
	for c := range by {
		classes = append(classes, c)
	}
	sort.Strings(classes)
	fmt.Fprintln(w, "\n| class | rounds a side, median |\n|---|---|")
	for _, c := range classes {
		fmt.Fprintf(w, "| %s | %g |\n", c, by[c])
	}
	if len(missing) > 0 {
		fmt.Fprintf(w, "\nNo results yet for %d: %v\n", len(missing), missing)
	}
	for _, v := range vs {
		if v.Patch.Expect != judge.Unknown && (!v.Right || len(v.WrongDirection) > 0) {
			return errors.New("a panel verdict is wrong")
		}
	}
	if len(missing) > 0 {
		return errors.New("panel results missing")
	}
	return nil
}
