// Package invm measures a suite in VMs from the host, A against B: it
// stages the suite's squashfs image, packs an initramfs with the guest agent
// for each kernel, boots one VM per kernel with the same shape, and runs
// rounds interleaved across them (suites.RunAB). It is apart from package
// suites, which the guest agent links, so that the agent does not carry the
// VM runner.
//
// Errors say which kernel failed (blame.On): a base kernel that does not
// boot is the infrastructure's, the patched kernel's the patch's.
package invm

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/patchbot/patchbot/blame"
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
	Side    blame.Kernel // base or patched: who is to blame when it fails
	BzImage string
	// Cmdline is added to the kernel command line (tests script the fake
	// backend's failures with it).
	Cmdline string
}

// Plan is how every suite of a test is measured: the profile, when the
// rounds stop, how the host is kept quiet around them, and where progress
// goes. It is made once per test (the pipeline's, a bisection step's, a
// command's) and handed whole from Job to Spec to Options.
type Plan struct {
	Profile string // default suites.DefaultProfile
	// Stop says when the rounds stop: suites.Fixed(n), or judge.Rounds's
	// sequential rule; nil runs one round.
	Stop suites.Stopping
	// Quiet keeps the host quiet around the rounds; the zero value reads
	// nothing.
	Quiet suites.Quiet
	// Progress gets a line per stage and per round; nil for none.
	Progress io.Writer
}

// bootLimit is how long a suite's VM may take to boot while its console
// keeps growing (vmrunner.Spec.BootLimit); a quiet console is a hang at
// vmrunner.DefaultBootTimeout all the same. Under instruction-counted
// time a loaded host slows a guest without stopping it: at load 15 a
// first boot here took past the 60 s deadline and cost the whole run
// (docs/vmrunner.md).
const bootLimit = 5 * time.Minute

// FixedPlan measures runs rounds a side, interleaved, with nothing read of
// the host.
func FixedPlan(profile string, runs int, progress io.Writer) Plan {
	return Plan{Profile: profile, Stop: suites.Fixed(runs), Progress: progress}
}

func (p Plan) stop() suites.Stopping {
	if p.Stop == nil {
		return suites.Fixed(1)
	}
	return p.Stop
}

// Options of one run. Zero values take the defaults below.
type Options struct {
	Suite   string
	Kernels []Kernel
	Plan    Plan
	VM      VMConfig
	// CacheDir holds the suite images; default images.CacheDir()/fsimage.
	CacheDir string
	// Log gets the VMs' launch lines (each QEMU command line or domain)
	// and boot times; default slog.Default(), a daemon's structured log.
	// A terminal wants only the progress lines and warnings.
	Log *slog.Logger
	// Reuse, with two kernels (base first) and a Plan whose Stop reuses
	// base rounds (Reusing), takes the base's rounds from an earlier run on
	// the same base when they are kept and the host has not drifted
	// (reuse.go); nil measures both afresh.
	Reuse *Reuse
	// Probes names the functions whose calls every round counts, on
	// both kernels alike (suites.ParamProbes); "" counts none.
	Probes string
}

// VMConfig is the VM shape and backend of a measurement (the `vm:` part of
// patchbot.yaml).
type VMConfig struct {
	Backend string   `yaml:"backend"` // qemu, libvirt (or fake, in tests)
	URIs    []string `yaml:"libvirt_uris"`
	CPUs    int      `yaml:"cpus"`
	MemMiB  int      `yaml:"mem_mib"`
	// Concurrency bounds the VMs running at once.
	Concurrency int `yaml:"concurrency"`
	// Boot is the guests' boot path: "legacy" (the default: the bzImage on
	// the pc machine) or "pvh" (the kernel's ELF on microvm, about a
	// second faster to boot). Measurements use legacy: every recorded
	// A/A and known answer was taken on it. Under TCG microvm has no
	// HPET, so the PVH guest has a fine clock only when vmrunner can give
	// it the host's TSC rate (vmrunner.TCGClockCmdline); where it cannot,
	// a suite round refuses the guest's jiffy clock (docs/vmrunner.md).
	// Under KVM the PVH guest has kvm-clock.
	Boot string `yaml:"boot"`
	// Clock is how a TCG guest keeps time: "" (auto: instruction-counted
	// where this QEMU can, docs/vmrunner.md), "icount" (at the suite
	// profile's shift, icount_shift, else vmrunner.ICountShift),
	// "icount:N" (at shift N: 2^N ns an instruction, whatever the
	// profile says) or "host" (TCG's real time, as every measurement
	// before 2026-12-05). KVM guests keep real time.
	Clock string `yaml:"clock"`
}

// Defaults: the shape the figures in docs/suites.md were measured in. Two
// vCPUs: on a 2-core host under TCG a 4-vCPU guest made each
// cache-contention round 2-5x slower, and two CPUs already make 64 threads
// queue for the cache.
const (
	DefaultCPUs    = 2
	DefaultMemMiB  = 1024
	DefaultBackend = "qemu"
)

// DefaultVM is the embedded default shape.
func DefaultVM() VMConfig {
	return VMConfig{Backend: DefaultBackend, CPUs: DefaultCPUs, MemMiB: DefaultMemMiB, Concurrency: 1}
}

// Validate checks the shape's ranges.
func (c VMConfig) Validate() error {
	var errs []error
	switch c.Backend {
	case "qemu", "libvirt", "fake":
	default:
		errs = append(errs, fmt.Errorf("vm.backend %q: want qemu or libvirt", c.Backend))
	}
	if c.CPUs < 1 || c.CPUs > 64 {
		errs = append(errs, fmt.Errorf("vm.cpus %d: want 1..64", c.CPUs))
	}
	if c.MemMiB < 256 {
		errs = append(errs, fmt.Errorf("vm.mem_mib %d: want at least 256", c.MemMiB))
	}
	if c.Concurrency < 1 {
		errs = append(errs, errors.New("vm.concurrency: want at least 1"))
	}
	if err := vmrunner.CheckClock(c.Clock); err != nil {
		errs = append(errs, fmt.Errorf("vm.clock: %w", err))
	}
	switch c.Boot {
	case "", vmrunner.BootLegacy, vmrunner.BootPVH:
	default:
		errs = append(errs, fmt.Errorf("vm.boot %q: want %q or %q", c.Boot, vmrunner.BootLegacy, vmrunner.BootPVH))
	}
	return errors.Join(errs...)
}

func (c VMConfig) withDefaults() VMConfig {
	d := DefaultVM()
	if c.Backend == "" {
		c.Backend = d.Backend
	}
	if c.CPUs == 0 {
		c.CPUs = d.CPUs
	}
	if c.MemMiB == 0 {
		c.MemMiB = d.MemMiB
	}
	return c
}

// poolConfig is the VM pool's configuration for a run of n kernels of a
// resolved profile: every side is up at once, for interleaving, and the
// guests keep the profile's icount shift where their clock is
// instruction-counted.
func poolConfig(vm VMConfig, cfg *suites.Config, n int, log *slog.Logger) vmrunner.Config {
	pcfg := vmrunner.Config{Limit: max(vm.Concurrency, n), Boot: vm.Boot, Clock: vm.Clock,
		ICountShift: cfg.Params.ICountShift, Log: log}
	if pcfg.Boot == "" {
		pcfg.Boot = vmrunner.BootLegacy
	}
	if len(vm.URIs) > 0 {
		pcfg.URI = vm.URIs[0]
	}
	return pcfg
}

// Run boots every kernel and returns one Result per kernel, in order.
func Run(ctx context.Context, o Options) ([]*suites.Result, error) {
	if len(o.Kernels) == 0 {
		return nil, errors.New("no kernels given")
	}
	vm := o.VM.withDefaults()
	progress := o.Plan.Progress
	if progress == nil {
		progress = io.Discard
	}
	s, err := suites.Lookup(o.Suite)
	if err != nil {
		return nil, err
	}
	cfg, err := s.Resolve(o.Plan.Profile)
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
	if o.Probes != "" {
		params[suites.ParamProbes] = o.Probes
	}

	pool, err := vmrunner.New(vm.Backend, poolConfig(vm, cfg, len(o.Kernels), o.Log))
	if err != nil {
		return nil, err
	}
	defer pool.Close()

	specs := make([]vmrunner.Spec, len(o.Kernels))
	for i, k := range o.Kernels {
		if _, err := os.Stat(k.BzImage); err != nil {
			return nil, fmt.Errorf("kernel %s: %w", k.Side, err)
		}
		initrd := ""
		if vm.Backend != "fake" { // the fake runs the agent in this process
			if initrd, err = initramfs.ForKernel(ctx, k.BzImage, initramfs.Options{}); err != nil {
				return nil, fmt.Errorf("initramfs for %s: %w", k.Side, err)
			}
		}
		specs[i] = vmrunner.Spec{
			Name: string(k.Side), Kernel: k.BzImage, Initramfs: initrd, Cmdline: k.Cmdline,
			CPUs: vm.CPUs, MemMiB: vm.MemMiB, Disks: disks, BootLimit: bootLimit,
		}
	}
	// Every VM boots at once: no round runs yet, and the boots overlap
	// instead of waiting on each other.
	insts := make([]vmrunner.Instance, len(specs))
	infos := make([]vmrunner.Info, len(specs))
	errs := make([]error, len(specs))
	var wg sync.WaitGroup
	for i, spec := range specs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			inst, err := pool.Create(ctx, spec)
			if err != nil {
				errs[i] = fmt.Errorf("creating the %s VM: %w", spec.Name, err)
				return
			}
			insts[i] = inst
			if infos[i], err = inst.Boot(ctx); err != nil {
				errs[i] = fmt.Errorf("booting: %w", blame.On(o.Kernels[i].Side, err))
			}
		}()
	}
	wg.Wait()
	recheck(ctx, pool, o.Kernels, specs, insts, infos, errs, progress)
	for _, inst := range insts {
		if inst != nil {
			defer inst.Close()
		}
	}
	// The first side's failure is the one reported: the base's, when both
	// failed, is the infrastructure's and says more than the patch's.
	for _, err := range errs {
		if err != nil {
			return nil, err
		}
	}
	var sides []suites.Side
	for i, k := range o.Kernels {
		info := infos[i]
		fmt.Fprintf(progress, "booted %s: %s, %s, %d vCPUs, %d MiB, in %s\n",
			k.Side, info.KernelRelease, info.Accel, vm.CPUs, vm.MemMiB, info.BootDuration.Round(1e8))
		sides = append(sides, suites.Side{Label: string(k.Side), Kernel: k.Side, Guest: insts[i], Accel: info.Accel, Clock: info.Clock, Params: params,
			Reboot: rebooter(insts[i], string(k.Side), progress)})
	}
	pace(sides)
	var results []*suites.Result
	if rr, ok := o.Plan.Stop.(Reusing); ok && o.Reuse != nil && len(sides) == 2 {
		results, err = o.Reuse.run(ctx, cfg, sides, rr, o.Plan.Quiet, progress)
	} else {
		results, err = suites.RunAB(ctx, cfg, sides, o.Plan.stop(), o.Plan.Quiet, progress)
	}
	if err != nil {
		return nil, err
	}
	warned(results, insts)
	pred, err := suites.Predict(cfg)
	if err != nil {
		return nil, err
	}
	for _, r := range results {
		r.Model = pred
	}
	return results, nil
}

// rebooter is a side's Side.Reboot: the kernel booted once already, so a
// reboot that hangs or loses its VM is tried once more before it is the
// kernel's, as a first boot's is (recheck).
func rebooter(inst vmrunner.Instance, label string, progress io.Writer) func(context.Context) error {
	return func(ctx context.Context) error {
		_, err := inst.Reboot(ctx)
		if vmrunner.Recheck(err) {
			fmt.Fprintf(progress, "rebooting %s: %v; once more\n", label, err)
			_, err = inst.Reboot(ctx)
		}
		return err
	}
}

// recheck boots once more a patched kernel whose VM failed or hung where
// the base booted, and makes a second such failure the kernel's, with
// what the base did in the same VM (vmrunner.Compared: blame by
// comparison).
func recheck(ctx context.Context, pool vmrunner.Pool, kernels []Kernel, specs []vmrunner.Spec,
	insts []vmrunner.Instance, infos []vmrunner.Info, errs []error, progress io.Writer) {
	base := -1
	for i, k := range kernels {
		if k.Side == blame.Base && errs[i] == nil {
			base = i
		}
	}
	if base < 0 {
		return
	}
	for i, k := range kernels {
		if k.Side != blame.Patched || !vmrunner.Recheck(errs[i]) {
			continue
		}
		fmt.Fprintf(progress, "the %s kernel's VM failed where the base's booted (%v): booting it once more\n", k.Side, errs[i])
		if insts[i] != nil {
			insts[i].Close()
			insts[i] = nil
		}
		inst, err := pool.Create(ctx, specs[i])
		if err != nil {
			errs[i] = fmt.Errorf("creating the %s VM: %w", specs[i].Name, err)
			continue
		}
		insts[i] = inst
		if infos[i], err = inst.Boot(ctx); err != nil {
			errs[i] = fmt.Errorf("booting: %w", blame.On(k.Side, vmrunner.Compared(err, specs[i], infos[base])))
		} else {
			errs[i] = nil
		}
	}
}

// Spec is one suite's A/B measurement of a base and a patched build.
type Spec struct {
	Suite   string
	Plan    Plan
	Base    *images.Build
	Patched *images.Build
}

// Outcome is what a Tester measured, and the VM it measured in.
type Outcome struct {
	Base, Patched *suites.Result
	Backend       string
	Accel         string
	Clock         string // the guests' time: "host" or "icount" (vmrunner.Info.Clock)
	CPUs, MemMiB  int
}

// Tester measures suites in VMs of one shape: one VM per kernel, rounds
// interleaved. It is what the pipeline's tests run through.
type Tester struct {
	VM VMConfig
	// Cmdline is added to both kernels' command lines (tests).
	BaseCmdline, PatchedCmdline string
	CacheDir                    string
	// Log is Options.Log: nil for slog.Default().
	Log *slog.Logger
	// Bases keeps base kernels' rounds for the next series on the same
	// base, config, suite, profile, VM shape and host (store.Store is
	// one); nil measures every base afresh.
	Bases Bases
}

// Test runs one suite on the base and patched kernels.
func (t *Tester) Test(ctx context.Context, s Spec) (*Outcome, error) {
	var reuse *Reuse
	if _, ok := s.Plan.Stop.(Reusing); ok && t.Bases != nil && s.Base != nil && s.Base.Commit != "" && s.Base != s.Patched {
		reuse = &Reuse{Bases: t.Bases, Key: BaseKey(s.Suite, s.Plan.Profile, s.Base, t.VM.withDefaults()), Log: t.Log}
	}
	changed := ChangedFunctions(s.Base, s.Patched)
	res, err := Run(ctx, Options{
		Suite: s.Suite, Plan: s.Plan, VM: t.VM, CacheDir: t.CacheDir, Log: t.Log, Reuse: reuse, Probes: changed.Probes(),
		Kernels: []Kernel{
			{Side: blame.Base, BzImage: s.Base.BzImage, Cmdline: t.BaseCmdline},
			{Side: blame.Patched, BzImage: s.Patched.BzImage, Cmdline: t.PatchedCmdline},
		},
	})
	if err != nil {
		return nil, err
	}
	if len(res) != 2 {
		return nil, fmt.Errorf("suite %s: got %d results, want 2", s.Suite, len(res))
	}
	if s.Patched != nil && s.Patched.Series > 0 {
		NoteChanged(res, changed)
	}
	vm := t.VM.withDefaults()
	return &Outcome{Base: res[0], Patched: res[1], Backend: vm.Backend, Accel: res[0].Accel, Clock: res[0].Clock,
		CPUs: res[0].CPUs, MemMiB: res[0].MemMiB}, nil
}
