package vmrunner

import (
	"fmt"
	"math"
	"strings"
	"testing"
	"time"
)

func TestTSCFlags(t *testing.T) {
	for _, tt := range []struct{ flags, missing string }{
		{"fpu tsc msr constant_tsc nonstop_tsc tsc_known_freq", ""},
		{"fpu tsc msr constant_tsc", "nonstop_tsc"},
		{"fpu msr", "tsc"},
	} {
		got := tscFlagsMissing("processor\t: 0\nflags\t\t: " + tt.flags + "\nbogomips\t: 4890\n")
		if (tt.missing == "") != (got == "") || !strings.Contains(got, tt.missing) {
			t.Errorf("flags %q: %q, want it to name %q", tt.flags, got, tt.missing)
		}
	}
	if got := tscFlagsMissing("processor\t: 0\n"); got == "" {
		t.Error("cpuinfo without flags: judged a clock-grade TSC")
	}
}

// The host's TSC rate, as a PVH guest under TCG is told it: two
// measurements must agree, or the guest's clock would run fast or slow
// by their difference.
func TestHostTSCRate(t *testing.T) {
	khz, why := hostTSCkHz()
	if khz == 0 {
		t.Skip("this host's TSC is no clock for a guest: " + why)
	}
	again := measureTSC(5, 20*time.Millisecond)
	if d := math.Abs(float64(again-khz)) / float64(khz); d > 0.002 {
		t.Errorf("the TSC measured %d kHz, then %d kHz: %.2f%% apart, want under 0.2%%", khz, again, 100*d)
	}
	if got := TCGClockCmdline(0); !strings.Contains(got, "tsc=reliable") || !strings.Contains(got, "tsc_early_khz=") {
		t.Errorf("TCGClockCmdline(0) = %q", got)
	}
	t.Logf("host TSC: %d kHz", khz)
}

// Only a PVH guest under TCG is told the rate: the legacy path has an
// HPET, and KVM gives kvm-clock.
func TestQEMUArgsGiveTCGPVHGuestsTheTSC(t *testing.T) {
	clock := TCGClockCmdline(0)
	if clock == "" {
		t.Skip("this host's TSC is no clock for a guest")
	}
	for _, tt := range []struct {
		boot, accel string
		want        bool
	}{{BootPVH, "tcg", true}, {BootPVH, "kvm", false}, {BootLegacy, "tcg", false}} {
		q := &qemuVM{spec: Spec{Name: "x", CPUs: 2, MemMiB: 512, Cmdline: "quiet"}, boot: tt.boot, kernel: "/k"}
		args := strings.Join(q.args(tt.accel, qemuFiles{kernel: "/k", agent: "socket,id=agent,path=/a"}), " ")
		if got := strings.Contains(args, clock+" quiet"); got != tt.want {
			t.Errorf("%s under %s: the TSC rate passed = %v, want %v: %s", tt.boot, tt.accel, got, tt.want, args)
		}
	}
	// With the kernel's HZ known, loops_per_jiffy is the TSC cycles of
	// one tick.
	q := &qemuVM{spec: Spec{Name: "x", CPUs: 2, MemMiB: 512}, boot: BootPVH, kernel: "/k", hz: 250}
	args := strings.Join(q.args("tcg", qemuFiles{kernel: "/k", agent: "socket,id=agent,path=/a"}), " ")
	want := fmt.Sprintf("%s lpj=%d", clock, hostTSC.khz*1000/250)
	if !strings.Contains(args, want) {
		t.Errorf("HZ 250: want %q in %s", want, args)
	}
	if strings.Contains(clock, "lpj=") {
		t.Errorf("HZ unknown: %q sets lpj", clock)
	}
}
