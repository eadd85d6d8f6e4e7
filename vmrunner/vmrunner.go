// Package vmrunner boots kernels in virtual machines and talks to the guest
// agent that runs inside them. A Pool creates Instances; an Instance boots,
// runs requests on the agent (streaming its events), and is closed.
//
// Backends register themselves by name: "qemu" (qemu-system-x86_64 run
// directly, KVM when it works, else TCG), "libvirt" (a transient domain on a
// local or remote libvirtd) and "fake" (no VM, for tests of the layers above).
//
// Failures carry blame: a kernel that panics, oopses, hangs or never reports
// ready is a *BootError (the kernel's fault, with the console excerpt); a
// VM that could not be started is an *InfraError (ours, worth a retry).
//
// The console is read once, as it arrives, into typed reports
// (vmrunner/report): the kernel's first fatal report (an oops, a BUG, a
// lockup, a hung task, an RCU stall, a panic) ends the boot or the request
// within seconds, as a *BootError carrying the report with its trace
// decoded to file:line; warnings are counted (Instance.Warnings). A
// request that outlives a generous multiple of the base kernel's own time
// for it is a hang (Pace).
package vmrunner

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"runtime"
	"sort"
	"sync"
	"time"

	"github.com/patchbot/patchbot/vmrunner/agent"
	"github.com/patchbot/patchbot/vmrunner/proto"
	"github.com/patchbot/patchbot/vmrunner/report"
)

// Spec describes one VM.
type Spec struct {
	Name string // a label for logs and domain names, e.g. "base-1"
	// Kernel is the bzImage. The fast boot path starts the same kernel's
	// uncompressed ELF instead: Vmlinux, or else the file named "vmlinux"
	// beside Kernel (where images keeps it), when it has a PVH entry point.
	Kernel    string
	Vmlinux   string
	Initramfs string // cpio(.gz) with the agent as /init (see images/initramfs)
	// Cmdline is appended to the command line the backend needs
	// (console=ttyS0 and the like).
	Cmdline string
	CPUs    int // default 1
	MemMiB  int // default 512
	// Disks are read-only raw images, attached in order: /dev/vda, /dev/vdb…
	// in the guest.
	Disks []string
	// ConsoleLog is where the serial console is written; a file in the
	// instance's work directory when empty.
	ConsoleLog string
	// BootTimeout bounds launch → agent ready; RunTimeout bounds each Do.
	// Defaults: DefaultBootTimeout, DefaultRunTimeout.
	BootTimeout time.Duration
	RunTimeout  time.Duration
	// BootLimit, when longer than BootTimeout, lets a boot whose console
	// keeps growing go on up to BootLimit: BootTimeout is then how long
	// the console may stay quiet. A guest on a loaded host boots slowly
	// but prints as it goes; a hung one goes quiet. 0 is BootTimeout.
	BootLimit time.Duration
}

// Boot paths (Config.Boot).
const (
	BootAuto = ""
	// BootPVH starts the kernel's ELF at its PVH entry point, on QEMU's
	// microvm machine (qemu backend) with virtio-mmio devices: no BIOS
	// real-mode setup, no decompression, no PCI or ACPI probing.
	BootPVH = "pvh"
	// BootLegacy boots the bzImage on the pc machine with PCI devices and
	// ACPI, through the firmware.
	BootLegacy = "legacy"
)

// Defaults for Spec fields left zero.
const (
	DefaultCPUs        = 1
	DefaultMemMiB      = 512
	DefaultBootTimeout = 60 * time.Second
	DefaultRunTimeout  = 30 * time.Minute
)

func (s *Spec) setDefaults() {
	if s.CPUs <= 0 {
		s.CPUs = DefaultCPUs
	}
	if s.MemMiB <= 0 {
		s.MemMiB = DefaultMemMiB
	}
	if s.BootTimeout <= 0 {
		s.BootTimeout = DefaultBootTimeout
	}
	if s.RunTimeout <= 0 {
		s.RunTimeout = DefaultRunTimeout
	}
	if s.Name == "" {
		s.Name = "vm"
	}
}

// check reports bad input before anything is started.
func (s *Spec) check() error {
	if s.Kernel == "" {
		return fmt.Errorf("spec %q: no kernel given", s.Name)
	}
	for _, p := range append([]string{s.Kernel, s.Vmlinux, s.Initramfs}, s.Disks...) {
		if p == "" {
			continue
		}
		if _, err := os.Stat(p); err != nil {
			return fmt.Errorf("spec %q: %w", s.Name, err)
		}
	}
	if s.CPUs > 64 {
		return fmt.Errorf("spec %q: %d CPUs is more than the 64 supported", s.Name, s.CPUs)
	}
	if len(s.Disks) > 26 {
		return fmt.Errorf("spec %q: %d disks is more than /dev/vda…vdz", s.Name, len(s.Disks))
	}
	return nil
}

// Pool creates instances; at most Config.Limit of them exist at once
// (Create waits for a free slot).
type Pool interface {
	Create(ctx context.Context, s Spec) (Instance, error)
	// Close closes every instance the pool still holds.
	Close() error
}

// Instance is one VM.
type Instance interface {
	// Boot launches the VM and waits for the agent's "ready".
	Boot(ctx context.Context) (Info, error)
	// Reboot boots the kernel afresh in a new VM of the same spec, and
	// waits for the agent's ready, as Boot did; Warnings go on counting.
	Reboot(ctx context.Context) (Info, error)
	// Do sends req to the agent, passes every event to onEvent (may be
	// nil), and returns the "result" payload. An "error" event is returned
	// as a *GuestError; a crash or hang of the kernel as a *BootError.
	Do(ctx context.Context, req proto.Request, onEvent func(proto.Event)) (json.RawMessage, error)
	// Console returns the serial console output of the current boot so far.
	Console() []byte
	// Warnings are the kernel warnings (WARN_ON(), WARN()) the consoles
	// showed since the first boot, each with its count and first report, decoded;
	// more counts those past report.MaxWarnings titles. A warning does not
	// end a request; any other trouble the kernel reports does (Do).
	Warnings() (ws []report.Warning, more int)
	// Close destroys the domain or kills and reaps QEMU; idempotent.
	Close() error
}

// Info describes a booted instance.
type Info struct {
	Backend string `json:"backend"`
	Accel   string `json:"accel"` // "kvm" or "tcg"
	// Clock is the guest's time: ClockHost (real time) or
	// instruction-counted (ICountClock: ClockICount at ICountShift,
	// "icount:N" at shift N).
	Clock         string        `json:"clock,omitempty"`
	KernelRelease string        `json:"kernel_release"`
	Repro         string        `json:"repro"` // QEMU command line or domain XML
	Boot          string        `json:"boot"`  // BootPVH or BootLegacy: the path taken
	BootDuration  time.Duration `json:"boot_duration"`
}

// Config configures a pool. The zero value is usable.
type Config struct {
	// Limit is the number of VMs that may exist at once; default one per
	// two host cores (at least one).
	Limit int
	// WorkDir holds per-instance files (sockets, console logs); default
	// os.TempDir(). Each instance gets its own directory, removed on Close.
	WorkDir string
	// Accel for the qemu backend: "" (try KVM, fall back to TCG), "kvm" or
	// "tcg".
	Accel string
	// QEMU is the qemu-system-x86_64 binary; default from $PATH.
	QEMU string
	// Clock is how a TCG guest keeps time: ClockAuto (the default),
	// ClockHost, ClockICount or "icount:N" (the qemu backend; see
	// clock.go). libvirt's
	// guests keep TCG's real time.
	Clock string
	// ICountShift is the -icount shift of a guest that keeps
	// instruction-counted time by ClockAuto or ClockICount: nil is
	// ICountShift; 0 to MaxICountShift. A suite's profile names it
	// (suites.Params.ICountShift); an "icount:N" Clock names its own
	// shift and wins.
	ICountShift *int
	// Boot picks the boot path: BootAuto ("", the default) takes BootPVH
	// when the kernel has a PVH ELF (see Spec.Vmlinux) and BootLegacy
	// otherwise; BootPVH insists on it; BootLegacy is the old path, kept
	// to compare against.
	Boot string
	// User is the account the qemu backend runs QEMU as when patchbot
	// runs as root; default VMUser, created on first use. As another
	// user, QEMU runs as that user. Either way it runs in a sandbox with
	// no view of the host's files (see docs/vmrunner.md).
	User string
	// RunDir keeps what vmrunner learns about this host until it reboots
	// (that KVM hangs guests); default /run/patchbot as root, else
	// $XDG_RUNTIME_DIR/patchbot or the user's cache directory. It must
	// be writable by patchbot's user alone.
	RunDir string
	// URI is the libvirt connection URI; default qemu:///system on the
	// local socket. A remote host must be reached over an authenticated
	// transport (qemu+ssh://, qemu+libssh2://, qemu+tls://); plain
	// qemu+tcp:// is accepted only to this host's loopback address.
	URI string
	// Log receives what reproduces each boot and backend decisions; default
	// slog.Default().
	Log *slog.Logger
	// RunSuite answers run-suite requests in the fake backend, which runs
	// the agent in this process; nil answers with an error event.
	RunSuite agent.RunSuiteFunc
}

func (c *Config) setDefaults() {
	if c.Limit <= 0 {
		c.Limit = max(1, runtime.NumCPU()/2)
	}
	if c.WorkDir == "" {
		c.WorkDir = os.TempDir()
	}
	if c.Log == nil {
		c.Log = slog.Default()
	}
	if c.RunDir == "" {
		c.RunDir = defaultRunDir()
	}
}

// backendFunc makes a pool of one backend from a defaulted config.
type backendFunc func(cfg Config) (Pool, error)

var (
	backendsMu sync.Mutex
	backends   = map[string]backendFunc{}
)

// register makes a backend available to New; backends call it from init.
func register(name string, f backendFunc) {
	backendsMu.Lock()
	defer backendsMu.Unlock()
	if _, dup := backends[name]; dup {
		panic("vmrunner: duplicate backend " + name)
	}
	backends[name] = f
}

// Backends lists the registered backend names.
func Backends() []string {
	backendsMu.Lock()
	defer backendsMu.Unlock()
	var names []string
	for n := range backends {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// New returns a pool of the named backend ("qemu", "libvirt", "fake").
func New(backend string, cfg Config) (Pool, error) {
	backendsMu.Lock()
	f, ok := backends[backend]
	backendsMu.Unlock()
	if !ok {
		return nil, fmt.Errorf("vmrunner: unknown backend %q (have %v)", backend, Backends())
	}
	cfg.setDefaults()
	return f(cfg)
}
