package vmrunner

import (
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"
)

// How a guest keeps time (Config.Clock).
//
// Under KVM a guest runs on the host's CPUs and its clock is real time:
// what it measures is what the workload costs on this hardware. Under TCG
// a guest's real time is mostly the host's emulation speed, which another
// process on the host, or the host's own frequency, changes from one
// moment to the next: a suite's figure spread by 20-50% from one round to
// the next on a busy host (docs/vmrunner.md, "The guest's clock").
// QEMU's -icount gives a TCG guest a clock of its own instead: its virtual
// time advances by ICountShift's nanoseconds per guest instruction, so a
// workload's duration in the guest counts the instructions it executed
// (and the sleeps and timeouts it waited for, at their nominal length),
// whatever the host does meanwhile. The guest's vCPUs then run in turn on
// one host thread (icount needs single-threaded TCG).
const (
	// ClockAuto: KVM's real time where KVM works, else TCG with
	// instruction-counted time when this QEMU can run the guest so, else
	// TCG's real time.
	ClockAuto = ""
	// ClockHost is the host's real time: KVM's, or multi-threaded TCG's.
	ClockHost = "host"
	// ClockICount is instruction-counted time: TCG with -icount at
	// Config.ICountShift (a suite's profile's), else ICountShift, even
	// where KVM works. "icount:N" is the same at shift N (ICountClock),
	// 0 to MaxICountShift, whatever Config.ICountShift says.
	ClockICount = "icount"
)

// MaxICountShift is the largest -icount shift a clock may ask for: 2^10
// ns an instruction, a 1 MIPS guest.
const MaxICountShift = 10

// ICountClock is the clock of instruction-counted time at shift: "icount"
// at ICountShift, "icount:N" at any other.
func ICountClock(shift int) string {
	if shift == ICountShift {
		return ClockICount
	}
	return fmt.Sprintf("%s:%d", ClockICount, shift)
}

// ICountShiftOf is the -icount shift of an instruction-counted clock
// ("icount", "icount:N"); false for any other clock.
func ICountShiftOf(clock string) (int, bool) {
	if clock == ClockICount {
		return ICountShift, true
	}
	rest, ok := strings.CutPrefix(clock, ClockICount+":")
	if !ok {
		return 0, false
	}
	n, err := strconv.Atoi(rest)
	if err != nil || n < 0 || n > MaxICountShift || strconv.Itoa(n) != rest {
		return 0, false
	}
	return n, true
}

// poolShift is the -icount shift of a pool's guests, where they keep
// instruction-counted time: an "icount:N" clock's own, else the one
// Config.ICountShift names (a suite's profile), else ICountShift.
func poolShift(cfg Config) (int, error) {
	if cfg.Clock != ClockICount {
		if shift, ok := ICountShiftOf(cfg.Clock); ok {
			return shift, nil
		}
	}
	if p := cfg.ICountShift; p != nil {
		if *p < 0 || *p > MaxICountShift {
			return 0, fmt.Errorf("icount shift %d: want 0 to %d", *p, MaxICountShift)
		}
		return *p, nil
	}
	return ICountShift, nil
}

// IsICount says whether clock is instruction-counted time, at any shift.
func IsICount(clock string) bool {
	_, ok := ICountShiftOf(clock)
	return ok
}

// ICountShift is the -icount shift: 2^2 = 4 ns of guest time per
// instruction, a guest CPU of 250 million instructions a second (its
// vCPUs take turns at it). That is about the speed at which TCG runs a
// guest on the hosts patchbot was measured on, so a sleep of a millisecond
// weighs against work as it did under TCG's real time, where the panel of
// known-effect patches was first measured; shift 0 would make work four
// times cheaper against every sleep and timeout. That is slower than
// hardware by far, and a sleep other threads' work can overlap is hidden:
// the panel's read-delay (5 ms before every squashfs block read) measures
// "no change" at shift 2 and a regression at shift 0 (docs/vmrunner.md,
// "What it measures"). At shift 0 the panel's verdicts measured keep
// their direction and read-delay is right, but the no-ops' reach is no
// better with one window a round and the lock and FUSE suites take four
// times the host's time (docs/suites.md, "At shift 0"): the default stays
// 2; a suite's profile names another (Config.ICountShift, the candidate
// four-windows-shift0 of cache-contention) and "icount:0" asks for
// shift 0.
const ICountShift = 2

// icountArgs are QEMU's arguments for instruction-counted time: the guest
// clock advances only with instructions (sleep=off: an idle guest's clock
// jumps to its next timer instead of waiting for the host's), so that two
// runs of the same work read the same duration.
func icountArgs(shift int) []string {
	return []string{"-icount", fmt.Sprintf("shift=%d,sleep=off", shift)}
}

// ICountTSCkHz is the guest TSC's rate under -icount: it counts the guest's
// virtual nanoseconds, whatever the shift.
const ICountTSCkHz = 1_000_000

// icountClockCmdline is what a PVH guest under -icount is told of its TSC
// (TCGClockCmdline's counterpart): the rate is known exactly.
func icountClockCmdline(hz int) string {
	line := fmt.Sprintf("tsc_early_khz=%d tsc=reliable", ICountTSCkHz)
	if hz > 0 {
		line += fmt.Sprintf(" lpj=%d", ICountTSCkHz*1000/hz)
	}
	return line
}

// ICountSMPSince is the first QEMU that brought up a second vCPU under
// -icount here: bookworm's 7.2 never does (the boot CPU runs on while the
// second spins at its first wait; seen with shift 0, 2, 3, 7 and auto,
// sleep on and off, -cpu max and qemu64), bookworm-backports' 10.0 does.
// Versions between were not tried.
var ICountSMPSince = [2]int{10, 0}

// CheckClock says whether c is a clock a Config may ask for.
func CheckClock(c string) error {
	if c == ClockAuto || c == ClockHost || IsICount(c) {
		return nil
	}
	return fmt.Errorf("unknown clock %q (want %q, %q, or %q for shift N, 0 to %d)", c, ClockHost, ClockICount, ClockICount+":N", MaxICountShift)
}

// qemuVersions caches each QEMU binary's version, asked once a process.
var qemuVersions sync.Map // path → [2]int (zero when unknown)

var versionRE = regexp.MustCompile(`QEMU emulator version (\d+)\.(\d+)`)

// qemuVersion is the major and minor version the binary at path reports.
func qemuVersion(path string) ([2]int, error) {
	if v, ok := qemuVersions.Load(path); ok {
		return v.([2]int), nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, path, "--version").Output()
	if err != nil {
		return [2]int{}, fmt.Errorf("asking %s its version: %w", path, err)
	}
	m := versionRE.FindSubmatch(bytes.TrimSpace(out))
	if m == nil {
		return [2]int{}, fmt.Errorf("%s --version: no version in %q", path, firstLine(string(out)))
	}
	major, _ := strconv.Atoi(string(m[1]))
	minor, _ := strconv.Atoi(string(m[2]))
	v := [2]int{major, minor}
	qemuVersions.Store(path, v)
	return v, nil
}

func atLeast(v, want [2]int) bool {
	return v[0] > want[0] || v[0] == want[0] && v[1] >= want[1]
}
