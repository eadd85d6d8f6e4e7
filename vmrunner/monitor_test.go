package vmrunner

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/patchbot/patchbot/vmrunner/proto"
	"github.com/patchbot/patchbot/vmrunner/report"
)

// lookIntoIdleGuest boots the default kernel and looks into it as into a
// hung guest, through the backend's monitor: an idle guest is not stuck
// (its vCPUs halted in most samples), and an idle vCPU's stack, walked by
// its frame pointers with the guest stopped, decodes to the idle loop.
func lookIntoIdleGuest(t *testing.T, p Pool) {
	ctx := context.Background()
	vm, k := bootDefault(t, p, "look")
	m := vm.(*machine)
	mon, ok := m.hv.(monitor)
	if !ok {
		t.Fatalf("%T has no monitor", m.hv)
	}
	sym, err := report.Open(k.vmlinux)
	if err != nil {
		t.Fatal(err)
	}
	defer sym.Close()
	start := time.Now()
	s, err := sampleCPUs(ctx, mon, sym, kernelHZ(k.vmlinux))
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("samples, in %s:\n%s", time.Since(start).Round(time.Millisecond), strings.Join(s.Lines(), "\n"))
	if s.Samples != hangSamples || len(s.CPUs) != 2 || s.Stuck() || s.Stack != nil {
		t.Errorf("an idle guest: %d samples, %d vCPUs, stuck %v", s.Samples, len(s.CPUs), s.Stuck())
	}
	if s.HostClock < (hangSamples-1)*HangSampleEvery {
		t.Errorf("the host's clock advanced %s over %d samples", s.HostClock, s.Samples)
	}
	// An idle guest's clock runs. With every vCPU idle a tickless kernel
	// updates jiffies only when one wakes (seen: 0 s over 862 ms on
	// libvirt), so where the samples saw none, the clock is read again
	// around a request that wakes the guest.
	if s.GuestClock <= 0 {
		at, _ := sym.Object("jiffies_64")
		read := func() uint64 {
			w, err := readWords(ctx, mon, at, 1)
			if err != nil || len(w) != 1 {
				t.Fatalf("reading jiffies_64: %v, %d words", err, len(w))
			}
			return w[0]
		}
		before := read()
		time.Sleep(time.Second)
		if _, err := vm.Do(ctx, proto.Request{Op: proto.OpInfo}, nil); err != nil {
			t.Fatal(err)
		}
		if after := read(); after <= before {
			t.Errorf("the guest's clock stood at %d jiffies over a second and a request that woke it", before)
		}
	}
	for _, c := range s.CPUs {
		if c.Halted < hangSamples/2 {
			t.Errorf("vCPU %d idle in %d of %d samples", c.CPU, c.Halted, s.Samples)
		}
	}

	if _, err := mon.hmp(ctx, "stop"); err != nil {
		t.Fatal(err)
	}
	defer mon.hmp(ctx, "cont")
	regs, err := readRegisters(ctx, mon)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range regs {
		if !r.Kernel() {
			t.Errorf("vCPU %d at %#x, CPL %d: not in the kernel", r.CPU, r.RIP, r.CPL)
			continue
		}
		start := time.Now()
		stack, ended := walkFrames(ctx, mon, r)
		t.Logf("vCPU %d: %d frames walked in %s", r.CPU, len(stack), time.Since(start).Round(time.Millisecond))
		st := report.Sample([][]report.Registers{regs}, r.CPU, stack, sym).Stack
		trace := strings.Join(st.Trace(), "\n")
		t.Logf("vCPU %d (walk ended: %q):\n%s", r.CPU, ended, trace)
		if ended != "" || len(stack) < 3 || !strings.Contains(trace, "do_idle+") || !strings.Contains(trace, "kernel/sched/idle.c:") {
			t.Errorf("vCPU %d: the idle loop's stack is not do_idle's, decoded (walk ended: %q):\n%s", r.CPU, ended, trace)
		}
	}
}

// bootDefault boots the default kernel in p on 2 vCPUs and 256 MiB; the
// VM is closed with the test.
func bootDefault(t *testing.T, p Pool, name string) (Instance, kernel) {
	t.Helper()
	k := minimalKernel(t)
	vm, err := p.Create(context.Background(), Spec{Name: name, Kernel: k.bzImage, Initramfs: k.initramfs, CPUs: 2, MemMiB: 256, BootTimeout: 3 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { vm.Close() })
	if _, err := vm.Boot(context.Background()); err != nil {
		t.Fatalf("Boot: %v", err)
	}
	return vm, k
}

func TestQEMULookIntoGuest(t *testing.T) { lookIntoIdleGuest(t, qemuTestPool(t)) }

func TestLibvirtLookIntoGuest(t *testing.T) {
	needLibvirtd(t)
	lookIntoIdleGuest(t, libvirtTestPool(t))
}
