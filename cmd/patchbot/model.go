package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/patchbot/patchbot/suites/refcache"
)

func init() {
	register(command{
		name:  "model",
		usage: "simulate the squashfs cache under a wake-up policy, or explore it exhaustively (model check)",
		run:   runModel,
	})
}

const modelUsage = `usage:
  patchbot model --policy P --threads T --entries E --blocks B --gets G [--pattern uniform|zipf|fragments] [--json]
  patchbot model check --policy P --threads T --entries E --blocks B [--gets-per-thread N] [--traces] [--json]

P is wake-all (mainline 6.1), exclusive, keyed (the thundering-herd patch) or all.
"model check" exits 1 when it finds a violation.`

func runModel(ctx context.Context, args []string) error {
	if len(args) > 0 && args[0] == "check" {
		return runModelCheck(ctx, os.Stdout, args[1:])
	}
	return runModelSim(os.Stdout, args)
}

// policies parses --policy, where "all" means every policy.
func policies(s string) ([]refcache.Policy, error) {
	if s == "all" {
		return refcache.Policies, nil
	}
	p, err := refcache.ParsePolicy(s)
	if err != nil {
		return nil, err
	}
	return []refcache.Policy{p}, nil
}

// newModelFlags declares the flags both forms share, with defaults fit for
// each: a queuing workload for the simulation, a small shape for the check.
func newModelFlags(name string, threads, entries, blocks int) (*flag.FlagSet, *string, *refcache.Config, *bool) {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.Usage = func() { fmt.Fprintln(fs.Output(), modelUsage); fs.PrintDefaults() }
	cfg := &refcache.Config{}
	policy := fs.String("policy", "all", "wake-up policy: wake-all, exclusive, keyed, or all")
	fs.IntVar(&cfg.Threads, "threads", threads, "threads calling squashfs_cache_get/put")
	fs.IntVar(&cfg.Entries, "entries", entries, "cache entries (8: metadata cache, 3: fragment cache)")
	fs.IntVar(&cfg.Blocks, "blocks", blocks, "distinct blocks the gets draw from")
	jsonOut := fs.Bool("json", false, "print JSON")
	return fs, policy, cfg, jsonOut
}

func parseModelFlags(fs *flag.FlagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return exitError{0}
		}
		return exitError{2}
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(fs.Output(), "unexpected arguments: %s\n%s\n", strings.Join(fs.Args(), " "), modelUsage)
		return exitError{2}
	}
	return nil
}

func runModelSim(out io.Writer, args []string) error {
	fs, policy, cfg, jsonOut := newModelFlags("model", 64, 8, 1024)
	fs.IntVar(&cfg.Gets, "gets", 100000, "total squashfs_cache_get calls")
	pattern := fs.String("pattern", string(refcache.Uniform), "block-access pattern: uniform, zipf, fragments")
	fs.Uint64Var(&cfg.Seed, "seed", 1, "random seed of the access pattern")
	fs.DurationVar(&cfg.ReadLatency, "read-latency", refcache.DefaultReadLatency, "time to read and decompress one block")
	fs.DurationVar(&cfg.HoldTime, "hold", refcache.DefaultHoldTime, "time between get and put")
	fs.DurationVar(&cfg.ThinkTime, "think", refcache.DefaultThinkTime, "time between a put and the next get")
	fs.DurationVar(&cfg.WakeLatency, "wake-latency", refcache.DefaultWakeLatency, "time from a wake to the wakee running")
	fs.IntVar(&cfg.StallThread, "stall-thread", 0, "thread that runs late after each wake (with --stall-delay)")
	fs.DurationVar(&cfg.StallDelay, "stall-delay", 0, "how late --stall-thread runs after a wake (the reviewer's priority inversion)")
	if err := parseModelFlags(fs, args); err != nil {
		return err
	}
	cfg.Pattern = refcache.Pattern(*pattern)
	ps, err := policies(*policy)
	if err != nil {
		return err
	}
	var all []refcache.Stats
	for _, p := range ps {
		c := *cfg
		c.Policy = p
		st, err := refcache.Simulate(c)
		if err != nil {
			return fmt.Errorf("simulating the squashfs cache: %w", err)
		}
		all = append(all, st)
	}
	if *jsonOut {
		enc := json.NewEncoder(out)
		enc.SetIndent("", "  ")
		if len(all) == 1 {
			return enc.Encode(all[0])
		}
		return enc.Encode(all)
	}
	fmt.Fprintf(out, "%d threads, %d entries, %d blocks (%s), %d gets, read %v, wake latency %v\n\n",
		cfg.Threads, cfg.Entries, cfg.Blocks, cfg.Pattern, cfg.Gets, cfg.ReadLatency, cfg.WakeLatency)
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "policy\treleases\twakeups\twakeups/release\tspurious\trequeues\thandoffs\tstranded\tops/s\tmean get\tmax get\t")
	for _, s := range all {
		fmt.Fprintf(tw, "%s\t%d\t%d\t%.2f\t%d\t%d\t%d\t%v\t%.0f\t%v\t%v\t\n", s.Policy, s.Releases, s.Wakeups, s.WakeupsPerRelease,
			s.SpuriousWakeups, s.Requeues, s.Handoffs, us(s.StrandedNs), s.OpsPerSec, us(int64(s.MeanGetNs)), us(s.MaxGetNs))
	}
	if err := tw.Flush(); err != nil || cfg.StallDelay == 0 {
		return err
	}
	fmt.Fprintf(out, "\nthread %d runs %v late after each wake:\n", cfg.StallThread, cfg.StallDelay)
	tw = tabwriter.NewWriter(out, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "policy\twakes to it\tothers blocked behind it\tper wake\tits max get\t")
	for _, s := range all {
		per := time.Duration(0)
		if s.StallWakes > 0 {
			per = time.Duration(s.StallBlockedNs / s.StallWakes)
		}
		fmt.Fprintf(tw, "%s\t%d\t%v\t%v\t%v\t\n", s.Policy, s.StallWakes, us(s.StallBlockedNs), per.Round(time.Microsecond), us(s.StallMaxGetNs))
	}
	return tw.Flush()
}

func runModelCheck(ctx context.Context, out io.Writer, args []string) error {
	fs, policy, cfg, jsonOut := newModelFlags("model check", 3, 2, 2)
	fs.IntVar(&cfg.GetsPerThread, "gets-per-thread", 1, "gets each thread makes")
	fs.IntVar(&cfg.MaxStates, "max-states", 20_000_000, "stop exploring after this many states")
	traces := fs.Bool("traces", false, "also print a trace for each observed distinguishing state")
	if err := parseModelFlags(fs, args); err != nil {
		return err
	}
	ps, err := policies(*policy)
	if err != nil {
		return err
	}
	violated := false
	var all []refcache.CheckResult
	for _, p := range ps {
		c := *cfg
		c.Policy = p
		r, err := refcache.CheckContext(ctx, c)
		if err != nil {
			return fmt.Errorf("exploring the squashfs cache: %w", err)
		}
		violated = violated || len(r.Violations) > 0
		all = append(all, r)
		if !*jsonOut {
			writeCheck(out, r, *traces)
		}
	}
	if *jsonOut {
		enc := json.NewEncoder(out)
		enc.SetIndent("", "  ")
		var err error
		if len(all) == 1 {
			err = enc.Encode(all[0])
		} else {
			err = enc.Encode(all)
		}
		if err != nil {
			return err
		}
	}
	if violated {
		return exitError{1}
	}
	return nil
}

func writeCheck(out io.Writer, r refcache.CheckResult, traces bool) {
	complete := "all reachable states"
	if !r.Complete {
		complete = "INCOMPLETE: stopped at --max-states"
	}
	fmt.Fprintf(out, "%s: %d threads × %d gets, %d entries, %d blocks: %d states, %d transitions (%s) in %v, %.0f states/s\n",
		r.Policy, r.Threads, r.GetsPerThread, r.Entries, r.Blocks, r.States, r.Transitions, complete,
		r.Elapsed.Round(time.Millisecond), r.StatesPerSec)
	if len(r.Violations) == 0 {
		fmt.Fprintln(out, "  no deadlock, lost wake-up or stranded capacity")
	}
	for _, v := range r.Violations {
		fmt.Fprintf(out, "\nVIOLATION %s in %d states: %s\n", v.Kind, v.Count, v.What)
		for _, l := range v.Trace {
			fmt.Fprintln(out, "  "+l)
		}
	}
	for _, o := range r.Observations {
		fmt.Fprintf(out, "  observed %s (%d): %s\n", o.Kind, o.Count, o.What)
		if traces {
			for _, l := range o.Trace {
				fmt.Fprintln(out, "    "+l)
			}
		}
	}
	fmt.Fprintln(out)
}

func us(ns int64) time.Duration { return time.Duration(ns).Round(time.Microsecond) }
