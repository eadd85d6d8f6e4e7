package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/patchbot/patchbot/suites/invm"
	"github.com/patchbot/patchbot/vmrunner"
)

func init() {
	register(&command{
		name:    "vm boot",
		summary: "boot a kernel in a VM and wait for the guest agent",
		usage:   "vm boot --kernel BZIMAGE [--backend qemu|libvirt] [--cpus N] [--mem MIB] [--json]",
		desc: `Boots the kernel with an initramfs holding the guest agent as /init, waits
until the agent reports ready, and powers the VM off: a check that a kernel
boots, and how long it takes. The command line to reproduce the VM by hand is
logged.`,
		example: `patchbot vm boot --kernel /var/cache/patchbot/builds/base-*/bzImage --json`,
		flags: func(fs *flag.FlagSet) func(context.Context, []string) error {
			kernel := fs.String("kernel", "", "bzImage to boot (required)")
			rd := fs.String("initramfs", "", "initramfs to boot with (default: built with the agent, and the kernel's modules if it has a tree in /lib/modules)")
			backend := fs.String("backend", invm.DefaultBackend, "VM backend: qemu or libvirt")
			uri := fs.String("uri", "", "libvirt URI (default "+vmrunner.DefaultURI+")")
			accel := fs.String("accel", "", "qemu accelerator: kvm or tcg (default: try KVM, fall back to TCG)")
			cpus := fs.Int("cpus", invm.DefaultCPUs, "vCPUs, 1..64")
			mem := fs.Int("mem", invm.DefaultMemMiB, "memory in MiB, at least 256")
			cmdline := fs.String("append", "", "extra kernel command line")
			timeout := fs.Duration("timeout", vmrunner.DefaultBootTimeout, "boot deadline (launch to agent ready)")
			asJSON := fs.Bool("json", false, "print the result as JSON (schema 1)")
			return func(ctx context.Context, args []string) error {
				switch {
				case *kernel == "":
					return usagef("--kernel is required")
				case *backend != "qemu" && *backend != "libvirt":
					return usagef("--backend %q: want qemu or libvirt", *backend)
				case *accel != "" && *accel != "kvm" && *accel != "tcg":
					return usagef("--accel %q: want kvm or tcg", *accel)
				case *cpus < 1 || *cpus > 64:
					return usagef("--cpus %d: want 1..64", *cpus)
				case *mem < 256:
					return usagef("--mem %d: want at least 256 (MiB)", *mem)
				case *timeout <= 0:
					return usagef("--timeout %v: want a positive duration", *timeout)
				}
				if _, err := os.Stat(*kernel); err != nil {
					return usageError{err.Error()}
				}
				return runVMBoot(ctx, vmBoot{kernel: *kernel, initramfs: *rd, backend: *backend, uri: *uri, accel: *accel,
					cpus: *cpus, mem: *mem, cmdline: *cmdline, timeout: *timeout, json: *asJSON})
			}
		},
	})
}

type vmBoot struct {
	kernel, initramfs, backend, uri, accel, cmdline string
	cpus, mem                                       int
	timeout                                         time.Duration
	json                                            bool
}

// vmBootResult is what "vm boot --json" prints.
type vmBootResult struct {
	Schema        int    `json:"schema"`
	Backend       string `json:"backend"`
	Accel         string `json:"accel"`
	BootMillis    int64  `json:"boot_ms"`
	KernelRelease string `json:"kernel_release"`
	Repro         string `json:"repro,omitempty"`
}

func runVMBoot(ctx context.Context, o vmBoot) error {
	info, err := invm.Boot(ctx, invm.BootSpec{Kernel: o.kernel, Initramfs: o.initramfs, Backend: o.backend, URI: o.uri,
		Accel: o.accel, CPUs: o.cpus, MemMiB: o.mem, Cmdline: o.cmdline, Timeout: o.timeout, Log: terminalLog(stderr)})
	if err != nil {
		if info.Repro != "" {
			fmt.Fprintf(stderr, "to reproduce:\n%s\n", info.Repro)
		}
		if vmrunner.IsBoot(err) {
			fmt.Fprintf(stderr, "patchbot vm boot: %v\n", err)
			return exitError{exitPatchFault}
		}
		return err
	}
	res := vmBootResult{Schema: schemaVersion, Backend: info.Backend, Accel: info.Accel,
		BootMillis: info.BootDuration.Milliseconds(), KernelRelease: info.KernelRelease, Repro: info.Repro}
	if o.json {
		return writeJSON(stdout, res)
	}
	fmt.Fprintf(stdout, "backend         %s\naccel           %s\nboot_ms         %d\nkernel_release  %s\n", res.Backend, res.Accel, res.BootMillis, res.KernelRelease)
	return nil
}
