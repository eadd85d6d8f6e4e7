package invm

import (
	"context"
	"log/slog"
	"time"

	"github.com/patchbot/patchbot/images/initramfs"
	"github.com/patchbot/patchbot/vmrunner"
	"github.com/patchbot/patchbot/vmrunner/proto"
)

// BootSpec is one kernel booted alone: a check that it boots, and how
// long it takes (patchbot vm boot).
type BootSpec struct {
	Kernel    string
	Initramfs string // default: built with the agent (initramfs.ForKernel)
	Backend   string // qemu or libvirt
	URI       string // libvirt's
	Accel     string // qemu's: kvm or tcg; default KVM when usable
	CPUs      int
	MemMiB    int
	Cmdline   string
	Timeout   time.Duration // launch to the agent's ready
	Log       *slog.Logger
}

// Boot boots the kernel with the guest agent as /init, waits until the
// agent is ready, and powers the VM off through the agent, as a run ends.
// The Info carries the command line that reproduces the VM, also when
// the boot failed.
func Boot(ctx context.Context, s BootSpec) (vmrunner.Info, error) {
	if s.Initramfs == "" {
		rd, err := initramfs.ForKernel(ctx, s.Kernel, initramfs.Options{})
		if err != nil {
			return vmrunner.Info{}, err
		}
		s.Initramfs = rd
	}
	pool, err := vmrunner.New(s.Backend, vmrunner.Config{URI: s.URI, Accel: s.Accel, Log: s.Log})
	if err != nil {
		return vmrunner.Info{}, err
	}
	defer pool.Close()
	vm, err := pool.Create(ctx, vmrunner.Spec{Name: "vm-boot", Kernel: s.Kernel, Initramfs: s.Initramfs, Cmdline: s.Cmdline,
		CPUs: s.CPUs, MemMiB: s.MemMiB, BootTimeout: s.Timeout})
	if err != nil {
		return vmrunner.Info{}, err
	}
	defer vm.Close()
	info, err := vm.Boot(ctx)
	if err != nil {
		return info, err
	}
	// Power off through the agent; give it a moment.
	offCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if _, err := vm.Do(offCtx, proto.Request{Op: proto.OpPowerOff}, nil); err != nil && s.Log != nil {
		s.Log.Warn("poweroff", "err", err)
	}
	return info, nil
}
