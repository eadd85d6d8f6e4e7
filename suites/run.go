package suites

import (
	"context"
	"fmt"
	"maps"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/patchbot/patchbot/vmrunner/agent"
	"github.com/patchbot/patchbot/vmrunner/proto"
)

// Request parameters that RunRound understands besides the suite and
// profile. The host driver sets them; --local sets them for this machine.
const (
	// ParamImage is the squashfs image of the suite: a file, or a block
	// device such as /dev/vda in the guest. Needed by suites with an image.
	ParamImage = "image"
	// ParamKernel, ParamAccel and ParamClock label the Result (e.g.
	// "base", "tcg", "icount").
	ParamKernel = "kernel"
	ParamAccel  = "accel"
	ParamClock  = "clock"
)

// RunRound runs one round of the suite workload that req names on the
// machine it is called on (the guest, through the agent, or this host with
// --local) and returns its raw samples: every workload of the suite once,
// each with cold caches and with the scheduler counters read around it.
func RunRound(ctx context.Context, req proto.Request) (*Result, error) {
	cfg, err := mounted(req)
	if err != nil {
		return nil, err
	}
	return runRound(ctx, cfg, req)
}

// runRound is RunRound on a resolved profile.
func runRound(ctx context.Context, cfg *Config, req proto.Request) (*Result, error) {
	clock, err := checkClock()
	if err != nil {
		return nil, err
	}
	r := &round{ctx: ctx, cfg: cfg, n: req.Round, params: req.Params, res: newResult(cfg, req)}
	if clock != "" {
		r.res.Notes["clocksource"] = clock
	}
	var run func(*round, *mountedImage) error
	image := false
	switch cfg.Suite {
	case "cache-contention":
		run, image = runCacheContention, true
	case "readahead":
		run, image = runReadahead, true
	case "locks":
		run = func(r *round, _ *mountedImage) error { return runLocks(r) }
	case "fuse-waitq":
		run = func(r *round, _ *mountedImage) error { return runFuseWaitq(r) }
	default:
		return nil, fmt.Errorf("suite %q has no runner", cfg.Suite)
	}
	calls, err := startCalls(req.Params)
	if err != nil {
		return nil, fmt.Errorf("suite %s round %d: counting the changed functions' calls: %w", cfg.Suite, req.Round, err)
	}
	windows := func(r *round, img *mountedImage) error {
		for w := 0; w < cfg.Params.windowsABoot(); w++ {
			if err := run(r, img); err != nil {
				return err
			}
		}
		r.res.Samples = foldWindows(r.res.Samples)
		return nil
	}
	if image {
		err = withImage(windows)(r)
	} else {
		err = windows(r, nil)
	}
	if err != nil {
		return nil, fmt.Errorf("suite %s round %d: %w", cfg.Suite, req.Round, err)
	}
	if calls != nil {
		if r.res.Calls, err = calls.done(); err != nil {
			return nil, fmt.Errorf("suite %s round %d: counting the changed functions' calls: %w", cfg.Suite, req.Round, err)
		}
	}
	r.res.Finished = time.Now().UTC()
	return r.res, nil
}

// foldWindows makes the samples of a round that ran its workloads more
// than once one sample per metric and cell: the mean of its windows, which
// it keeps in Windows, in the order of the first window.
func foldWindows(samples []Sample) []Sample {
	type cell struct{ workload, params, metric string }
	keyOf := func(s Sample) cell {
		return cell{s.Workload, paramsKey(s.Params), s.Metric}
	}
	idx := map[cell]int{}
	var out []Sample
	for _, s := range samples {
		k := keyOf(s)
		i, ok := idx[k]
		if !ok {
			idx[k] = len(out)
			out = append(out, s)
			out[len(out)-1].Windows = []float64{s.Value}
			continue
		}
		out[i].Windows = append(out[i].Windows, s.Value)
	}
	for i := range out {
		w := out[i].Windows
		if len(w) < 2 {
			out[i].Windows = nil
			continue
		}
		sum := 0.0
		for _, v := range w {
			sum += v
		}
		out[i].Value = sum / float64(len(w))
	}
	return out
}

// FoldBoots makes the results of one round's parts on one kernel, each
// run on a boot of its own (Params.Boots), one result: every metric's
// windows are those of all the parts, in the order they ran, and its value
// their mean, as if one boot had run them all.
func FoldBoots(parts []*Result) *Result {
	if len(parts) == 1 {
		return parts[0]
	}
	var acc *Result
	var windows []Sample
	for _, p := range parts {
		for _, s := range p.Samples {
			ws := s.Windows
			if len(ws) == 0 {
				ws = []float64{s.Value}
			}
			for _, v := range ws {
				w := s
				w.Value, w.Windows = v, nil
				windows = append(windows, w)
			}
		}
		part := *p
		part.Samples = nil
		acc = merge(acc, &part)
	}
	acc.Samples = foldWindows(windows)
	return acc
}

// paramsKey writes a cell's parameters in a fixed order, a key for a map.
func paramsKey(p map[string]string) string { return joinParams(p, "\x00") }

// cellText is a cell's parameters for a person: "bucket=lt256K readers=4".
func cellText(p map[string]string) string { return joinParams(p, " ") }

// joinParams is "k=v" of each parameter, by key, joined by sep.
func joinParams(p map[string]string, sep string) string {
	parts := make([]string, 0, len(p))
	for _, k := range slices.Sorted(maps.Keys(p)) {
		parts = append(parts, k+"="+p[k])
	}
	return strings.Join(parts, sep)
}

// Prepared is what Prepare did, for the host's record of a run's phases.
type Prepared struct {
	// Phases is the time it took, in seconds (PhasePrepare).
	Phases map[string]float64 `json:"phases,omitempty"`
	// Shape is the Sum of the profile as the guest resolved it from the
	// definitions built into its agent; the host refuses a guest whose
	// shape is not its own (RunAB). Empty: the agent did not say (one
	// with nothing to prepare, as the fake backend's).
	Shape string `json:"shape,omitempty"`
}

// Prepare readies the machine it runs on for the rounds of the suite that
// req names, without running one: the mounts, and for cache-contention the
// release trace's kprobes and hist maps, whose arming takes seconds under
// TCG. A host with several guests prepares them side by side before the
// first round (RunAB), instead of each first round doing it in turn.
// Rounds need no Prepare: the first arms what nothing armed.
func Prepare(ctx context.Context, req proto.Request) (*Prepared, error) {
	cfg, err := mounted(req)
	if err != nil {
		return nil, err
	}
	t0 := time.Now()
	if cfg.Suite == "cache-contention" {
		if err := ArmReleaseTrace(); err != nil {
			return nil, fmt.Errorf("preparing %s: %w", cfg.Suite, err)
		}
	}
	if err := ArmCalls(req.Params); err != nil {
		return nil, fmt.Errorf("preparing %s: probing the changed functions: %w", cfg.Suite, err)
	}
	return &Prepared{Phases: map[string]float64{PhasePrepare: time.Since(t0).Seconds()}, Shape: cfg.Sum()}, nil
}

// mounted resolves the suite and profile req names, and mounts what the
// suites need.
func mounted(req proto.Request) (*Config, error) {
	s, err := Lookup(req.Suite)
	if err != nil {
		return nil, err
	}
	cfg, err := s.Resolve(req.Profile)
	if err != nil {
		return nil, err
	}
	if err := ensureMounts(); err != nil {
		return nil, err
	}
	return cfg, nil
}

// round is the state of one RunRound call.
type round struct {
	ctx    context.Context
	cfg    *Config
	n      int
	params map[string]string
	res    *Result
}

// drawSeed seeds a round's random draws: by the round's number, so that
// both kernels draw the same in the same round, or, with SameDraws, the
// same in every round.
func (r *round) drawSeed() uint64 {
	if r.cfg.Params.SameDraws {
		return 1
	}
	return uint64(r.n)
}

func newResult(cfg *Config, req proto.Request) *Result {
	accel := req.Params[ParamAccel]
	if accel == "" {
		accel = "host"
	}
	kernel := req.Params[ParamKernel]
	if kernel == "" {
		kernel = "running"
	}
	return &Result{
		Suite: cfg.Suite, Profile: cfg.Profile, Kernel: kernel,
		KernelRelease: kernelRelease(), Accel: accel, Clock: req.Params[ParamClock],
		CPUs: runtime.NumCPU(), MemMiB: memMiB(),
		Started: time.Now().UTC(), Notes: map[string]string{},
	}
}

// sample appends one raw sample.
func (r *round) sample(workload string, params map[string]string, m metric, v float64) {
	r.res.Samples = append(r.res.Samples, Sample{
		Suite: r.cfg.Suite, Workload: workload, Params: params,
		Metric: m.name, Unit: m.unit, HigherIsBetter: m.higherIsBetter,
		Round: r.n, Value: v,
	})
}

func (r *round) missing(workload, metric, reason string) {
	for _, m := range r.res.Missing {
		if m.Workload == workload && m.Metric == metric {
			return // one entry per workload and metric is enough
		}
	}
	r.res.Missing = append(r.res.Missing, Missing{Suite: r.cfg.Suite, Workload: workload, Metric: metric, Reason: reason})
}

// metric is a metric's name, unit and direction.
type metric struct {
	name           string
	unit           string
	higherIsBetter bool
}

var (
	mFilesPerS   = metric{"files_per_s", "files/s", true}
	mMiBPerS     = metric{"mib_per_s", "MiB/s", true}
	mOpsPerS     = metric{"ops_per_s", "ops/s", true}
	mLatMean     = metric{"latency_mean", "ms", false}
	mLatP50      = metric{"latency_p50", "ms", false}
	mLatP95      = metric{"latency_p95", "ms", false}
	mLatP99      = metric{"latency_p99", "ms", false}
	mLatMax      = metric{"latency_max", "ms", false}
	mElapsed     = metric{"elapsed", "s", false}
	mAcqPerS     = metric{"acquisitions_per_s", "locks/s", true}
	mAcqCurve    = metric{"curve_acquisitions_per_s", "locks/s", true} // geometric mean over the contender counts
	mSchedWakeup = metric{"sched_wakeup", "count", false}
	mCtxt        = metric{"context_switches", "count", false}
	mTTWU        = metric{"ttwu", "count", false}
)

// measure runs fn with the scheduler counters (and, when release is set,
// the squashfs release tracing) read around it, and records the counters
// as samples of workload with params.
func (r *round) measure(workload string, params map[string]string, release bool, fn func() error) error {
	t0 := time.Now()
	c := startCounters(release)
	t1 := time.Now()
	err := fn()
	t2 := time.Now()
	c.stop()
	if err != nil {
		c.close()
		return err
	}
	c.record(r, workload, params)
	c.close()
	r.spent(PhaseArm, t1.Sub(t0))
	r.spent(PhaseArm+"/release-trace", c.armRelease)
	r.spent(PhaseArm+"/perf", c.armPerf)
	r.spent(PhaseWorkload, t2.Sub(t1))
	r.spent(PhaseCollect, time.Since(t2))
	// A sign of progress to the host, which tells a slow patched kernel
	// from a hung one by it (vmrunner.Pace).
	agent.Progressf(r.ctx, "round %d: %s %s measured", r.n, workload, cellText(params))
	return nil
}

// Phases of a round whose time Result.Phases records, so that the fixed
// costs of a round can be told from the workloads it measures.
const (
	PhaseStage      = "stage"       // copying the image into tmpfs and mounting it
	PhaseDropCaches = "drop-caches" // sync and drop_caches before each workload
	PhasePrepare    = "prepare"     // readying the guest before the first round, side by side with the others (Prepare)
	PhaseReboot     = "reboot"      // booting the kernel afresh before a round (Params.Reboot), side by side with the others
	PhaseArm        = "arm"         // opening the counters, kprobes and hist triggers (of which arm/release-trace and arm/perf)
	PhaseWorkload   = "workload"    // the measured workloads themselves
	PhaseCollect    = "collect"     // reading counters and histograms, disarming
)

// spent adds d to the round's time in phase.
func (r *round) spent(phase string, d time.Duration) {
	if r.res.Phases == nil {
		r.res.Phases = map[string]float64{}
	}
	r.res.Phases[phase] += d.Seconds()
}

// timed runs fn and adds its time to phase.
func (r *round) timed(phase string, fn func() error) error {
	t0 := time.Now()
	err := fn()
	r.spent(phase, time.Since(t0))
	return err
}

func kernelRelease() string {
	var u unix.Utsname
	if err := unix.Uname(&u); err != nil {
		return ""
	}
	return unix.ByteSliceToString(u.Release[:])
}

func memMiB() int {
	b, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "MemTotal:" {
			kb, _ := strconv.Atoi(f[1])
			return kb / 1024
		}
	}
	return 0
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
