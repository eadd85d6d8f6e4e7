package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/patchbot/patchbot/blame"
	"github.com/patchbot/patchbot/images"
	"github.com/patchbot/patchbot/judge"
	"github.com/patchbot/patchbot/mailbox"
	"github.com/patchbot/patchbot/reports"
)

func init() {
	register(&command{
		name:    "build",
		summary: "build the base and patched kernels of a series",
		usage:   "build (--mbox FILE | --maildir DIR | --imap URL | --lore URL | --msgid ID) [--base TREE|COMMIT] [--tree DIR] [--config FILE] [--fragment FILE]... [--json]",
		desc: `Chooses the base as 'patchbot run' and the daemon do (--base; else the series'
base-commit, a subject tag naming a configured tree, or the newest tree the whole
series applies to: see 'patchbot trees'), builds it and the patched kernel on top
of it, incrementally, in the sandbox, both cached. Prints which base and why,
where the kernels are, the new compiler warnings, and the evidence when the
series does not apply or build.

Exit status: 0 built, 1 infrastructure, 2 usage error, 3 the patch's fault.`,
		example: `patchbot build --mbox testdata/mbox/squashfs-thundering-herd.mbox --json
patchbot build --mbox series.mbox --config patchbot.yaml --base next`,
		flags: func(fs *flag.FlagSet) func(context.Context, []string) error {
			var src sourceFlags
			var conf configFlags
			src.declare(fs)
			conf.declare(fs)
			tree := fs.String("tree", "", "kernel git tree `dir`, the default base (default: Debian's linux-source-6.1, imported once)")
			base := fs.String("base", "", "build on this `base`: a configured tree's name, default, or a commit or ref (default: chosen; see 'patchbot trees')")
			asJSON := fs.Bool("json", false, "print the result as JSON (schema 1)")
			version := fs.Int("v", 0, "build version `N` of the series (default: the newest complete one)")
			timeout := fs.Duration("timeout", 2*time.Hour, "time limit of each kernel build")
			var frags []string
			fs.Func("fragment", "extra kernel config fragment `file` merged after the defaults (repeatable)", func(f string) error {
				frags = append(frags, f)
				return nil
			})
			return func(ctx context.Context, args []string) error {
				sc, err := src.config()
				if err != nil {
					return err
				}
				if *timeout <= 0 {
					return usagef("--timeout %v: want a positive duration", *timeout)
				}
				if *base != "" && !images.ValidRef(*base) {
					return usagef("--base %q: want a tree's name, a commit or a ref", *base)
				}
				var fragments []images.Fragment
				for _, f := range frags {
					frag, err := images.LoadFragment(f)
					if err != nil {
						return usageError{err.Error()}
					}
					fragments = append(fragments, frag)
				}
				cfg, err := conf.load()
				if err != nil {
					return err
				}
				if *tree != "" {
					cfg.Kernel.Tree = *tree
				}
				series, err := seriesToTest(ctx, sc, *version, stderr)
				if err != nil {
					return err
				}
				// Progress goes to stderr, so that --json output stays clean.
				k, err := images.NewKernels(cfg.Kernel, cfg.Trees, stderr)
				if err != nil {
					return err
				}
				k.Builder.Timeout = *timeout
				k.Builder.Config.Fragments = append(k.Builder.Config.Fragments, fragments...)
				mails := series.Mails()
				sb, err := images.BuildSeries(ctx, k, images.SeriesJob{Want: images.Want{Override: *base,
					BaseCommit: series.Base, Tags: series.Tags(), Patches: mails}, First: 1, Last: len(mails), Whole: true})
				report := buildReport{Schema: schemaVersion, Series: series.Subject}
				if err == nil {
					report.Choice = reports.BaseChoiceOf(sb.Choice, sb.Err, mailbox.Titles(series.Subjects()))
					report.Base, report.Patched, err = sb.Base, sb.B, sb.Err
				}
				if err != nil {
					report.Error = failure(err)
				}
				if *asJSON {
					if err := writeJSON(stdout, report); err != nil {
						return err
					}
				} else {
					printReport(stdout, report)
				}
				switch {
				case err == nil:
					return nil
				case blame.IsPatch(err):
					return exitError{exitPatchFault}
				case *asJSON:
					return exitError{exitInfra}
				}
				return err
			}
		},
	})
}

// buildReport is what "patchbot build --json" prints.
type buildReport struct {
	Schema int    `json:"schema"`
	Series string `json:"series"`
	// Choice is which base and why, as a reply says it.
	Choice  *reports.BaseChoice `json:"choice,omitempty"`
	Base    *images.Build       `json:"base,omitempty"`
	Patched *images.Build       `json:"patched,omitempty"`
	Error   *buildFailure       `json:"error,omitempty"`
}

// buildFailure says whose fault a failure is and carries the evidence.
type buildFailure struct {
	Blame   blame.Blame  `json:"blame"` // "patch" or "infra"
	Kernel  blame.Kernel `json:"kernel,omitempty"`
	Kind    string       `json:"kind"` // "apply", "build", "config", "other"
	Message string       `json:"message"`
	Patch   int          `json:"patch,omitempty"` // failing patch, 1-based
	Subject string       `json:"subject,omitempty"`
	Hunk    string       `json:"hunk,omitempty"`
	Lines   []string     `json:"lines,omitempty"`
	Log     string       `json:"log,omitempty"`
}

// failure is a failure as build --json prints it: the evidence is
// judge.FailureOf's, the one reading of a stage's error.
func failure(err error) *buildFailure {
	f := judge.FailureOf(err)
	out := &buildFailure{Blame: blame.Of(err), Kernel: blame.Kernel(f.Kernel), Kind: "other", Message: err.Error(),
		Patch: f.Index, Hunk: f.Hunk, Lines: f.Lines, Log: f.Log}
	switch f.Stage {
	case judge.StageApply, judge.StageBuild, judge.StageConfig:
		out.Kind = string(f.Stage)
	}
	if f.Stage == judge.StageApply {
		out.Subject = f.Patch
	}
	return out
}

func printReport(w io.Writer, r buildReport) {
	fmt.Fprintf(w, "series: %s\n", r.Series)
	if c := r.Choice; c != nil && c.Tree != "" {
		fmt.Fprintf(w, "base tree: %s (%s)\n", c.Tree, c.How)
	}
	for _, k := range []struct {
		name string
		b    *images.Build
	}{{"base", r.Base}, {"patched", r.Patched}} {
		if k.b == nil {
			continue
		}
		from := "built"
		if k.b.Cached {
			from = "from cache"
		}
		fmt.Fprintf(w, "%s: %s\n  %s in %.1fs; commit %s; config %s\n", k.name, k.b.BzImage, from,
			k.b.Duration.Seconds(), k.b.Commit, k.b.ConfigHash)
		if k.name == "patched" {
			fmt.Fprintf(w, "  new warnings: %d\n", len(k.b.NewWarnings))
			for _, nw := range k.b.NewWarnings {
				fmt.Fprintf(w, "    %s\n", nw)
			}
			for _, d := range k.b.Dropped {
				fmt.Fprintf(w, "  config option lost to the series' Kconfig change: %s\n", d)
			}
		}
	}
	if f := r.Error; f != nil {
		who := "the infrastructure's fault"
		if f.Blame == blame.Patch {
			who = "the patch's fault"
		}
		fmt.Fprintf(w, "FAILED (%s): %s\n", who, f.Message)
		if f.Hunk != "" {
			fmt.Fprintf(w, "%s\n", indent(f.Hunk))
		}
		if len(f.Lines) > 0 {
			fmt.Fprintf(w, "%s\n  build log: %s\n", indent(strings.Join(f.Lines, "\n")), f.Log)
		}
	}
}

func indent(s string) string { return "  " + strings.ReplaceAll(s, "\n", "\n  ") }
