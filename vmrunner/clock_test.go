package vmrunner

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A guest with instruction-counted time runs on single-threaded TCG with
// -icount at ICountShift, sleep off, and is told its TSC is reliable (the
// legacy path) or its rate (the PVH path); under KVM, or with icount off,
// nothing of it appears.
func TestQEMUArgsICount(t *testing.T) {
	files := qemuFiles{kernel: "/k", agent: "socket,id=agent,path=/a"}
	for _, tt := range []struct {
		name        string
		boot, accel string
		icount      bool
		want, never []string
	}{
		{"legacy, TCG, icount", BootLegacy, "tcg", true,
			[]string{"tcg,thread=single", "-icount shift=2,sleep=off", "tsc=reliable"}, []string{"thread=multi"}},
		{"PVH, TCG, icount", BootPVH, "tcg", true,
			[]string{"tcg,thread=single", "-icount shift=2,sleep=off", "tsc_early_khz=1000000 tsc=reliable lpj=4000000"}, []string{"thread=multi"}},
		{"legacy, TCG, icount at shift 0", BootLegacy, "tcg", true,
			[]string{"tcg,thread=single", "-icount shift=0,sleep=off", "tsc=reliable"}, []string{"thread=multi", "shift=2"}},
		{"legacy, TCG, host clock", BootLegacy, "tcg", false,
			[]string{"tcg,thread=multi"}, []string{"-icount", "thread=single", "tsc=reliable"}},
		{"legacy, KVM", BootLegacy, "kvm", true,
			[]string{"-accel kvm"}, []string{"-icount", "thread=single", "tsc=reliable"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			shift := ICountShift
			if strings.Contains(tt.name, "shift 0") {
				shift = 0
			}
			q := &qemuVM{spec: Spec{Name: "x", CPUs: 2, MemMiB: 512}, boot: tt.boot, kernel: "/k", hz: 250, icount: tt.icount, shift: shift}
			args := strings.Join(q.args(tt.accel, files), " ")
			for _, w := range tt.want {
				if !strings.Contains(args, w) {
					t.Errorf("want %q in %s", w, args)
				}
			}
			for _, n := range tt.never {
				if strings.Contains(args, n) {
					t.Errorf("%q in %s", n, args)
				}
			}
			wantClock := ClockHost
			if tt.icount && tt.accel == "tcg" {
				wantClock = ICountClock(shift)
			}
			if got := q.clockOf(tt.accel); got != wantClock {
				t.Errorf("clock %q, want %q", got, wantClock)
			}
		})
	}
}

// An instruction-counted clock names its shift when it is not the
// default's; anything else is refused.
func TestICountClocks(t *testing.T) {
	for clock, want := range map[string]int{"icount": ICountShift, "icount:0": 0, "icount:10": 10} {
		if got, ok := ICountShiftOf(clock); !ok || got != want || ICountClock(got) != clock {
			t.Errorf("%q: shift %d, %v", clock, got, ok)
		}
		if err := CheckClock(clock); err != nil {
			t.Errorf("%q refused: %v", clock, err)
		}
	}
	if ICountClock(ICountShift) != ClockICount || ICountClock(0) != "icount:0" {
		t.Errorf("ICountClock: %q, %q", ICountClock(ICountShift), ICountClock(0))
	}
	for _, bad := range []string{"icount:", "icount:11", "icount:-1", "icount:01", "icount:x", "icount0", "tsc"} {
		if IsICount(bad) || CheckClock(bad) == nil {
			t.Errorf("%q taken for a clock", bad)
		}
	}
}

// fakeQEMU writes a script that answers --version as the given QEMU.
func fakeQEMU(t *testing.T, version string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "qemu-stand-in")
	script := "#!/bin/sh\necho 'QEMU emulator version " + version + " (Debian)'\necho 'Copyright (c) 2003-2025 Fabrice Bellard'\n"
	if err := os.WriteFile(p, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

// Which QEMU may run an SMP guest under -icount: bookworm's 7.2 hangs one
// at its second vCPU, 10.0 does not.
func TestQEMUVersion(t *testing.T) {
	for _, tt := range []struct {
		version string
		want    [2]int
		smp     bool
	}{{"7.2.22", [2]int{7, 2}, false}, {"10.0.2", [2]int{10, 0}, true}, {"11.1.0", [2]int{11, 1}, true}, {"9.2.0", [2]int{9, 2}, false}} {
		v, err := qemuVersion(fakeQEMU(t, tt.version))
		if err != nil || v != tt.want {
			t.Errorf("%s: version %v, %v; want %v", tt.version, v, err, tt.want)
		}
		if got := atLeast(v, ICountSMPSince); got != tt.smp {
			t.Errorf("%s: SMP under icount %v, want %v", tt.version, got, tt.smp)
		}
	}
	if _, err := qemuVersion(filepath.Join(t.TempDir(), "none")); err == nil {
		t.Error("a missing QEMU has a version")
	}
}

// The pool decides a VM's clock: auto takes instruction-counted time where
// the QEMU can (any QEMU for one vCPU, 10.0 on for more), host never does,
// icount insists (a VM it cannot have is refused) and refuses KVM.
func TestQEMUPoolClock(t *testing.T) {
	old, young := fakeQEMU(t, "7.2.22"), fakeQEMU(t, "10.0.2")
	zero, eleven := 0, MaxICountShift+1
	for _, tt := range []struct {
		name       string
		qemu       string
		clock      string
		cpus       int
		profile    *int // Config.ICountShift, a suite profile's
		wantICount bool
		wantShift  int
	}{
		{"auto, 10.0, 2 vCPUs", young, ClockAuto, 2, nil, true, ICountShift},
		{"auto, 7.2, 2 vCPUs", old, ClockAuto, 2, nil, false, ICountShift},
		{"auto, 7.2, 1 vCPU", old, ClockAuto, 1, nil, true, ICountShift},
		{"icount, 7.2, 1 vCPU", old, ClockICount, 1, nil, true, ICountShift},
		{"icount:0, 10.0, 2 vCPUs", young, "icount:0", 2, nil, true, 0},
		{"host, 10.0", young, ClockHost, 2, nil, false, ICountShift},
		// A suite's profile names the shift for auto and icount; an
		// icount:N clock names its own.
		{"auto, profile at 0", young, ClockAuto, 2, &zero, true, 0},
		{"icount, profile at 0", young, ClockICount, 2, &zero, true, 0},
		{"icount:3, profile at 0", young, "icount:3", 2, &zero, true, 3},
		{"icount:2, profile at 0", young, "icount:2", 2, &zero, true, 2},
		{"host, profile at 0", young, ClockHost, 2, &zero, false, 0},
	} {
		t.Run(tt.name, func(t *testing.T) {
			p, err := New("qemu", Config{QEMU: tt.qemu, Clock: tt.clock, ICountShift: tt.profile, WorkDir: t.TempDir(), RunDir: t.TempDir()})
			if err != nil {
				t.Skipf("no QEMU pool here: %v", err)
			}
			defer p.Close()
			hv, err := p.(*pool).newHV(Spec{Name: "x", Kernel: "/k", CPUs: tt.cpus}, t.TempDir())
			if err != nil {
				t.Fatal(err)
			}
			if q := hv.(*qemuVM); q.icount != tt.wantICount || q.shift != tt.wantShift {
				t.Errorf("icount %v at shift %d, want %v at %d", q.icount, q.shift, tt.wantICount, tt.wantShift)
			}
		})
	}
	if p, err := New("qemu", Config{QEMU: old, Clock: ClockICount, WorkDir: t.TempDir(), RunDir: t.TempDir()}); err == nil {
		defer p.Close()
		if _, err := p.(*pool).newHV(Spec{Name: "x", Kernel: "/k", CPUs: 2}, t.TempDir()); err == nil {
			t.Error("QEMU 7.2 was given a 2-vCPU guest under icount")
		}
	}
	if _, err := New("qemu", Config{QEMU: young, Clock: ClockICount, Accel: "kvm"}); err == nil {
		t.Error("icount with KVM was accepted")
	}
	if _, err := New("qemu", Config{QEMU: young, Clock: "tsc"}); err == nil {
		t.Error("an unknown clock was accepted")
	}
	if _, err := New("qemu", Config{QEMU: young, ICountShift: &eleven}); err == nil {
		t.Errorf("a profile's icount shift of %d was accepted", eleven)
	}
}

// A spin is a clock crawling against the host's by the shift's measure:
// at shift 0 the guest's clock runs a quarter as fast for the same
// instructions as at shift 2, and so does the rate below which a busy
// guest is taken to spin.
func TestCrawlScalesWithTheShift(t *testing.T) {
	for clock, want := range map[string]float64{ClockICount: crawlRate, "icount:0": crawlRate / 4, "icount:3": crawlRate * 2, ClockHost: crawlRate} {
		if got := crawlFor(clock); got != want {
			t.Errorf("%s: crawl below %v, want %v", clock, got, want)
		}
	}
}
