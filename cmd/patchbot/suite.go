package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"path/filepath"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/patchbot/patchbot/blame"
	"github.com/patchbot/patchbot/config"
	"github.com/patchbot/patchbot/images"
	"github.com/patchbot/patchbot/judge"
	"github.com/patchbot/patchbot/reports"
	"github.com/patchbot/patchbot/suites"
	"github.com/patchbot/patchbot/suites/invm"
)

func init() {
	register(&command{
		name:    "suite list",
		summary: "list the performance suites, their profiles and what selects them",
		usage:   "suite list [--json]",
		desc:    `Lists the embedded suites: their profiles, the paths that select them for a series, and their workloads.`,
		example: `patchbot suite list`,
		flags: func(fs *flag.FlagSet) func(context.Context, []string) error {
			asJSON := fs.Bool("json", false, "print JSON (schema 1)")
			return func(ctx context.Context, args []string) error {
				return suiteList(stdout, *asJSON)
			}
		},
	})
	register(&command{
		name:    "suite run",
		summary: "run suites on this machine, or in VMs on one or two kernels",
		usage:   "suite run --suites NAME[,NAME...] (--local | --kernel BZIMAGE [--vs BZIMAGE2]) [flags]",
		desc: `Runs the suites' rounds on this machine and its kernel (--local, as root), or in
one VM per kernel with rounds interleaved between --kernel (the base) and --vs
(the patched), and prints the mean of every metric per kernel. Statistics
proper are 'patchbot compare' on the --json output. --continue FILE goes on
with a run that FILE (an earlier --json output of the same suites and
kernels) recorded: its rounds come first, the new ones are numbered on.`,
		example: `patchbot suite run --suites cache-contention --kernel base/bzImage --vs patched/bzImage --runs 3 --json > results.json
  patchbot suite run --suites cache-contention --kernel base/bzImage --vs patched/bzImage --runs 2 --continue results.json --json > more.json`,
		flags: func(fs *flag.FlagSet) func(context.Context, []string) error {
			var names suitesFlag
			fs.Var(&names, "suites", "comma-separated `suites` to run (required; see 'patchbot suite list')")
			profile := fs.String("profile", suites.DefaultProfile, "suite `profile`")
			runs := fs.Int("runs", 1, "runs per kernel, interleaved across kernels, 1..100")
			local := fs.Bool("local", false, "run on this machine and its kernel (root needed)")
			kernel := fs.String("kernel", "", "bzImage to boot (the base)")
			vs := fs.String("vs", "", "second bzImage to compare against --kernel (the patched)")
			var vm vmFlags
			vm.declare(fs)
			asJSON := fs.Bool("json", false, "print the results as JSON (schema 1)")
			cont := fs.String("continue", "", "an earlier --json output `file` of the same suites and kernels, whose rounds these go on from")
			return func(ctx context.Context, args []string) error {
				if len(names) == 0 {
					return usagef("--suites is required")
				}
				if *local == (*kernel != "") {
					return usagef("give exactly one of --local and --kernel")
				}
				if *vs != "" && *kernel == "" {
					return usagef("--vs needs --kernel")
				}
				if *runs < 1 || *runs > 100 {
					return usagef("--runs %d: want 1..100", *runs)
				}
				cfg := config.Default()
				if err := vm.apply(fs, &cfg); err != nil {
					return err
				}
				if err := suites.Check(names, *profile); err != nil {
					return usageError{err.Error()}
				}
				var earlier []*suites.Result
				if *cont != "" {
					var err error
					if earlier, err = readSuiteRun(*cont); err != nil {
						return err
					}
				}
				var results []*suites.Result
				for _, name := range names {
					rs, err := suiteRun(ctx, name, *profile, *runs, *local, *kernel, *vs, cfg.VM)
					if err != nil {
						return err
					}
					results = append(results, rs...)
				}
				if earlier != nil {
					var err error
					if results, err = continueRun(earlier, results); err != nil {
						return fmt.Errorf("--continue %s: %w", *cont, err)
					}
				}
				if *asJSON {
					return writeJSON(stdout, struct {
						Schema  int              `json:"schema"`
						Results []*suites.Result `json:"results"`
					}{schemaVersion, results})
				}
				printResults(stdout, results)
				return nil
			}
		},
	})
}

// readSuiteRun reads what 'suite run --json' wrote.
func readSuiteRun(path string) ([]*suites.Result, error) {
	rs, err := reports.ReadResults(path)
	if err != nil {
		return nil, err
	}
	out := make([]*suites.Result, len(rs))
	for i := range rs {
		out[i] = &rs[i]
	}
	return out, nil
}

// continueRun puts each new result after the earlier one of its suite and
// kernel; every earlier result must be continued, and only once.
func continueRun(earlier, later []*suites.Result) ([]*suites.Result, error) {
	if len(earlier) != len(later) {
		return nil, fmt.Errorf("%d results earlier, %d now", len(earlier), len(later))
	}
	out := make([]*suites.Result, len(later))
	for i, r := range later {
		found := false
		for _, e := range earlier {
			if e.Suite == r.Suite && e.Kernel == r.Kernel {
				c, err := suites.Continue(e, r)
				if err != nil {
					return nil, err
				}
				out[i], found = c, true
				break
			}
		}
		if !found {
			return nil, fmt.Errorf("no earlier %s run on %s", r.Suite, r.Kernel)
		}
	}
	return out, nil
}

func suiteList(w io.Writer, asJSON bool) error {
	all, err := suites.All()
	if err != nil {
		return err
	}
	if asJSON {
		type entry struct {
			Name        string   `json:"name"`
			Description string   `json:"description"`
			Profiles    []string `json:"profiles"`
			Paths       []string `json:"paths"`
			Workloads   []string `json:"workloads"`
		}
		out := struct {
			Schema int     `json:"schema"`
			Suites []entry `json:"suites"`
		}{Schema: schemaVersion}
		for _, s := range all {
			out.Suites = append(out.Suites, entry{s.Name, s.Description, s.ProfileNames(), s.Paths, s.Workloads})
		}
		return writeJSON(w, out)
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "SUITE\tPROFILES\tSELECTED BY\tWORKLOADS")
	for _, s := range all {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", s.Name, strings.Join(s.ProfileNames(), ","),
			strings.Join(s.Paths, " "), strings.Join(s.Workloads, ","))
	}
	return tw.Flush()
}

func suiteRun(ctx context.Context, name, profile string, runs int, local bool, kernel, vs string, vm invm.VMConfig) ([]*suites.Result, error) {
	cache, err := images.CacheDir()
	if err != nil {
		return nil, err
	}
	if local {
		s, err := suites.Lookup(name)
		if err != nil {
			return nil, err
		}
		cfg, err := s.Resolve(profile)
		if err != nil {
			return nil, err
		}
		res, err := suites.RunLocal(ctx, cfg, runs, filepath.Join(cache, "fsimage"), stderr)
		if err != nil {
			return nil, err
		}
		return []*suites.Result{res}, nil
	}
	ks := []invm.Kernel{{Side: blame.Base, BzImage: kernel}}
	if vs != "" {
		ks = append(ks, invm.Kernel{Side: blame.Patched, BzImage: vs})
	}
	// A fixed number of rounds, each with the host's load read around it
	// and a busy one flagged rather than repeated: what a person reads
	// from the JSON is every round that ran.
	plan := invm.FixedPlan(profile, runs, stderr)
	plan.Quiet = suites.Quiet{Host: suites.ReadHostLoad(250 * time.Millisecond), Repeats: -1, Calibrate: suites.Calibrate}
	opts := invm.Options{Suite: name, Kernels: ks, Plan: plan, VM: vm, Log: terminalLog(stderr)}
	// A patched kernel patchbot built keeps the lines its series
	// changed: their functions' calls are counted on both kernels, as
	// the pipeline counts them.
	var (
		changed invm.Changed
		counted bool
	)
	if vs != "" {
		if b, err := images.BuildAt(vs); err != nil {
			fmt.Fprintf(stderr, "the changed functions' calls are not counted: %v\n", err)
		} else if b.Series > 0 {
			// The base's record, when patchbot built it too, gives
			// its code to compare with.
			base, _ := images.BuildAt(kernel)
			changed = invm.ChangedFunctions(base, b)
			opts.Probes, counted = changed.Probes(), true
		}
	}
	results, err := invm.Run(ctx, opts)
	if err == nil && counted {
		invm.NoteChanged(results, changed)
	}
	return results, err
}

// printResults prints the mean over rounds of every metric per kernel, and
// the patched/base ratio when there are two. Statistics proper (spread,
// significance) are the reports' job; this is a quick look.
func printResults(w io.Writer, results []*suites.Result) {
	for _, r := range results {
		fmt.Fprintf(w, "%s: %s (%s), %s, %d CPUs, profile %s\n", r.Kernel, r.KernelRelease, r.Suite, r.Accel, r.CPUs, r.Profile)
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
	hdr := "WORKLOAD\tPARAMS\tMETRIC\tUNIT\t"
	for _, r := range results {
		hdr += r.Kernel + "\t"
	}
	if len(results) == 2 {
		hdr += "RATIO\t"
	}
	fmt.Fprintln(tw, hdr)
	for _, m := range judge.Means(results) {
		line := fmt.Sprintf("%s\t%s\t%s\t%s\t", m.Workload, m.Params, m.Metric, m.Unit)
		for _, v := range m.Means {
			line += fmt.Sprintf("%.4g\t", v)
		}
		if len(m.Means) == 2 && m.Means[0] != 0 {
			line += fmt.Sprintf("%.2f\t", m.Means[1]/m.Means[0])
		}
		fmt.Fprintln(tw, line)
	}
	tw.Flush()
	for _, r := range results {
		for _, m := range r.Missing {
			fmt.Fprintf(w, "%s: missing %s/%s: %s\n", r.Kernel, m.Workload, m.Metric, m.Reason)
		}
		if m := r.Model; m != nil {
			for _, p := range []string{m.BasePolicy, m.PatchedPolicy} {
				if v, ok := m.WakeupsPerRelease[p]; ok {
					fmt.Fprintf(w, "%s: model (%s) predicts %.2f wake-ups per release for %s\n", r.Kernel, p, v, m.Shape)
				}
			}
		}
		var notes []string
		for k, v := range r.Notes {
			notes = append(notes, k+": "+v)
		}
		sort.Strings(notes)
		for _, n := range notes {
			fmt.Fprintf(w, "%s: note %s\n", r.Kernel, n)
		}
		for _, c := range r.Calls {
			if c.Err != "" {
				fmt.Fprintf(w, "%s: calls of %s: %s\n", r.Kernel, c.Func, c.Err)
				continue
			}
			fmt.Fprintf(w, "%s: calls of %s: %d in %d rounds\n", r.Kernel, c.Func, c.Count, c.Rounds)
		}
	}
}
