package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/patchbot/patchbot/blame"
	"github.com/patchbot/patchbot/images"
)

func init() {
	register(&command{
		name:    "build",
		summary: "build the base and patched kernels of a series",
		usage:   "build (--mbox FILE | --maildir DIR | --imap URL | --lore URL | --msgid ID) [--tree DIR] [--base REF] [--fragment FILE]... [--json]",
		desc: `Builds the base kernel (Debian's linux-source-6.1 by default, or --tree/--base;
a series' base-commit when the tree has it) and the patched kernel on top of it,
incrementally, in the sandbox, both cached. Prints where the kernels are, the
new compiler warnings, and the evidence when the series does not apply or build.

Exit status: 0 built, 1 infrastructure, 2 usage error, 3 the patch's fault.`,
		example: `patchbot build --mbox testdata/mbox/squashfs-thundering-herd.mbox --json`,
		flags: func(fs *flag.FlagSet) func(context.Context, []string) error {
			var src sourceFlags
			src.declare(fs)
			tree := fs.String("tree", "", "your own kernel git tree `dir` (default: Debian's linux-source-6.1, imported into the cache)")
			base := fs.String("base", "", "base `ref` (in --tree, or a commit of the Debian import; default HEAD)")
			asJSON := fs.Bool("json", false, "print the result as JSON (schema 1)")
			version := fs.Int("v", 0, "build version `N` of the series (default: the newest complete one)")
			timeout := fs.Duration("timeout", 2*time.Hour, "time limit of each kernel build")
			var frags []string
			fs.Func("fragment", "extra kernel config fragment `file` merged after the defaults (repeatable)", func(f string) error {
				frags = append(frags, f)
				return nil
			})
			return func(ctx context.Context, args []string) error {
				if err := noArgs(args); err != nil {
					return err
				}
				sc, err := src.config()
				if err != nil {
					return err
				}
				if *timeout <= 0 {
					return usagef("--timeout %v: want a positive duration", *timeout)
				}
				var fragments []images.Fragment
				for _, f := range frags {
					frag, err := images.LoadFragment(f)
					if err != nil {
						return usageError{err.Error()}
					}
					fragments = append(fragments, frag)
				}
				series, err := seriesToTest(ctx, sc, *version, stderr)
				if err != nil {
					return err
				}
				// Progress goes to stderr, so that --json output stays clean.
				b, err := images.DefaultBuilder(stderr)
				if err != nil {
					return err
				}
				b.Timeout = *timeout
				b.Config.Fragments = append(b.Config.Fragments, fragments...)
				k := &images.Kernels{Builder: b, Tree: images.TreeConfig{Tree: *tree, Base: *base}, Progress: stderr}
				report := buildReport{Schema: schemaVersion, Series: series.Subject}
				choice, err := k.Choose(ctx, images.Want{BaseCommit: series.Base, Patches: series.Mails()})
				if err == nil {
					report.Base, err = k.Base(ctx, choice.Base)
				}
				if err != nil {
					err = blame.On(blame.Base, err)
				} else {
					report.Patched, err = k.Patched(ctx, report.Base, series.Mails())
					err = blame.On(blame.Patched, err)
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
	Schema  int           `json:"schema"`
	Series  string        `json:"series"`
	Base    *images.Build `json:"base,omitempty"`
	Patched *images.Build `json:"patched,omitempty"`
	Error   *buildFailure `json:"error,omitempty"`
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

func failure(err error) *buildFailure {
	f := &buildFailure{Blame: blame.Of(err), Kernel: blame.KernelOf(err), Kind: "other", Message: err.Error()}
	var ae *images.ApplyError
	var be *images.BuildError
	var ce *images.ConfigError
	switch {
	case errors.As(err, &ae):
		f.Kind, f.Patch, f.Subject, f.Hunk = "apply", ae.Index, ae.Subject, ae.Hunk
	case errors.As(err, &be):
		f.Kind, f.Lines, f.Log = "build", be.Lines, be.Log
	case errors.As(err, &ce):
		f.Kind = "config"
	}
	return f
}

func printReport(w io.Writer, r buildReport) {
	fmt.Fprintf(w, "series: %s\n", r.Series)
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
