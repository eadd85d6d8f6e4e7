package vmrunner

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/patchbot/patchbot/vmrunner/agent"
	"github.com/patchbot/patchbot/vmrunner/proto"
)

// rebootGuest boots the default kernel and reboots it: the guest after
// the reboot is a new kernel (another boot_id), its console holds that
// boot alone, and the new VM's monitor answers for a look into it.
func rebootGuest(t *testing.T, p Pool) {
	ctx := context.Background()
	vm, _ := bootDefault(t, p, "reboot")
	bootID := func() string {
		raw, err := vm.Do(ctx, proto.Request{Op: proto.OpExec, Argv: []string{"/init", "-exit", "0", "-head", "/proc/sys/kernel/random/boot_id"}}, nil)
		if err != nil {
			t.Fatalf("reading boot_id: %v", err)
		}
		var res agent.ExecResult
		json.Unmarshal(raw, &res)
		id, _, _ := strings.Cut(res.Stdout, "\n")
		if len(id) != 36 {
			t.Fatalf("boot_id %q", res.Stdout)
		}
		return id
	}
	first := bootID()
	start := time.Now()
	info, err := vm.Reboot(ctx)
	if err != nil {
		t.Fatalf("Reboot: %v", err)
	}
	t.Logf("rebooted in %s (boot %s)", time.Since(start).Round(time.Millisecond), info.BootDuration.Round(time.Millisecond))
	second := bootID()
	if second == first {
		t.Errorf("the same boot_id %s after the reboot", first)
	}
	if info.KernelRelease == "" || info.BootDuration <= 0 {
		t.Errorf("reboot info %+v", info)
	}
	if n := strings.Count(string(vm.Console()), "Linux version"); n != 1 {
		t.Errorf("the console after the reboot has %d kernel banners, want its own one", n)
	}
	// A reboot that fails (here its time runs out before the guest is
	// up) leaves the VM to be rebooted again: the retry after a hung
	// reboot is such a reboot.
	short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	_, err = vm.Reboot(short)
	cancel()
	if err == nil {
		t.Fatal("a reboot given 50 ms booted")
	}
	if _, err := vm.Reboot(ctx); err != nil {
		t.Fatalf("rebooting after a failed reboot: %v", err)
	}
	if third := bootID(); third == second {
		t.Errorf("the same boot_id %s after the reboot that followed a failed one", third)
	}
	m := vm.(*machine)
	mon, ok := m.hv.(monitor)
	if !ok {
		t.Fatalf("%T has no monitor", m.hv)
	}
	regs, err := readRegisters(ctx, mon)
	if err != nil || len(regs) != 2 {
		t.Errorf("the new VM's monitor: %d vCPUs' registers, %v", len(regs), err)
	}
}

func TestQEMUReboot(t *testing.T) { rebootGuest(t, qemuTestPool(t)) }

func TestLibvirtReboot(t *testing.T) {
	needLibvirtd(t)
	rebootGuest(t, libvirtTestPool(t))
}
