package vmrunner

import (
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strings"
	"sync"
	"time"
)

// Under TCG a guest's RDTSC reads the host's time-stamp counter (QEMU
// adds only an offset), so the guest has a fine clock if it is told the
// counter's rate. On the PVH path's microvm it must be told: there is no
// HPET or ACPI PM timer to calibrate the TSC against, and the PIT
// calibration under TCG fails or finds the vCPUs' TSCs "unsynchronized",
// so the kernel falls back to refined-jiffies, a clock that advances once
// a tick (4 ms), too coarse to time a workload (suites refuse it).
//
// TCGClockCmdline is what a PVH guest under TCG is given on its command
// line: the host's TSC rate, and trust in the counter
// ("tsc_early_khz=N tsc=reliable"). It is empty, and the guest left to
// its own calibration, unless the host's TSC is one a clock can be built
// on: constant rate, not stopping in idle states, and the host kernel's
// own clocksource (so synchronised across the host's CPUs).
//
// hz is the guest kernel's tick rate (CONFIG_HZ, see kernelHZ), 0 when
// unknown. When it is known the line also sets loops_per_jiffy
// ("lpj=N"), the value the boot CPU derives from the TSC rate
// (tsc_khz*1000/HZ): without it every other CPU calibrates its delay loop
// against the tick, about 75 ms of a 2-vCPU boot under TCG (measured:
// docs/vmrunner.md). Both delay loops count TSC cycles, so the value is
// exact, not an estimate.
func TCGClockCmdline(hz int) string {
	hostTSC.once.Do(func() {
		var why string
		hostTSC.khz, why = hostTSCkHz()
		if hostTSC.khz == 0 {
			// Said once a process, where the operator looks: a PVH guest
			// under TCG now keeps a jiffy clock, and suites refuse it.
			slog.Warn("PVH guests under TCG get no TSC rate: their clock will be refined-jiffies, too coarse to time a workload", "why", why)
		}
	})
	if hostTSC.khz == 0 {
		return ""
	}
	line := fmt.Sprintf("tsc_early_khz=%d tsc=reliable", hostTSC.khz)
	if hz > 0 {
		line += fmt.Sprintf(" lpj=%d", hostTSC.khz*1000/int64(hz))
	}
	return line
}

var hostTSC struct {
	once sync.Once
	khz  int64
}

// hostTSCkHz measures the host TSC's rate against the monotonic clock, or
// says why the host's TSC is no clock for a guest.
func hostTSCkHz() (int64, string) {
	if !haveTSC {
		return 0, "not an x86-64 host"
	}
	cs, err := os.ReadFile(clocksourceFile)
	if err != nil {
		return 0, "no clocksource in sysfs"
	}
	if c := strings.TrimSpace(string(cs)); c != "tsc" {
		return 0, "the host's clocksource is " + c + ", not tsc"
	}
	info, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		return 0, "no /proc/cpuinfo"
	}
	if why := tscFlagsMissing(string(info)); why != "" {
		return 0, why
	}
	khz := measureTSC(5, 20*time.Millisecond)
	if khz < 100_000 || khz > 10_000_000 {
		return 0, fmt.Sprintf("the host's TSC measured %d kHz, outside 0.1-10 GHz", khz)
	}
	return khz, ""
}

// clocksourceFile names the clocksource the host kernel keeps time with.
// suites reads the same file inside the guest (its own constant: the
// guest agent does not link vmrunner).
const clocksourceFile = "/sys/devices/system/clocksource/clocksource0/current_clocksource"

// tscFlagsMissing names the first CPU flag of a clock-grade TSC that
// cpuinfo lacks, or returns "".
func tscFlagsMissing(cpuinfo string) string {
	for _, line := range strings.Split(cpuinfo, "\n") {
		k, v, ok := strings.Cut(line, ":")
		if !ok || strings.TrimSpace(k) != "flags" {
			continue
		}
		flags := strings.Fields(v)
		for _, f := range []string{"tsc", "constant_tsc", "nonstop_tsc"} {
			if !slices.Contains(flags, f) {
				return "the host's CPU lacks " + f
			}
		}
		return ""
	}
	return "no CPU flags in /proc/cpuinfo"
}

// measureTSC is the median of n rates, each the counter's advance over
// span of the monotonic clock, in kHz.
func measureTSC(n int, span time.Duration) int64 {
	rates := make([]int64, n)
	for i := range rates {
		t0, c0 := time.Now(), rdtsc()
		time.Sleep(span)
		c1, t1 := rdtsc(), time.Now()
		rates[i] = int64(float64(c1-c0) / float64(t1.Sub(t0).Nanoseconds()) * 1e6)
	}
	slices.Sort(rates)
	return rates[n/2]
}
