package suites

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// counters are the scheduler counters read around one workload. Each one
// that the kernel cannot provide keeps the reason instead of a value, and
// is reported as Missing.
type counters struct {
	wakeup    *perfCounter // sched:sched_wakeup on every CPU
	wakeupErr error

	ctxt0, ctxt1 uint64 // /proc/stat ctxt
	ctxtErr      error

	ttwu0, ttwu1 uint64 // sum of ttwu_count in /proc/schedstat
	ttwuErr      error

	release    *releaseTrace // squashfs release wake-ups (cache-contention)
	releaseErr error
	releaseOn  bool

	// armRelease and armPerf are how long arming the release trace and the
	// perf counter took: most of a round's fixed cost under TCG.
	armRelease, armPerf time.Duration
}

func startCounters(release bool) *counters {
	c := &counters{releaseOn: release}
	t0 := time.Now()
	if release {
		c.release, c.releaseErr = startReleaseTrace()
	}
	t1 := time.Now()
	c.armRelease = t1.Sub(t0)
	c.wakeup, c.wakeupErr = openTracepointCounter("sched", "sched_wakeup")
	c.armPerf = time.Since(t1)
	c.ttwuErr = enableSchedstats()
	if c.ttwuErr == nil {
		c.ttwu0, c.ttwuErr = readTTWU()
	}
	c.ctxt0, c.ctxtErr = readCtxt()
	if c.wakeup != nil {
		c.wakeupErr = c.wakeup.enable()
	}
	return c
}

// stop reads the counters' end values; close releases what start set up.
func (c *counters) stop() {
	if c.wakeup != nil && c.wakeupErr == nil {
		c.wakeupErr = c.wakeup.disable()
	}
	if c.ctxtErr == nil {
		c.ctxt1, c.ctxtErr = readCtxt()
	}
	if c.ttwuErr == nil {
		c.ttwu1, c.ttwuErr = readTTWU()
	}
	if c.release != nil {
		c.releaseErr = c.release.stop()
	}
}

func (c *counters) close() {
	if c.wakeup != nil {
		c.wakeup.close()
	}
	if c.release != nil {
		c.release.close()
	}
}

func (c *counters) record(r *round, workload string, params map[string]string) {
	if c.wakeupErr == nil {
		n, err := c.wakeup.read()
		if err == nil {
			r.sample(workload, params, mSchedWakeup, float64(n))
		} else {
			c.wakeupErr = err
		}
	}
	if c.wakeupErr != nil {
		r.missing(workload, mSchedWakeup.name, c.wakeupErr.Error())
	}
	if c.ctxtErr == nil {
		r.sample(workload, params, mCtxt, float64(c.ctxt1-c.ctxt0))
	} else {
		r.missing(workload, mCtxt.name, c.ctxtErr.Error())
	}
	if c.ttwuErr == nil {
		r.sample(workload, params, mTTWU, float64(c.ttwu1-c.ttwu0))
	} else {
		r.missing(workload, mTTWU.name, c.ttwuErr.Error())
	}
	if c.releaseOn {
		c.recordRelease(r, workload, params)
	}
}

// perfCounter counts one tracepoint on every online CPU, for all tasks.
type perfCounter struct{ fds []int }

// tracefsDir is where tracefs is mounted (ensureTracefs mounts it).
var tracefsDir = "/sys/kernel/tracing"

func openTracepointCounter(system, event string) (*perfCounter, error) {
	if err := ensureTracefs(); err != nil {
		return nil, err
	}
	idPath := filepath.Join(tracefsDir, "events", system, event, "id")
	b, err := os.ReadFile(idPath)
	if err != nil {
		return nil, fmt.Errorf("tracepoint %s:%s not available (CONFIG_TRACEPOINTS?): %w", system, event, err)
	}
	id, err := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64)
	if err != nil {
		return nil, fmt.Errorf("parsing %s: %w", idPath, err)
	}
	cpus, err := onlineCPUs()
	if err != nil {
		return nil, err
	}
	p := &perfCounter{}
	for _, cpu := range cpus {
		attr := unix.PerfEventAttr{
			Type:   unix.PERF_TYPE_TRACEPOINT,
			Config: id,
			Size:   uint32(unsafe.Sizeof(unix.PerfEventAttr{})),
			Bits:   unix.PerfBitDisabled,
		}
		fd, err := unix.PerfEventOpen(&attr, -1, cpu, -1, unix.PERF_FLAG_FD_CLOEXEC)
		if err != nil {
			p.close()
			return nil, fmt.Errorf("perf_event_open %s:%s on cpu %d (CONFIG_PERF_EVENTS? perf_event_paranoid?): %w", system, event, cpu, err)
		}
		p.fds = append(p.fds, fd)
	}
	return p, nil
}

func (p *perfCounter) enable() error {
	for _, fd := range p.fds {
		if err := unix.IoctlSetInt(fd, unix.PERF_EVENT_IOC_RESET, 0); err != nil {
			return fmt.Errorf("perf reset: %w", err)
		}
		if err := unix.IoctlSetInt(fd, unix.PERF_EVENT_IOC_ENABLE, 0); err != nil {
			return fmt.Errorf("perf enable: %w", err)
		}
	}
	return nil
}

func (p *perfCounter) disable() error {
	for _, fd := range p.fds {
		if err := unix.IoctlSetInt(fd, unix.PERF_EVENT_IOC_DISABLE, 0); err != nil {
			return fmt.Errorf("perf disable: %w", err)
		}
	}
	return nil
}

func (p *perfCounter) read() (uint64, error) {
	var sum uint64
	buf := make([]byte, 8)
	for _, fd := range p.fds {
		if n, err := unix.Read(fd, buf); err != nil || n != 8 {
			return 0, fmt.Errorf("reading perf counter: %d bytes, %v", n, err)
		}
		sum += binary.NativeEndian.Uint64(buf)
	}
	return sum, nil
}

func (p *perfCounter) close() {
	for _, fd := range p.fds {
		unix.Close(fd)
	}
	p.fds = nil
}

// onlineCPUs parses /sys/devices/system/cpu/online ("0-3,5").
func onlineCPUs() ([]int, error) {
	b, err := os.ReadFile("/sys/devices/system/cpu/online")
	if err != nil {
		// Without sysfs, fall back to the CPUs this process may run on.
		var cpus []int
		for i := 0; i < runtime.NumCPU(); i++ {
			cpus = append(cpus, i)
		}
		return cpus, nil
	}
	return parseCPUList(strings.TrimSpace(string(b)))
}

func parseCPUList(s string) ([]int, error) {
	var out []int
	for _, part := range strings.Split(s, ",") {
		lo, hi, isRange := strings.Cut(part, "-")
		a, err := strconv.Atoi(lo)
		if err != nil {
			return nil, fmt.Errorf("cpu list %q: %w", s, err)
		}
		b := a
		if isRange {
			if b, err = strconv.Atoi(hi); err != nil {
				return nil, fmt.Errorf("cpu list %q: %w", s, err)
			}
		}
		for i := a; i <= b; i++ {
			out = append(out, i)
		}
	}
	return out, nil
}

// readCtxt returns the "ctxt" line of /proc/stat: context switches since boot.
func readCtxt() (uint64, error) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, err
	}
	return parseCtxt(string(b))
}

func parseCtxt(stat string) (uint64, error) {
	for _, line := range strings.Split(stat, "\n") {
		if v, ok := strings.CutPrefix(line, "ctxt "); ok {
			return strconv.ParseUint(strings.TrimSpace(v), 10, 64)
		}
	}
	return 0, errors.New("/proc/stat has no ctxt line")
}

// enableSchedstats turns on kernel.sched_schedstats, without which the
// try-to-wake-up counts in /proc/schedstat stay frozen.
func enableSchedstats() error {
	const knob = "/proc/sys/kernel/sched_schedstats"
	if err := os.WriteFile(knob, []byte("1"), 0); err != nil {
		return fmt.Errorf("enabling schedstats (CONFIG_SCHEDSTATS?): %w", err)
	}
	return nil
}

func readTTWU() (uint64, error) {
	b, err := os.ReadFile("/proc/schedstat")
	if err != nil {
		return 0, fmt.Errorf("reading /proc/schedstat (CONFIG_SCHEDSTATS?): %w", err)
	}
	return parseTTWU(string(b))
}

// parseTTWU sums ttwu_count over the "cpuN" lines of /proc/schedstat: the
// fifth number after the CPU name (yld_count, legacy, sched_count,
// sched_goidle, ttwu_count, ...), unchanged from version 15 to 17.
func parseTTWU(s string) (uint64, error) {
	var sum uint64
	cpus := 0
	for _, line := range strings.Split(s, "\n") {
		f := strings.Fields(line)
		if len(f) < 6 || !strings.HasPrefix(f[0], "cpu") {
			continue
		}
		v, err := strconv.ParseUint(f[5], 10, 64)
		if err != nil {
			return 0, fmt.Errorf("/proc/schedstat %s: ttwu_count %q: %w", f[0], f[5], err)
		}
		sum += v
		cpus++
	}
	if cpus == 0 {
		return 0, errors.New("/proc/schedstat has no cpu lines")
	}
	return sum, nil
}
