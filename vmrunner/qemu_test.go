package vmrunner

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/patchbot/patchbot/vmrunner/agent"
	"github.com/patchbot/patchbot/vmrunner/proto"
)

func qemuTestPool(t *testing.T) Pool {
	t.Helper()
	return qemuTestPoolWith(t, Config{})
}

func qemuTestPoolWith(t *testing.T, cfg Config) Pool {
	t.Helper()
	needQEMU(t)
	cfg.WorkDir = t.TempDir()
	p, err := New("qemu", cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

// bootAndCheck boots k with two disks and checks what the agent sees:
// the release, the CPUs, the disks in order, exec, and power-off; that
// the fast path was taken when the kernel has a vmlinux and the pool does
// not ask for the old one; and how QEMU is confined (checkConfined).
func bootAndCheck(t *testing.T, p Pool, k kernel) {
	bootAndCheckDisks(t, p, k, []string{rawDisk(t, t.TempDir(), "first"), rawDisk(t, t.TempDir(), "second")})
}

// bootAndCheckDisks is bootAndCheck with the two disks given (labelled
// "first" and "second").
func bootAndCheckDisks(t *testing.T, p Pool, k kernel, disks []string) {
	ctx := context.Background()
	vm, err := p.Create(ctx, Spec{Name: k.name, Kernel: k.bzImage, Initramfs: k.initramfs, CPUs: 2, MemMiB: 256, Disks: disks,
		// TCG on a loaded CI machine: generous, a hang still ends the test.
		BootTimeout: 3 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	defer vm.Close()
	info, err := vm.Boot(ctx)
	if err != nil {
		t.Fatalf("Boot: %v\nconsole:\n%s", err, vm.Console())
	}
	t.Logf("%s: backend %s, accel %s, boot path %s, release %s, boot %v", k.name, info.Backend, info.Accel, info.Boot, info.KernelRelease, info.BootDuration)
	if info.KernelRelease == "" || info.Repro == "" || (info.Accel != "kvm" && info.Accel != "tcg") {
		t.Errorf("info = %+v", info)
	}
	wantBoot := BootLegacy
	if k.vmlinux != "" && p.(*pool).cfg.Boot != BootLegacy {
		wantBoot = BootPVH
	}
	if info.Boot != wantBoot {
		t.Errorf("boot path %q, want %q", info.Boot, wantBoot)
	}
	// A guest given lpj= (a PVH guest under TCG on this host, whose HZ
	// is known) skips the delay-loop calibration on every CPU; a local
	// qemu one must be given it.
	gaveLPJ := strings.Contains(info.Repro, " lpj=")
	if p.(*pool).backend == "qemu" && info.Boot == BootPVH && info.Accel == "tcg" && TCGClockCmdline(0) != "" && kernelHZ(k.vmlinux) > 0 && !gaveLPJ {
		t.Errorf("a PVH guest under TCG was not given lpj=: %s", info.Repro)
	}
	if c := string(vm.Console()); gaveLPJ && !strings.Contains(c, "Calibrating delay loop (skipped) preset value") {
		t.Errorf("the guest calibrated its delay loop despite lpj=; console:\n%s", c)
	}
	// While it runs: whom QEMU runs as, its seccomp filter, and that it
	// cannot change the files it was given.
	checkConfined(t, vm)

	raw, err := vm.Do(ctx, proto.Request{Op: proto.OpInfo}, nil)
	if err != nil {
		t.Fatalf("info: %v", err)
	}
	var in agent.Info
	if err := json.Unmarshal(raw, &in); err != nil {
		t.Fatal(err)
	}
	if in.CPUs != 2 || strings.Join(in.Disks, ",") != "/dev/vda,/dev/vdb" || in.KernelRelease != info.KernelRelease {
		t.Errorf("guest info = %+v, want 2 CPUs, /dev/vda,/dev/vdb", in)
	}

	// The disks come in the order given: read each one's label back.
	for i, want := range []string{"first", "second"} {
		dev := fmt.Sprintf("/dev/vd%c", 'a'+i)
		raw, err := vm.Do(ctx, proto.Request{Op: proto.OpExec, Argv: []string{"/init", "-exit", "0", "-head", dev}}, nil)
		if err != nil {
			t.Fatalf("exec head %s: %v", dev, err)
		}
		var res agent.ExecResult
		json.Unmarshal(raw, &res)
		if !strings.HasPrefix(res.Stdout, want) {
			t.Errorf("%s starts with %q, want %q", dev, res.Stdout, want)
		}
	}

	raw, err = vm.Do(ctx, proto.Request{Op: proto.OpExec, Argv: []string{"/init", "-exit", "3", "hello"}}, nil)
	if err != nil {
		t.Fatalf("exec: %v", err)
	}
	var res agent.ExecResult
	json.Unmarshal(raw, &res)
	if res.ExitCode != 3 || !strings.Contains(res.Stdout, "hello") {
		t.Errorf("exec = %+v, want exit 3 and hello", res)
	}

	if _, err := vm.Do(ctx, proto.Request{Op: proto.OpPowerOff}, nil); err != nil {
		t.Fatalf("poweroff: %v", err)
	}
	hv := vm.(*machine).hv
	select {
	case <-hv.stopped():
	case <-time.After(30 * time.Second):
		t.Fatal("the VM did not stop after poweroff")
	}
	if ended, err, _ := hv.exitStatus(); !ended {
		t.Errorf("after poweroff: the guest did not end the VM itself: %v", err)
	}
}

func TestQEMUBootDebianKernel(t *testing.T) {
	bootAndCheck(t, qemuTestPool(t), debianKernel(t))
}

// A kernel that cannot run init panics; with panic=-1 the VM stops and the
// boot fails with the panic lines, long before the deadline.
func TestQEMUPanicAtBoot(t *testing.T) {
	p := qemuTestPool(t)
	k := debianKernel(t)
	vm, err := p.Create(context.Background(), Spec{Kernel: k.bzImage, Initramfs: k.initramfs, Cmdline: "rdinit=/nonexistent init=/nonexistent", MemMiB: 256, BootTimeout: 2 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	defer vm.Close()
	start := time.Now()
	_, err = vm.Boot(context.Background())
	var be *BootError
	if !errors.As(err, &be) {
		t.Fatalf("Boot err = %v (%T), want a *BootError\nconsole:\n%s", err, err, vm.Console())
	}
	if be.Reason != "kernel panic" || !strings.Contains(string(be.Excerpt), "Kernel panic - not syncing") {
		t.Errorf("BootError reason %q, excerpt:\n%s", be.Reason, be.Excerpt)
	}
	if d := time.Since(start); d > time.Minute {
		t.Errorf("panic took %v to be noticed", d)
	}
}

// Cancelling a boot and closing the pool leave no QEMU behind.
func TestQEMUCancelAndCloseReap(t *testing.T) {
	p := qemuTestPool(t)
	k := debianKernel(t)
	ctx, cancel := context.WithCancel(context.Background())
	vm, err := p.Create(ctx, Spec{Kernel: k.bzImage, Initramfs: k.initramfs, MemMiB: 256})
	if err != nil {
		t.Fatal(err)
	}
	time.AfterFunc(500*time.Millisecond, cancel)
	_, err = vm.Boot(ctx)
	if !errors.Is(err, context.Canceled) {
		t.Errorf("Boot after cancel: err = %v, want context.Canceled", err)
	}
	q := vm.(*machine).hv.(*qemuVM)
	if pid := q.cmd.Process.Pid; alive(pid) {
		t.Errorf("QEMU pid %d still running after a cancelled boot", pid)
	}
	vm.Close() // frees the pool slot

	// A hang: the boot deadline passes before the agent can be ready.
	vm2, err := p.Create(context.Background(), Spec{Kernel: k.bzImage, Initramfs: k.initramfs, MemMiB: 256, BootTimeout: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	_, err = vm2.Boot(context.Background())
	var be *BootError
	if !errors.As(err, &be) || !strings.HasPrefix(be.Reason, "hang") {
		t.Errorf("Boot past the deadline: err = %v, want a hang BootError", err)
	}
	q2 := vm2.(*machine).hv.(*qemuVM)
	if err := p.Close(); err != nil {
		t.Errorf("pool Close: %v", err)
	}
	if pid := q2.cmd.Process.Pid; alive(pid) {
		t.Errorf("QEMU pid %d still running after pool Close", pid)
	}
}

// QEMU that cannot start is our fault, not the kernel's.
func TestQEMUStartFailureIsInfra(t *testing.T) {
	needQEMU(t)
	p, err := New("qemu", Config{WorkDir: t.TempDir(), Accel: "tcg"})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	vm, err := p.Create(context.Background(), Spec{Kernel: fakeKernel(t), MemMiB: 1 << 30})
	if err != nil {
		t.Fatal(err)
	}
	defer vm.Close()
	_, err = vm.Boot(context.Background())
	if !IsInfra(err) || IsBoot(err) {
		t.Fatalf("Boot with 1 PiB of memory: err = %v (%T), want an InfraError", err, err)
	}
}

func TestQEMUBootMinimalKernel(t *testing.T) {
	p := qemuTestPool(t)
	bootAndCheck(t, p, minimalKernel(t))
}

// qemuPID finds the QEMU process below the jail's first process.
func qemuPID(t *testing.T, top int) int {
	t.Helper()
	ents, _ := os.ReadDir("/proc")
	parent := map[int]int{}
	var qemus []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		i := strings.LastIndexByte(string(b), ')')
		f := strings.Fields(string(b[i+1:]))
		if len(f) > 1 {
			parent[pid], _ = strconv.Atoi(f[1])
		}
		if strings.Contains(string(b[:i]), "qemu-system") {
			qemus = append(qemus, pid)
		}
	}
	for _, q := range qemus {
		for p := q; p > 1; p = parent[p] {
			if p == top {
				return q
			}
		}
	}
	t.Fatalf("no QEMU process below pid %d", top)
	return 0
}

// What QEMU sees of the host: a file only root may read (or, as
// another user, a file of ours under a private directory) is not there
// for it, nor is the cache or the host's processes.
func TestJailHidesHostFiles(t *testing.T) {
	dir := t.TempDir()
	secret := filepath.Join(dir, "secret")
	if err := os.WriteFile(secret, []byte("hunter2-sentinel"), 0o600); err != nil {
		t.Fatal(err)
	}
	j, err := newJail(context.Background(), "")
	if err != nil {
		t.Fatal(err)
	}
	for _, argv := range [][]string{
		{"/usr/bin/cat", secret},
		{"/usr/bin/cat", "/etc/shadow"},
		{"/usr/bin/ls", "/var/cache/patchbot", "/root", dir},
	} {
		out, err := exec.Command(j.argv(argv, false, 256)[0], j.argv(argv, false, 256)[1:]...).CombinedOutput()
		if err == nil || strings.Contains(string(out), "hunter2") || strings.Contains(string(out), "root:") {
			t.Errorf("jailed %v: err %v, output %q; want a failure that shows nothing", argv, err, out)
		}
	}
	// Only the jail's own processes in its /proc.
	out, err := exec.Command(j.argv([]string{"/usr/bin/ls", "/proc"}, false, 256)[0], j.argv([]string{"/usr/bin/ls", "/proc"}, false, 256)[1:]...).Output()
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, f := range strings.Fields(string(out)) {
		if _, err := strconv.Atoi(f); err == nil {
			n++
		}
	}
	if n > 3 {
		t.Errorf("the jail sees %d processes in /proc:\n%s", n, out)
	}
}

// A disk (or kernel) planted as a link to a file of patchbot's is
// refused: the guest would read it as its disk.
func TestQEMUPlantedLinkRefused(t *testing.T) {
	needQEMU(t)
	p := qemuTestPoolWith(t, Config{Accel: "tcg"})
	dir := t.TempDir()
	secret := filepath.Join(dir, "secret")
	os.WriteFile(secret, []byte("hunter2-sentinel"), 0o600)
	link := filepath.Join(dir, "disk.img")
	if err := os.Symlink(secret, link); err != nil {
		t.Fatal(err)
	}
	for _, s := range []Spec{
		{Name: "disk", Kernel: fakeKernel(t), Disks: []string{link}},
		{Name: "kernel", Kernel: link},
	} {
		vm, err := p.Create(context.Background(), s)
		if err != nil {
			t.Fatal(err)
		}
		_, err = vm.Boot(context.Background())
		vm.Close()
		if !IsInfra(err) || !strings.Contains(err.Error(), "symbolic link") {
			t.Errorf("%s: Boot with a planted link: err = %v, want an InfraError about the link", s.Name, err)
		}
	}
}

// A kernel that crashes while a request runs fails the request with the
// panic lines, not with a timeout.
func TestQEMUPanicDuringRequest(t *testing.T) {
	p := qemuTestPool(t)
	k := debianKernel(t)
	vm, err := p.Create(context.Background(), Spec{Kernel: k.bzImage, Initramfs: k.initramfs, MemMiB: 256, BootTimeout: 3 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	defer vm.Close()
	if _, err := vm.Boot(context.Background()); err != nil {
		t.Fatalf("Boot: %v\nconsole:\n%s", err, vm.Console())
	}
	_, err = vm.Do(context.Background(), proto.Request{Op: proto.OpExec, Argv: []string{"/init", "-exit", "0", "-write", "/proc/sysrq-trigger", "c"}}, nil)
	var be *BootError
	if !errors.As(err, &be) {
		t.Fatalf("crash during exec: err = %v (%T), want a *BootError\nconsole:\n%s", err, err, vm.Console())
	}
	if be.Reason != "kernel panic" && be.Reason != "oops" {
		t.Errorf("reason = %q, want a panic or oops", be.Reason)
	}
	if !strings.Contains(string(be.Excerpt), "sysrq") {
		t.Errorf("excerpt does not show the crash:\n%s", be.Excerpt)
	}
}
