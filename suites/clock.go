package suites

import (
	"fmt"
	"os"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// clocksourceFile names the clock that time.Now and the kernel's own
// timestamps read on this machine.
const clocksourceFile = "/sys/devices/system/clocksource/clocksource0/current_clocksource"

// checkClock refuses to time workloads by a clock that advances only once
// a timer tick, or on a machine whose timers fire only on ticks. Such a
// machine measures its tick (4 ms at HZ=250), not a 0.2 ms stat, and its
// sleeps and timeouts run at tick granularity, which changes the
// workloads themselves. It happens under TCG on QEMU's microvm (the PVH
// boot path) when the guest is not told the TSC's rate: no HPET or ACPI
// PM timer, a TSC the kernel cannot calibrate, so it falls back to
// refined-jiffies (vmrunner passes the host's rate where it can). It
// returns the clocksource's name, for the result's notes.
func checkClock() (string, error) {
	b, err := os.ReadFile(clocksourceFile)
	if err != nil {
		return "", nil // no sysfs clocksource to judge (an odd --local host): say nothing
	}
	name := strings.TrimSpace(string(b))
	var ts unix.Timespec
	if err := unix.ClockGetres(unix.CLOCK_MONOTONIC, &ts); err != nil {
		return name, fmt.Errorf("reading the clock's resolution: %w", err)
	}
	return name, clockUsable(name, time.Duration(ts.Nano()))
}

// clockUsable judges a clocksource by its name and the resolution of
// CLOCK_MONOTONIC, which is 1 ns when high-resolution timers are on and
// the tick's length when they are not.
func clockUsable(name string, res time.Duration) error {
	const way = "under TCG boot the VMs on the legacy path (vm.boot: legacy), whose HPET is a fine clock"
	switch name {
	case "jiffies", "refined-jiffies":
		return fmt.Errorf("the machine's clocksource is %s, which advances once a timer tick: too coarse "+
			"to time the workloads, and it slows their timers; %s", name, way)
	}
	if res > time.Microsecond {
		return fmt.Errorf("the machine's timers fire only on the tick (clock resolution %v on clocksource %s, "+
			"no high-resolution timers): the workloads' sleeps and timeouts would run at tick granularity; %s",
			res, name, way)
	}
	return nil
}
