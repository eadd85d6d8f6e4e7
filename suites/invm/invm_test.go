package invm

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/patchbot/patchbot/blame"
	"github.com/patchbot/patchbot/images"
	"github.com/patchbot/patchbot/images/fsimage"
	"github.com/patchbot/patchbot/images/initramfs"
	"github.com/patchbot/patchbot/internal/testenv"
	"github.com/patchbot/patchbot/suites"
	"github.com/patchbot/patchbot/vmrunner"
	"github.com/patchbot/patchbot/vmrunner/proto"
)

// The guests of a profile that names an icount shift are booted at it:
// the pool gets the profile's shift, and the VM's own clock beside it (an
// "icount:N" clock wins in the pool, vmrunner's TestQEMUPoolClock). A
// profile without one gives the pool none, which keeps it at
// vmrunner.ICountShift.
func TestPoolKeepsTheProfilesShift(t *testing.T) {
	for _, tt := range []struct {
		profile string
		want    int // the pool's Config.ICountShift; -1 for none
	}{
		{"four-windows-shift0", 0},
		{"four-windows", -1},
	} {
		cfg := resolve(t, "cache-contention", tt.profile)
		pcfg := poolConfig(VMConfig{Clock: "icount:3", Boot: vmrunner.BootPVH}, cfg, 2, nil)
		if pcfg.Clock != "icount:3" || pcfg.Boot != vmrunner.BootPVH || pcfg.Limit != 2 {
			t.Errorf("%s: the VM's clock %q, boot %q, limit %d; want icount:3, pvh, 2", tt.profile, pcfg.Clock, pcfg.Boot, pcfg.Limit)
		}
		got := -1
		if p := pcfg.ICountShift; p != nil {
			got = *p
		}
		if got != tt.want {
			t.Errorf("%s: the pool's icount shift %d, want %d (-1: none)", tt.profile, got, tt.want)
		}
	}
}

// TestGuestCacheContention boots the minimal kernel under QEMU (4 vCPUs)
// and runs one round of the smoke cache-contention profile in it: the
// whole guest path, from the staged image on /dev/vda to the counters.
// (These tests check the machinery: smoke's round took 11 s on an idle
// host on 2026-12-07, quick's about 90 s on 2026-12-01.)
func TestGuestCacheContention(t *testing.T) {
	ctx := context.Background()
	k := guestKernel(t)
	// A guard against a hung guest, not a speed target: CI runs it beside
	// the end-to-end package's two VMs on the same two cores, where a
	// 5 min guard once ran out mid-round (of quick, then).
	ctx, cancel := context.WithTimeout(ctx, 20*time.Minute)
	defer cancel()
	results, err := Run(ctx, Options{
		Suite: "cache-contention", Plan: FixedPlan("smoke", 1, testWriter{t}),
		Kernels:  []Kernel{{Side: blame.Base, BzImage: k.BzImage}},
		CacheDir: t.TempDir(),
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(results) != 1 {
		t.Fatalf("%d results, want 1", len(results))
	}
	res := results[0]
	if res.Kernel != "base" || res.KernelRelease == "" || res.Accel == "" {
		t.Errorf("result header: kernel %q, release %q, accel %q", res.Kernel, res.KernelRelease, res.Accel)
	}
	// The guest must see the VM's shape, or contention is not what was asked.
	if res.CPUs != DefaultCPUs {
		t.Errorf("the guest has %d CPUs online, the VM %d (does the kernel config have CONFIG_ACPI for the MADT?)", res.CPUs, DefaultCPUs)
	}
	// The minimal kernel is configured for every counter: none may be
	// missing. (A ratio may be: wakeups_per_release is undefined when no
	// release found a waiter, as in a stat storm on few CPUs.)
	for _, m := range res.Missing {
		if m.Metric == "wakeups_per_release" {
			t.Logf("missing %s/%s: %s", m.Workload, m.Metric, m.Reason)
			continue
		}
		t.Errorf("missing %s/%s: %s", m.Workload, m.Metric, m.Reason)
	}
	got := map[string]float64{}
	for _, s := range res.Samples {
		got[s.Workload+"/"+s.Metric] = s.Value
	}
	for _, key := range []string{
		"read-storm/files_per_s", "read-storm/sched_wakeup", "read-storm/context_switches",
		"read-storm/ttwu", "read-storm/cache_puts", "read-storm/wakeups_per_release",
		"stat-storm/files_per_s", "mixed/latency_p99",
	} {
		if got[key] <= 0 {
			t.Errorf("%s = %v, want > 0", key, got[key])
		}
	}
	// Built with -fno-optimize-sibling-calls, the release frame is on the
	// stacks: no tail-call attribution note.
	for k, v := range res.Notes {
		t.Logf("note %s: %s", k, v)
	}
	if _, ok := res.Notes["release_sites/read-storm"]; ok {
		t.Errorf("release wake-ups attributed through a tail call on a kernel built without sibling calls")
	}
	if res.Model == nil || res.Model.WakeupsPerRelease["wake-all"] == 0 {
		t.Fatal("no model prediction with the result")
	}
	// The release trace was armed before the round (suites.Prepare): the
	// round's three workloads only cleared and continued it. (Their times
	// do not tell: under instruction-counted time clearing the hist maps
	// costs about what arming did, 0.34 s against 0.26 s.)
	prep, arm := res.Phases[suites.PhasePrepare], res.Phases[suites.PhaseArm+"/release-trace"]
	t.Logf("prepare %.2f s, the round's clearing and continuing of the release trace %.2f s", prep, arm)
	if prep <= 0 {
		t.Errorf("prepare took %.2f s: nothing prepared the guest", prep)
	}
	for k, v := range res.Notes {
		if strings.HasPrefix(k, "release_trace_armed/") {
			t.Errorf("%s: %s", k, v)
		}
	}
	t.Logf("read-storm: %.0f files/s, %.0f wake-ups, %.2f wake-ups per release (model wake-all %.2f)",
		got["read-storm/files_per_s"], got["read-storm/sched_wakeup"], got["read-storm/wakeups_per_release"],
		res.Model.WakeupsPerRelease["wake-all"])
}

// A round that nothing prepared (suites.Prepare: a local round, or an
// agent asked for a round first) arms the release trace and the changed
// functions' probes itself, and says so: the round's first workload
// (stat-storm) armed the trace and carries the note, the later two found
// it armed. TestGuestCacheContention checks the other side, that a
// prepared round carries no such note.
func TestUnpreparedRoundArmsItself(t *testing.T) {
	k := guestKernel(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute) // a guard, as above
	defer cancel()
	cfg := resolve(t, "cache-contention", "smoke")
	img, _, err := fsimage.Build(ctx, *cfg.Image, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	initrd, err := initramfs.ForKernel(ctx, k.BzImage, initramfs.Options{})
	if err != nil {
		t.Fatal(err)
	}
	vm := DefaultVM()
	pool, err := vmrunner.New(vm.Backend, vmrunner.Config{Limit: 1, Boot: vmrunner.BootLegacy})
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	inst, err := pool.Create(ctx, vmrunner.Spec{Name: "base", Kernel: k.BzImage, Initramfs: initrd,
		CPUs: vm.CPUs, MemMiB: vm.MemMiB, Disks: []string{img}})
	if err != nil {
		t.Fatal(err)
	}
	defer inst.Close()
	if _, err := inst.Boot(ctx); err != nil {
		t.Fatal(err)
	}
	raw, err := inst.Do(ctx, proto.Request{Op: proto.OpRunSuite, Suite: cfg.Suite, Profile: cfg.Profile, Round: 1,
		Params: map[string]string{suites.ParamImage: "/dev/vda", suites.ParamProbes: "squashfs_cache_get"}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	var res suites.Result
	if err := json.Unmarshal(raw, &res); err != nil {
		t.Fatal(err)
	}
	var armed []string
	for k, v := range res.Notes {
		if w, ok := strings.CutPrefix(k, "release_trace_armed/"); ok {
			armed = append(armed, w)
			t.Logf("%s: %s", k, v)
		}
	}
	if len(armed) != 1 || armed[0] != "stat-storm" {
		t.Errorf("the workloads that armed the release trace: %v, want only the first, stat-storm", armed)
	}
	if arm := res.Phases[suites.PhaseArm+"/release-trace"]; arm <= 0 || res.Phases[suites.PhasePrepare] != 0 {
		t.Errorf("phases %v: want the release trace armed in the round, and no prepare", res.Phases)
	}
	if len(res.Calls) != 1 || res.Calls[0].Func != "squashfs_cache_get" || res.Calls[0].Count == 0 {
		t.Errorf("calls %+v: want squashfs_cache_get counted by a probe the round armed", res.Calls)
	}
}

// Under TCG the PVH path's microvm has no HPET or ACPI PM timer: the
// guest has a fine clock only because vmrunner tells it its TSC's rate
// (the host's, or under instruction-counted time the virtual one). A
// round there must run on the TSC with high-resolution timers; on a host
// whose TSC is no clock it must be refused, naming the clock, and blamed
// on the set-up, not on the kernel.
func TestPVHRoundUnderTCG(t *testing.T) {
	ctx := context.Background()
	k := guestKernel(t)
	if k.Vmlinux == "" {
		t.Skip("the default kernel's build keeps no vmlinux to boot at its PVH entry")
	}
	ctx, cancel := context.WithTimeout(ctx, 20*time.Minute) // a guard, as above
	defer cancel()
	results, err := Run(ctx, Options{
		Suite: "cache-contention", Plan: FixedPlan("smoke", 1, testWriter{t}),
		Kernels:  []Kernel{{Side: blame.Base, BzImage: k.BzImage}},
		VM:       VMConfig{Boot: vmrunner.BootPVH},
		CacheDir: t.TempDir(),
	})
	if err != nil {
		if !strings.Contains(err.Error(), "jiffies") || !strings.Contains(err.Error(), "vm.boot: legacy") {
			t.Errorf("the refusal does not name the clock and the way out: %v", err)
		}
		if b := blame.Of(err); b != blame.Infra {
			t.Errorf("blamed on %q, want infra (the base kernel, the set-up's choice)", b)
		}
		if vmrunner.TCGClockCmdline(0) != "" {
			t.Errorf("the guest was told the host's TSC rate (%s) and still refused: %v", vmrunner.TCGClockCmdline(0), err)
		}
		return
	}
	res := results[0]
	if res.Accel == "kvm" {
		t.Skip("KVM works here: the guest has kvm-clock")
	}
	// Under instruction-counted time the guest is told its TSC's rate
	// (vmrunner.ICountTSCkHz) whatever the host's clocksource; otherwise
	// only the host's TSC rate gives it one (none on a host that keeps
	// kvm-clock, as a VM of a cloud does).
	if vmrunner.TCGClockCmdline(0) == "" && !vmrunner.IsICount(res.Clock) {
		t.Fatalf("a round on PVH under TCG (clock %q) was measured on clocksource %q, with no TSC rate given", res.Clock, res.Notes["clocksource"])
	}
	if cs := res.Notes["clocksource"]; cs != "tsc" && cs != "tsc-early" {
		t.Errorf("the PVH guest timed the round by %q, want the TSC", cs)
	}
	got := map[string]float64{}
	for _, s := range res.Samples {
		got[s.Workload+"/"+s.Metric] = s.Value
	}
	if got["read-storm/files_per_s"] <= 0 || got["stat-storm/files_per_s"] <= 0 {
		t.Errorf("no throughput measured: %v", got)
	}
	t.Logf("PVH round: clocksource %s, read-storm %.0f files/s, stat-storm %.0f files/s",
		res.Notes["clocksource"], got["read-storm/files_per_s"], got["stat-storm/files_per_s"])
}

// guestKernel skips the test where a VM cannot be booted here, and
// returns the default kernel, whose build is shared (cached) with the
// other packages' tests.
func guestKernel(t testing.TB) *images.Build {
	t.Helper()
	testenv.NeedsVM(t)
	testenv.NeedsKernel(t)
	testenv.Tools(t, "mksquashfs")
	k, err := images.DefaultKernel(context.Background(), testWriter{t})
	if err != nil {
		t.Fatalf("building the default kernel: %v", err)
	}
	return k
}

// resolve is the suite's profile, resolved as a run resolves it.
func resolve(t testing.TB, suite, profile string) *suites.Config {
	t.Helper()
	s, err := suites.Lookup(suite)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := s.Resolve(profile)
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

type testWriter struct{ t testing.TB }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(string(p))
	return len(p), nil
}
