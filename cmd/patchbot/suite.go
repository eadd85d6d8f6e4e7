package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"text/tabwriter"

	"github.com/patchbot/patchbot/images"
	"github.com/patchbot/patchbot/images/fsimage"
	"github.com/patchbot/patchbot/suites"
	"github.com/patchbot/patchbot/suites/vmrun"
	"github.com/patchbot/patchbot/vmrunner/proto"
)

func init() {
	register(command{
		name:  "suite",
		usage: "list the performance suites, or run one (--local, or in VMs with --kernel [--vs])",
		run:   runSuiteCmd,
	})
}

const suiteUsage = `usage:
  patchbot suite list
  patchbot suite run NAME [--profile P] [--rounds N] --local [--json]
  patchbot suite run NAME [--profile P] [--rounds N] --kernel BZIMAGE [--vs BZIMAGE2] [--cpus N] [--mem MiB] [--json]`

func runSuiteCmd(ctx context.Context, args []string) error {
	if len(args) == 0 {
		fmt.Fprintln(os.Stderr, suiteUsage)
		return exitError{2}
	}
	switch args[0] {
	case "list":
		return suiteList(os.Stdout)
	case "run":
		return suiteRun(ctx, args[1:])
	}
	fmt.Fprintln(os.Stderr, suiteUsage)
	return exitError{2}
}

func suiteList(w io.Writer) error {
	all, err := suites.All()
	if err != nil {
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "SUITE\tPROFILES\tSELECTED BY\tWORKLOADS")
	for _, s := range all {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", s.Name, strings.Join(s.ProfileNames(), ","),
			strings.Join(s.Paths, " "), strings.Join(s.Workloads, ","))
	}
	return tw.Flush()
}

func suiteRun(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("suite run", flag.ContinueOnError)
	profile := fs.String("profile", "quick", "profile of the suite")
	rounds := fs.Int("rounds", 1, "rounds per kernel (interleaved across kernels)")
	local := fs.Bool("local", false, "run on this machine and its kernel (root needed)")
	kernel := fs.String("kernel", "", "bzImage to boot (the base)")
	vs := fs.String("vs", "", "second bzImage to compare against --kernel (the patched)")
	cpus := fs.Int("cpus", vmrun.DefaultCPUs, "vCPUs of each VM")
	mem := fs.Int("mem", vmrun.DefaultMemMiB, "memory of each VM in MiB")
	asJSON := fs.Bool("json", false, "print the results as JSON")
	// Flags may follow the suite name: patchbot suite run NAME --local.
	var name string
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		name, args = args[0], args[1:]
	}
	if err := fs.Parse(args); err != nil {
		return exitError{2}
	}
	if name == "" && fs.NArg() == 1 {
		name = fs.Arg(0)
	} else if fs.NArg() != 0 || name == "" {
		fmt.Fprintln(os.Stderr, suiteUsage)
		return exitError{2}
	}
	if *local == (*kernel != "") {
		return errors.New("give exactly one of --local and --kernel")
	}
	if *vs != "" && *kernel == "" {
		return errors.New("--vs needs --kernel")
	}
	var results []*suites.Result
	var err error
	if *local {
		results, err = runLocal(ctx, name, *profile, *rounds)
	} else {
		ks := []vmrun.Kernel{{Label: "base", BzImage: *kernel}}
		if *vs != "" {
			ks = append(ks, vmrun.Kernel{Label: "patched", BzImage: *vs})
		}
		results, err = vmrun.Run(ctx, vmrun.Options{
			Suite: name, Profile: *profile, Kernels: ks, Rounds: *rounds,
			CPUs: *cpus, MemMiB: *mem, Progress: os.Stderr,
		})
	}
	if err != nil {
		return err
	}
	if *asJSON {
		enc := json.NewEncoder(os.Stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(results)
	}
	printResults(os.Stdout, results)
	return nil
}

func runLocal(ctx context.Context, name, profile string, rounds int) ([]*suites.Result, error) {
	s, err := suites.Lookup(name)
	if err != nil {
		return nil, err
	}
	cfg, err := s.Resolve(profile)
	if err != nil {
		return nil, err
	}
	params := map[string]string{suites.ParamKernel: "local", suites.ParamAccel: "host"}
	if cfg.Image != nil {
		cache, err := images.CacheDir()
		if err != nil {
			return nil, err
		}
		img, _, err := fsimage.Build(ctx, *cfg.Image, filepath.Join(cache, "fsimage"))
		if err != nil {
			return nil, err
		}
		params[suites.ParamImage] = img
		defer suites.Release()
	}
	var all []*suites.Result
	for n := 1; n <= rounds; n++ {
		res, err := suites.RunRound(ctx, proto.Request{Op: proto.OpRunSuite, Suite: name, Profile: cfg.Profile, Round: n, Params: params})
		if err != nil {
			return nil, err
		}
		fmt.Fprintf(os.Stderr, "%s round %d/%d local %6.1fs\n", name, n, rounds, res.Finished.Sub(res.Started).Seconds())
		all = append(all, res)
	}
	res := suites.Merge(all)
	notes, err := suites.ModelNotes(cfg)
	if err != nil {
		return nil, err
	}
	for k, v := range notes {
		res.Notes[k] = v
	}
	return []*suites.Result{res}, nil
}

// printResults prints the mean over rounds of every metric per kernel, and
// the patched/base ratio when there are two. Statistics proper (spread,
// significance) are the reports' job; this is a quick look.
func printResults(w io.Writer, results []*suites.Result) {
	type key struct{ workload, params, metric, unit string }
	means := make([]map[key]float64, len(results))
	var keys []key
	seen := map[key]bool{}
	for i, r := range results {
		sum, n := map[key]float64{}, map[key]int{}
		for _, s := range r.Samples {
			k := key{s.Workload, formatParams(s.Params), s.Metric, s.Unit}
			sum[k] += s.Value
			n[k]++
			if !seen[k] {
				seen[k] = true
				keys = append(keys, k)
			}
		}
		means[i] = map[key]float64{}
		for k := range sum {
			means[i][k] = sum[k] / float64(n[k])
		}
	}
	sort.SliceStable(keys, func(i, j int) bool { return keys[i].workload < keys[j].workload })
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
	for _, k := range keys {
		line := fmt.Sprintf("%s\t%s\t%s\t%s\t", k.workload, k.params, k.metric, k.unit)
		for i := range results {
			line += fmt.Sprintf("%.4g\t", means[i][k])
		}
		if len(results) == 2 && means[0][k] != 0 {
			line += fmt.Sprintf("%.2f\t", means[1][k]/means[0][k])
		}
		fmt.Fprintln(tw, line)
	}
	tw.Flush()
	for _, r := range results {
		for _, m := range r.Missing {
			fmt.Fprintf(w, "%s: missing %s/%s: %s\n", r.Kernel, m.Workload, m.Metric, m.Reason)
		}
		var notes []string
		for k, v := range r.Notes {
			notes = append(notes, k+": "+v)
		}
		sort.Strings(notes)
		for _, n := range notes {
			fmt.Fprintf(w, "%s: note %s\n", r.Kernel, n)
		}
	}
}

func formatParams(p map[string]string) string {
	var parts []string
	for k, v := range p {
		parts = append(parts, k+"="+v)
	}
	sort.Strings(parts)
	return strings.Join(parts, ",")
}
