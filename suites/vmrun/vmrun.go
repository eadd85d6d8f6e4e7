// Package vmrun runs a suite in VMs from the host: it stages the suite's
// squashfs image, packs an initramfs with the guest agent for each kernel,
// boots one VM per kernel with the same shape, and runs rounds interleaved
// across them (suites.RunAB). It is apart from package suites, which the
// guest agent links, so that the agent does not carry the VM runner.
package vmrun

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/patchbot/patchbot/images"
	"github.com/patchbot/patchbot/images/fsimage"
	"github.com/patchbot/patchbot/images/initramfs"
	"github.com/patchbot/patchbot/suites"
	"github.com/patchbot/patchbot/vmrunner"
)

// A booted vmrunner.Instance is what suites.RunAB drives.
var _ suites.Guest = vmrunner.Instance(nil)

// Kernel is one side of a comparison.
type Kernel struct {
	Label   string // "base", "patched"
	BzImage string
}

// Options of one run. Zero values take the defaults below.
type Options struct {
	Suite   string
	Profile string // default "quick"
	Kernels []Kernel
	Rounds  int // default 1; a fixed number of rounds, unless Plan is set
	// Plan decides the number of rounds instead of Rounds (for example
	// reports.Plan's sequential rule).
	Plan    *suites.Plan
	CPUs    int // default DefaultCPUs, the same for every kernel
	MemMiB  int // default DefaultMemMiB
	Backend string
	Pool    vmrunner.Config
	// Progress gets a line per stage and per round; nil for none.
	Progress io.Writer
	// CacheDir holds the suite images; default images.CacheDir()/fsimage.
	CacheDir string
}

// Defaults: the shape the seed figures in docs/suites.md were measured in.
const (
	DefaultCPUs    = 4
	DefaultMemMiB  = 1024
	DefaultBackend = "qemu"
)

// Run boots every kernel and returns one Result per kernel, in order.
func Run(ctx context.Context, o Options) ([]*suites.Result, error) {
	if len(o.Kernels) == 0 {
		return nil, errors.New("no kernels given")
	}
	if o.Rounds == 0 {
		o.Rounds = 1
	}
	if o.CPUs == 0 {
		o.CPUs = DefaultCPUs
	}
	if o.MemMiB == 0 {
		o.MemMiB = DefaultMemMiB
	}
	if o.Backend == "" {
		o.Backend = DefaultBackend
	}
	progress := o.Progress
	if progress == nil {
		progress = io.Discard
	}
	s, err := suites.Lookup(o.Suite)
	if err != nil {
		return nil, err
	}
	cfg, err := s.Resolve(o.Profile)
	if err != nil {
		return nil, err
	}

	var disks []string
	params := map[string]string{}
	if cfg.Image != nil {
		dir := o.CacheDir
		if dir == "" {
			cache, err := images.CacheDir()
			if err != nil {
				return nil, err
			}
			dir = filepath.Join(cache, "fsimage")
		}
		img, cached, err := fsimage.Build(ctx, *cfg.Image, dir)
		if err != nil {
			return nil, fmt.Errorf("staging the %s image: %w", cfg.Suite, err)
		}
		fmt.Fprintf(progress, "image %s (cached: %v)\n", img, cached)
		disks = []string{img}
		params[suites.ParamImage] = "/dev/vda"
	}

	pcfg := o.Pool
	if pcfg.Limit < len(o.Kernels) {
		pcfg.Limit = len(o.Kernels) // every side is up at once, for interleaving
	}
	pool, err := vmrunner.New(o.Backend, pcfg)
	if err != nil {
		return nil, err
	}
	defer pool.Close()

	var sides []suites.Side
	for _, k := range o.Kernels {
		if _, err := os.Stat(k.BzImage); err != nil {
			return nil, fmt.Errorf("kernel %s: %w", k.Label, err)
		}
		initrd, err := initramfs.ForKernel(ctx, k.BzImage, initramfs.Options{})
		if err != nil {
			return nil, fmt.Errorf("initramfs for %s: %w", k.Label, err)
		}
		inst, err := pool.Create(ctx, vmrunner.Spec{
			Name: k.Label, Kernel: k.BzImage, Initramfs: initrd,
			CPUs: o.CPUs, MemMiB: o.MemMiB, Disks: disks,
		})
		if err != nil {
			return nil, fmt.Errorf("creating the %s VM: %w", k.Label, err)
		}
		defer inst.Close()
		info, err := inst.Boot(ctx)
		if err != nil {
			return nil, fmt.Errorf("booting %s: %w", k.Label, err)
		}
		fmt.Fprintf(progress, "booted %s: %s, %s, %d vCPUs, %d MiB, in %s\n",
			k.Label, info.KernelRelease, info.Accel, o.CPUs, o.MemMiB, info.BootDuration.Round(1e8))
		sides = append(sides, suites.Side{Label: k.Label, Guest: inst, Accel: info.Accel, Params: params})
	}
	plan := suites.FixedPlan(o.Rounds)
	if o.Plan != nil {
		plan = *o.Plan
	}
	results, err := suites.RunAB(ctx, cfg, sides, plan, progress)
	if err != nil {
		return nil, err
	}
	notes, err := suites.ModelNotes(cfg)
	if err != nil {
		return nil, err
	}
	for _, r := range results {
		for k, v := range notes {
			r.Notes[k] = v
		}
	}
	return results, nil
}
