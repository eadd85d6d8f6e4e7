package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/patchbot/patchbot/images"
	"github.com/patchbot/patchbot/mailbox"
)

func init() {
	register(command{
		name:  "build",
		usage: "build the base and patched kernels for a series: --mbox FILE [--tree DIR --base REF] [--config FRAGMENT] [--json]",
		run:   runBuild,
	})
}

// buildReport is what "patchbot build --json" prints.
type buildReport struct {
	Series  string        `json:"series"`
	Base    *images.Build `json:"base,omitempty"`
	Patched *images.Build `json:"patched,omitempty"`
	Error   *buildFailure `json:"error,omitempty"`
}

// buildFailure says whose fault a failure is and carries the evidence.
type buildFailure struct {
	Blame   string   `json:"blame"` // "patch" or "infrastructure"
	Kind    string   `json:"kind"`  // "apply", "build", "config", "other"
	Message string   `json:"message"`
	Patch   int      `json:"patch,omitempty"` // failing patch, 1-based
	Subject string   `json:"subject,omitempty"`
	Hunk    string   `json:"hunk,omitempty"`
	Lines   []string `json:"lines,omitempty"`
	Log     string   `json:"log,omitempty"`
}

// exitPatchFault is the exit status when the series does not apply or
// build: the run worked, the patch did not.
const exitPatchFault = 3

func runBuild(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("build", flag.ContinueOnError)
	mbox := fs.String("mbox", "", "mbox file holding the series (required)")
	tree := fs.String("tree", "", "your own kernel git tree (default: Debian's linux-source-6.1, imported into the cache)")
	baseRef := fs.String("base", "HEAD", "base branch, tag or commit in --tree")
	asJSON := fs.Bool("json", false, "print the result as JSON")
	timeout := fs.Duration("timeout", 2*time.Hour, "time limit for each kernel build")
	var extra []string
	fs.Func("config", "extra config fragment merged after the defaults (repeatable)", func(f string) error {
		extra = append(extra, f)
		return nil
	})
	if err := fs.Parse(args); err != nil {
		return exitError{2}
	}
	if *mbox == "" || fs.NArg() > 0 {
		fs.Usage()
		return exitError{2}
	}
	series, err := readSeries(*mbox)
	if err != nil {
		return err
	}

	// Progress goes to stderr, so that --json output stays clean.
	progress := io.Writer(os.Stderr)
	b, err := images.DefaultBuilder(progress)
	if err != nil {
		return err
	}
	b.Timeout = *timeout
	for _, f := range extra {
		frag, err := images.LoadFragment(f)
		if err != nil {
			return err
		}
		b.Config.Fragments = append(b.Config.Fragments, frag)
	}
	var base images.Base
	if *tree != "" {
		base, err = images.OpenBase(ctx, *tree, *baseRef)
	} else {
		base, err = images.ImportDebian(ctx, b.Cache, progress)
	}
	if err != nil {
		return err
	}
	if series.Base != "" {
		if nb, err := base.WithBaseCommit(ctx, series.Base); err == nil {
			fmt.Fprintf(progress, "using the series' base-commit %s\n", series.Base)
			base = nb
		} else {
			fmt.Fprintf(progress, "base-commit %s is not in the tree; using %s\n", series.Base, base.Commit)
		}
	}

	report := buildReport{Series: series.Subject}
	report.Base, err = b.Base(ctx, base)
	if err == nil {
		var raw [][]byte
		for _, p := range series.Patches {
			raw = append(raw, p.Raw)
		}
		report.Patched, err = b.Patched(ctx, report.Base, raw)
	}
	if err != nil {
		report.Error = failure(err)
	}
	if *asJSON {
		enc := json.NewEncoder(os.Stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(report); err != nil {
			return err
		}
	} else {
		printReport(os.Stdout, report)
	}
	switch {
	case report.Error == nil:
		return nil
	case report.Error.Blame == "patch":
		return exitError{exitPatchFault}
	case *asJSON:
		return exitError{1}
	default:
		return err
	}
}

// readSeries reads the mbox and assembles the one series in it.
func readSeries(file string) (*mailbox.Series, error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("reading series: %w", err)
	}
	var msgs []*mailbox.Message
	err = mailbox.ReadMbox(bytes.NewReader(data), func(raw []byte, _ int64) error {
		m, err := mailbox.ParseBytes(raw)
		if err != nil {
			return err
		}
		msgs = append(msgs, m)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", file, err)
	}
	var found []*mailbox.Series
	for _, s := range mailbox.Assemble(msgs) {
		if len(s.Patches) > 0 {
			found = append(found, s)
		}
	}
	switch len(found) {
	case 0:
		return nil, fmt.Errorf("%s holds no patch", file)
	case 1:
	default:
		return nil, fmt.Errorf("%s holds %d series; give one at a time", file, len(found))
	}
	if !found[0].Complete {
		return nil, fmt.Errorf("series %q is incomplete: %s", found[0].Subject, found[0].Reason)
	}
	return found[0], nil
}

func failure(err error) *buildFailure {
	f := &buildFailure{Blame: "infrastructure", Kind: "other", Message: err.Error()}
	var ae *images.ApplyError
	var be *images.BuildError
	var ce *images.ConfigError
	switch {
	case errors.As(err, &ae):
		f.Blame, f.Kind, f.Patch, f.Subject, f.Hunk = "patch", "apply", ae.Index, ae.Subject, ae.Hunk
	case errors.As(err, &be):
		f.Blame, f.Kind, f.Lines, f.Log = "patch", "build", be.Lines, be.Log
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
		fmt.Fprintf(w, "FAILED (%s's fault): %s\n", f.Blame, f.Message)
		if f.Hunk != "" {
			fmt.Fprintf(w, "%s\n", indent(f.Hunk))
		}
		if len(f.Lines) > 0 {
			fmt.Fprintf(w, "%s\n  build log: %s\n", indent(strings.Join(f.Lines, "\n")), f.Log)
		}
	}
}

func indent(s string) string { return "  " + strings.ReplaceAll(s, "\n", "\n  ") }
