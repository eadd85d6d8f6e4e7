package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/patchbot/patchbot/suites/refcache"
)

func init() {
	register(&command{
		name:    "model",
		summary: "simulate the squashfs cache under a wake-up policy",
		usage:   "model [--policy P] [--threads T] [--entries E] [--blocks B] [--gets G] [--pattern uniform|zipf|fragments] [--json]",
		desc: `Simulates the squashfs cache (suites/refcache, a reference model of
fs/squashfs/cache.c) under a wake-up policy — wake-all (mainline 6.1),
exclusive, keyed (the thundering-herd patch) or all — and prints wake-ups per
release, spurious wake-ups, hand-offs and get latency per policy.`,
		example: `patchbot model --policy all --threads 64 --entries 3 --pattern fragments`,
		flags:   modelSimFlags,
	})
	register(&command{
		name:    "model check",
		summary: "explore the squashfs cache model exhaustively for deadlocks and lost wake-ups",
		usage:   "model check [--policy P] [--threads T] [--entries E] [--blocks B] [--gets-per-thread N] [--traces] [--json]",
		desc: `Explores every interleaving of a small shape of the cache model and reports
deadlocks, lost wake-ups and waiters left asleep with a free entry, with a
trace for each. Exits 1 when it finds a violation.`,
		example: `patchbot model check --policy keyed --threads 3 --entries 1 --blocks 2 --gets-per-thread 2`,
		flags:   modelCheckFlags,
	})
}

// policies parses --policy, where "all" means every policy.
func policies(s string) ([]refcache.Policy, error) {
	if s == "all" {
		return refcache.Policies, nil
	}
	p, err := refcache.ParsePolicy(s)
	if err != nil {
		return nil, usageError{err.Error()}
	}
	return []refcache.Policy{p}, nil
}

// modelFlags declares the flags both forms share, with defaults fit for
// each: a queuing workload for the simulation, a small shape for the check.
func modelFlags(fs *flag.FlagSet, threads, entries, blocks int) (*string, *refcache.Config, *bool) {
	cfg := &refcache.Config{}
	policy := fs.String("policy", "all", "wake-up policy: wake-all, exclusive, keyed, or all")
	fs.IntVar(&cfg.Threads, "threads", threads, "threads calling squashfs_cache_get/put")
	fs.IntVar(&cfg.Entries, "entries", entries, "cache entries (8: metadata cache, 3: fragment cache)")
	fs.IntVar(&cfg.Blocks, "blocks", blocks, "distinct blocks the gets draw from")
	jsonOut := fs.Bool("json", false, "print JSON (schema 1): {\"schema\": 1, \"results\": [one per policy]}")
	return policy, cfg, jsonOut
}

func checkShape(cfg *refcache.Config) error {
	switch {
	case cfg.Threads < 1:
		return usagef("--threads %d: want at least 1", cfg.Threads)
	case cfg.Entries < 1:
		return usagef("--entries %d: want at least 1", cfg.Entries)
	case cfg.Blocks < 1:
		return usagef("--blocks %d: want at least 1", cfg.Blocks)
	}
	return nil
}

func modelSimFlags(fs *flag.FlagSet) func(context.Context, []string) error {
	policy, cfg, jsonOut := modelFlags(fs, 64, 8, 1024)
	fs.IntVar(&cfg.Gets, "gets", 100000, "total squashfs_cache_get calls")
	pattern := fs.String("pattern", string(refcache.Uniform), "block-access pattern: uniform, zipf, fragments")
	fs.Uint64Var(&cfg.Seed, "seed", 1, "random seed of the access pattern")
	fs.DurationVar(&cfg.ReadLatency, "read-latency", refcache.DefaultReadLatency, "time to read and decompress one block")
	fs.DurationVar(&cfg.HoldTime, "hold", refcache.DefaultHoldTime, "time between get and put")
	fs.DurationVar(&cfg.ThinkTime, "think", refcache.DefaultThinkTime, "time between a put and the next get")
	fs.DurationVar(&cfg.WakeLatency, "wake-latency", refcache.DefaultWakeLatency, "time from a wake to the wakee running")
	fs.IntVar(&cfg.StallThread, "stall-thread", 0, "thread that runs late after each wake (with --stall-delay)")
	fs.DurationVar(&cfg.StallDelay, "stall-delay", 0, "how late --stall-thread runs after a wake (the reviewer's priority inversion)")
	return func(ctx context.Context, args []string) error {
		if err := checkShape(cfg); err != nil {
			return err
		}
		if cfg.Gets < 1 {
			return usagef("--gets %d: want at least 1", cfg.Gets)
		}
		switch refcache.Pattern(*pattern) {
		case refcache.Uniform, refcache.Zipf, refcache.Fragments:
		default:
			return usagef("--pattern %q: want uniform, zipf or fragments", *pattern)
		}
		for _, d := range []time.Duration{cfg.ReadLatency, cfg.HoldTime, cfg.ThinkTime, cfg.WakeLatency, cfg.StallDelay} {
			if d < 0 {
				return usagef("negative duration %v", d)
			}
		}
		if cfg.StallThread < 0 || cfg.StallThread >= cfg.Threads {
			return usagef("--stall-thread %d: want 0..%d", cfg.StallThread, cfg.Threads-1)
		}
		cfg.Pattern = refcache.Pattern(*pattern)
		ps, err := policies(*policy)
		if err != nil {
			return err
		}
		return runModelSim(stdout, cfg, ps, *jsonOut)
	}
}

func runModelSim(out io.Writer, cfg *refcache.Config, ps []refcache.Policy, jsonOut bool) error {
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
	if jsonOut {
		return writeJSON(out, struct {
			Schema  int              `json:"schema"`
			Results []refcache.Stats `json:"results"`
		}{schemaVersion, all})
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

func modelCheckFlags(fs *flag.FlagSet) func(context.Context, []string) error {
	policy, cfg, jsonOut := modelFlags(fs, 3, 2, 2)
	fs.IntVar(&cfg.GetsPerThread, "gets-per-thread", 1, "gets each thread makes")
	fs.IntVar(&cfg.MaxStates, "max-states", 20_000_000, "stop exploring after this many states (at least 1)")
	traces := fs.Bool("traces", false, "also print a trace for each observed distinguishing state")
	return func(ctx context.Context, args []string) error {
		if err := checkShape(cfg); err != nil {
			return err
		}
		if cfg.GetsPerThread < 1 {
			return usagef("--gets-per-thread %d: want at least 1", cfg.GetsPerThread)
		}
		if cfg.MaxStates < 1 {
			return usagef("--max-states %d: want at least 1", cfg.MaxStates)
		}
		ps, err := policies(*policy)
		if err != nil {
			return err
		}
		return runModelCheck(ctx, stdout, cfg, ps, *jsonOut, *traces)
	}
}

func runModelCheck(ctx context.Context, out io.Writer, cfg *refcache.Config, ps []refcache.Policy, jsonOut, traces bool) error {
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
		if !jsonOut {
			writeCheck(out, r, traces)
		}
	}
	if jsonOut {
		if err := writeJSON(out, struct {
			Schema  int                    `json:"schema"`
			Results []refcache.CheckResult `json:"results"`
		}{schemaVersion, all}); err != nil {
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
