package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"text/tabwriter"

	"github.com/patchbot/patchbot/judge"
	"github.com/patchbot/patchbot/reports"
	"github.com/patchbot/patchbot/suites"
)

func init() {
	register(&command{
		name:       "suite variance",
		positional: true,
		summary:    "split a metric's spread into within a round, between rounds and between boots",
		usage:      "suite variance RESULTS.json... [--all] [--json]",
		desc: `Reads 'patchbot suite run --json' outputs of one kernel, or of the same kernel
on both sides (A/A runs): every side of every file is one boot. For each
metric it prints where the spread of its values comes from, as standard
deviations in percent of the value: between the windows of one round (a
profile's windows), between the rounds of one boot beyond their windows, and
between boots beyond their rounds; and the spread of one round's value, what
a comparison of rounds sees. A run whose rounds each booted afresh (a profile
with params.reboot) is a boot a round: its rounds' spread is between boots,
and its round column is "-". Without --all, only the suites' primary
metrics.`,
		example: `patchbot suite run --suites locks --kernel base/bzImage --vs base/bzImage --runs 5 --json > aa1.json
  patchbot suite variance aa1.json aa2.json`,
		flags: func(fs *flag.FlagSet) func(context.Context, []string) error {
			all := fs.Bool("all", false, "every metric, not only the primary ones")
			asJSON := fs.Bool("json", false, "print JSON (schema 1)")
			return func(ctx context.Context, args []string) error {
				if len(args) == 0 {
					return usagef("want at least one results file")
				}
				var rs []suites.Result
				for _, a := range args {
					r, err := reports.ReadResults(a)
					if err != nil {
						return err
					}
					rs = append(rs, r...)
				}
				rows := judge.Variance(rs)
				if !*all {
					rows = primaryOnly(rows)
				}
				if *asJSON {
					return writeJSON(stdout, struct {
						Schema int                 `json:"schema"`
						Rows   []judge.VarianceRow `json:"rows"`
					}{schemaVersion, rows})
				}
				return writeVariance(stdout, rows)
			}
		},
	})
}

// primaryOnly keeps the rows of the suites' primary metrics.
func primaryOnly(rows []judge.VarianceRow) []judge.VarianceRow {
	var out []judge.VarianceRow
	for _, r := range rows {
		s, err := suites.Lookup(r.Suite)
		if err != nil {
			continue
		}
		if s.Verdict.IsPrimary(r.Workload, r.Metric, r.Params) {
			out = append(out, r)
		}
	}
	return out
}

func writeVariance(w io.Writer, rows []judge.VarianceRow) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "boots\trounds\twindows\twindow\tround\tboot\ta round's value\t metric\t")
	pct := func(x float64) string { return fmt.Sprintf("%.1f%%", 100*x) }
	for _, r := range rows {
		if !r.Defined {
			continue
		}
		name := r.Suite + " " + r.Workload + " " + r.Metric
		if c := r.Cell(); c != "" {
			name += " [" + c + "]"
		}
		win := "-"
		if r.Windows > 1 {
			win = pct(r.Window)
		}
		round := pct(r.Round)
		if r.BootARound {
			round = "-"
		}
		fmt.Fprintf(tw, "%d\t%d\t%d\t%s\t%s\t%s\t%s\t %s\t\n", r.Boots, r.Rounds, r.Windows, win, round, pct(r.Boot), pct(r.RoundMean), name)
	}
	return tw.Flush()
}
