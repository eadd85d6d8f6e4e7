package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"time"

	"github.com/patchbot/patchbot/config"
	"github.com/patchbot/patchbot/images"
	"github.com/patchbot/patchbot/intake"
	"github.com/patchbot/patchbot/mailbox"
	"github.com/patchbot/patchbot/service"
	"github.com/patchbot/patchbot/suites"
	"github.com/patchbot/patchbot/suites/invm"
)

func init() {
	register(&command{
		name:    "run",
		summary: "test one series now: build, boot, measure, print the reply",
		usage:   "run (--mbox FILE | --maildir DIR | --imap URL | --lore URL | --msgid ID) [flags]",
		desc: `Reads the mail, chooses the series to test (the newest complete version, or -v N),
chooses the base (--base; else the series' base-commit, a subject tag naming a
configured tree, or the newest tree the whole series applies to: see 'patchbot
trees'), builds the base and the series (patch by patch when it has more than
one), boots both kernels in VMs of the same shape, runs the suites the touched
files select (or --suites) with rounds interleaved, and prints the reply. When
the series changed a metric, prefixes of it are measured to name the patch the
change comes from. Everything is kept in a run directory under the state
directory; the reply is queued in the state's outbox and sent only with --send
(or smtp.enabled in the config).

Exit status: 0 the series was tested (the reply may report a regression),
1 it could not be tested (infrastructure, or no complete series in the mail),
2 usage error, 3 the patch's fault (it does not apply, build or boot, or its
kernel reports trouble the base kernel does not: an oops, a BUG, a lockup, a
hung task, an RCU stall, a panic, a hang, or a new warning).`,
		example: `patchbot run --mbox testdata/mbox/squashfs-thundering-herd.mbox
patchbot run --msgid 20260724190556.1950693-1-usama.arif@linux.dev --suites cache-contention --runs 7
patchbot run --mbox series.mbox --aa   # the base against itself: must find no change
patchbot run --mbox series.mbox --base next --patches 2-3`,
		flags: runFlags,
	})
}

func runFlags(fs *flag.FlagSet) func(context.Context, []string) error {
	var src sourceFlags
	var conf configFlags
	var vm vmFlags
	src.declare(fs)
	conf.declare(fs)
	vm.declare(fs)
	var names suitesFlag
	fs.Var(&names, "suites", "comma-separated `suites` (default: those the touched files select; see 'patchbot suite list')")
	profile := fs.String("profile", "", "suite `profile`: standard, quick or full (default from the config: standard)")
	runs := fs.Int("runs", 0, "runs per kernel, interleaved, 1..100 (default from the config: as many as the evidence needs, 3 to 10)")
	version := fs.Int("v", 0, "test version `N` of the series (default: the newest complete one)")
	send := fs.Bool("send", false, "send the reply through the configured SMTP server")
	tree := fs.String("tree", "", "kernel git tree `dir`, the default base (default: Debian's linux-source-6.1, imported once)")
	base := fs.String("base", "", "test on this `base`: a configured tree's name, default, or a commit or ref (default: chosen; see 'patchbot trees')")
	patches := fs.String("patches", "", "measure only patches `M-N` (or M), on top of the ones before")
	aa := fs.Bool("aa", false, "A/A run: the base kernel on both sides (the series is not applied)")
	return func(ctx context.Context, args []string) error {
		sc, err := src.config()
		if err != nil {
			return err
		}
		cfg, err := conf.load()
		if err != nil {
			return err
		}
		if err := vm.apply(fs, &cfg); err != nil {
			return err
		}
		if err := checkRuns(fs, *runs); err != nil {
			return err
		}
		if *runs > 0 {
			cfg.Suites.Runs = *runs
		}
		if *profile != "" {
			cfg.Suites.Profile = *profile
		}
		if *tree != "" {
			cfg.Kernel.Tree = *tree
		}
		if *base != "" && !images.ValidRef(*base) {
			return usagef("--base %q: want a tree's name, a commit or a ref", *base)
		}
		var first, last int
		if *patches != "" {
			var ok bool
			if first, last, ok = mailbox.ParsePatchRange(*patches); !ok {
				return usagef("--patches %q: want M-N or M, e.g. 2-3", *patches)
			}
		}
		if *version < 0 {
			return usagef("-v %d: want a version number", *version)
		}
		if err := suites.Check(names, cfg.Suites.Profile); err != nil {
			return usageError{err.Error()}
		}
		if err := suites.CheckProfile(cfg.Suites.Profile); err != nil {
			return usageError{err.Error()}
		}
		if *send {
			cfg.SMTP.Enabled = true
		}
		if err := cfg.Validate(); err != nil {
			return err
		}
		opts := testOptions{names: names, aa: *aa, base: *base, first: first, last: last}
		return runSeriesTest(ctx, cfg, sc, *version, opts, stdout, stderr)
	}
}

// testOptions are what a run asks for beyond the config.
type testOptions struct {
	names       []string
	aa          bool
	base        string // --base: a tree, default, a commit or ref
	first, last int    // --patches
}

func runSeriesTest(ctx context.Context, cfg config.Config, sc mailbox.SourceConfig, version int, o testOptions,
	stdout, stderr io.Writer) error {
	series, err := seriesToTest(ctx, sc, version, stderr)
	if err != nil {
		return err
	}
	if o.last > len(series.Patches) {
		return usagef("--patches %d-%d: the series has %d patch(es)", o.first, o.last, len(series.Patches))
	}
	fmt.Fprintf(stderr, "series: %s (v%d, %d patch(es), files %s)\n",
		series.Subject, series.Version, len(series.Patches), strings.Join(series.Files(), " "))
	st, err := cfg.OpenStore()
	if err != nil {
		return err
	}
	defer st.Close()
	p, err := service.NewPipeline(cfg, stderr)
	if err != nil {
		return err
	}
	p.UseStore(st)
	if t, ok := p.Tester.(*invm.Tester); ok {
		t.Log = terminalLog(stderr)
	}
	req := intake.NewRequest(series, cfg.Suites, intake.ReplyTarget(series))
	req.Suites, req.AA, req.BaseOverride = o.names, o.aa, o.base
	req.First, req.Last = o.first, o.last
	if _, err := req.SuiteNames(); err != nil {
		return usageError{err.Error()} // before any kernel is built
	}
	runDir := filepath.Join(cfg.StateDir, "runs", "run-"+time.Now().UTC().Format("20060102-150405"))
	start := time.Now()
	out, err := p.Execute(ctx, req, runDir)
	if err != nil {
		return fmt.Errorf("%w (the infrastructure failed, not the patch; run directory %s)", err, runDir)
	}
	fmt.Fprintf(stderr, "== done in %s; run directory %s\n", time.Since(start).Round(time.Second), runDir)

	stdout.Write([]byte(strings.ReplaceAll(string(out.Raw), "\r\n", "\n")))
	if _, sending, err := service.Deliver(ctx, cfg, st, out.Reply, terminalLog(stderr)); err != nil {
		return err
	} else if !sending {
		fmt.Fprintln(stderr, "(not sent: the reply is in the outbox; --send or smtp.enabled sends it)")
	}
	if out.Run.Failure != nil || out.Run.KernelTrouble() {
		return exitError{exitPatchFault}
	}
	return nil
}
