package suites

import (
	"fmt"
	"os"
	"strings"
)

// clocksourceFile names the clock that time.Now and the kernel's own
// timestamps read on this machine.
const clocksourceFile = "/sys/devices/system/clocksource/clocksource0/current_clocksource"

// checkClock refuses to time workloads by a clock that advances only once
// a timer tick. Such a machine measures its tick (4 ms at HZ=250), not a
// 0.2 ms stat, and its timers and sleeps run at tick granularity, which
// changes the workloads themselves. It happens under TCG on QEMU's microvm
// (the PVH boot path): no HPET or ACPI PM timer, and a TSC the kernel
// cannot calibrate, so the kernel falls back to refined-jiffies. It
// returns the clocksource's name, for the result's notes.
func checkClock() (string, error) {
	b, err := os.ReadFile(clocksourceFile)
	if err != nil {
		return "", nil // no sysfs clocksource to judge (an odd --local host): say nothing
	}
	name := strings.TrimSpace(string(b))
	return name, clockUsable(name)
}

func clockUsable(name string) error {
	switch name {
	case "jiffies", "refined-jiffies":
		return fmt.Errorf("the machine's clocksource is %s, which advances once a timer tick: too coarse "+
			"to time the workloads, and it slows their timers; under TCG boot the VMs on the legacy path "+
			"(vm.boot: legacy), whose HPET is a fine clock", name)
	}
	return nil
}
