package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/patchbot/patchbot/images/initramfs"
	"github.com/patchbot/patchbot/vmrunner"
	"github.com/patchbot/patchbot/vmrunner/proto"
)

func init() {
	register(command{name: "vm", usage: "boot a kernel in a VM and wait for the guest agent (vm boot --kernel BZIMAGE)", run: runVM})
}

// vmBootResult is what "vm boot" prints.
type vmBootResult struct {
	Backend       string `json:"backend"`
	Accel         string `json:"accel"`
	BootMillis    int64  `json:"boot_ms"`
	KernelRelease string `json:"kernel_release"`
	Repro         string `json:"repro,omitempty"`
}

func runVM(ctx context.Context, args []string) error {
	if len(args) == 0 || args[0] != "boot" {
		return errors.New("usage: patchbot vm boot --kernel BZIMAGE [--backend qemu|libvirt] [--cpus N] [--mem MIB] [--json]")
	}
	fs := flag.NewFlagSet("vm boot", flag.ContinueOnError)
	kernel := fs.String("kernel", "", "bzImage to boot (required)")
	rd := fs.String("initramfs", "", "initramfs to boot with (default: built with the agent, and the kernel's modules if it has a tree in /lib/modules)")
	backend := fs.String("backend", "qemu", "qemu or libvirt")
	uri := fs.String("uri", "", "libvirt URI (default "+vmrunner.DefaultURI+")")
	accel := fs.String("accel", "", "qemu accelerator: kvm or tcg (default: try KVM, fall back to TCG)")
	cpus := fs.Int("cpus", 1, "virtual CPUs")
	mem := fs.Int("mem", 512, "memory in MiB")
	cmdline := fs.String("append", "", "extra kernel command line")
	timeout := fs.Duration("timeout", vmrunner.DefaultBootTimeout, "boot deadline (launch to agent ready)")
	asJSON := fs.Bool("json", false, "print the result as JSON")
	if err := fs.Parse(args[1:]); err != nil {
		return exitError{2}
	}
	if *kernel == "" {
		fs.Usage()
		return exitError{2}
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))

	if *rd == "" {
		var err error
		if *rd, err = initramfs.ForKernel(ctx, *kernel, initramfs.Options{}); err != nil {
			return err
		}
	}
	pool, err := vmrunner.New(*backend, vmrunner.Config{URI: *uri, Accel: *accel, Log: log})
	if err != nil {
		return err
	}
	defer pool.Close()
	vm, err := pool.Create(ctx, vmrunner.Spec{Name: "vm-boot", Kernel: *kernel, Initramfs: *rd, Cmdline: *cmdline, CPUs: *cpus, MemMiB: *mem, BootTimeout: *timeout})
	if err != nil {
		return err
	}
	defer vm.Close()
	info, err := vm.Boot(ctx)
	if err != nil {
		fmt.Fprintf(os.Stderr, "to reproduce:\n%s\n", info.Repro)
		return err
	}
	// Power off through the agent, as a real run ends; give it a moment.
	offCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if _, err := vm.Do(offCtx, proto.Request{Op: proto.OpPowerOff}, nil); err != nil {
		log.Warn("poweroff", "err", err)
	}

	res := vmBootResult{Backend: info.Backend, Accel: info.Accel, BootMillis: info.BootDuration.Milliseconds(), KernelRelease: info.KernelRelease, Repro: info.Repro}
	if *asJSON {
		enc := json.NewEncoder(os.Stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(res)
	}
	fmt.Printf("backend         %s\naccel           %s\nboot_ms         %d\nkernel_release  %s\n", res.Backend, res.Accel, res.BootMillis, res.KernelRelease)
	return nil
}
