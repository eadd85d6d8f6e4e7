package vmrunner

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/patchbot/patchbot/vmrunner/agent"
	"github.com/patchbot/patchbot/vmrunner/proto"
)

func qemuTestPool(t *testing.T) Pool {
	t.Helper()
	needQEMU(t)
	p, err := New("qemu", Config{WorkDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

// bootAndCheck boots k with two disks and checks what the agent sees:
// the release, the CPUs, the disks in order, exec, and power-off.
func bootAndCheck(t *testing.T, p Pool, k kernel) {
	ctx := context.Background()
	disks := []string{rawDisk(t, "first"), rawDisk(t, "second")}
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
	t.Logf("%s: backend %s, accel %s, release %s, boot %v", k.name, info.Backend, info.Accel, info.KernelRelease, info.BootDuration)
	if info.KernelRelease == "" || info.Repro == "" || (info.Accel != "kvm" && info.Accel != "tcg") {
		t.Errorf("info = %+v", info)
	}

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
