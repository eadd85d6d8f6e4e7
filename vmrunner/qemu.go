package vmrunner

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/patchbot/patchbot/vmrunner/proto"
)

// KVMProbe is how long a kernel under KVM has to print "Linux version" on
// the console before KVM is deemed broken and the boot is retried under
// TCG. /dev/kvm can exist and open yet hang the guest (nested or
// emulated KVM), so the only sure test is a boot.
var KVMProbe = 4 * time.Second

// baseCmdline is what every guest needs: the console on the first serial
// port, and a panic that stops the VM at once (with -no-reboot) instead of
// waiting for the deadline.
const baseCmdline = "console=ttyS0 panic=-1"

// pvhCmdline is added on microvm: it has no keyboard controller or ACPI
// reset, so the kernel's reboot (the agent's power-off, a panic) must go
// straight to the triple fault that ends QEMU under -no-reboot. A guest
// that runs under TCG on this host is also given this host's TSC rate
// (see TCGClockCmdline); under KVM it has kvm-clock, and a remote host's
// TSC cannot be measured from here.
func pvhCmdline(tcgHere bool, hz int) string {
	if !tcgHere {
		return "reboot=t"
	}
	return strings.TrimSpace("reboot=t " + TCGClockCmdline(hz))
}

// pvhClockCmdline is pvhCmdline for a guest with the given accelerator and
// clock: under -icount its TSC's rate is exact (icountClockCmdline).
func pvhClockCmdline(accel, clock string, hz int) string {
	if accel == "tcg" && IsICount(clock) {
		return "reboot=t " + icountClockCmdline(hz)
	}
	return pvhCmdline(accel != "kvm", hz)
}

// maxConsole bounds the console log: a guest printing without end must
// not fill the disk or patchbot's memory.
const maxConsole = 16 << 20

func init() {
	register("qemu", newQEMUPool)
}

// kvmBroken is the verdict on this host's KVM, shared by all pools: once a
// boot showed KVM does not work, later boots go straight to TCG.
var kvmBroken atomic.Bool

// accelState picks the accelerator for a pool's VMs.
type accelState struct {
	mode string // "", "kvm" or "tcg" as configured
	// dir keeps the verdict for later processes; "" when there is no
	// private place for it (then each process probes again).
	dir string
	log func(msg string, args ...any)
}

// verdictFile remembers, until the host reboots, that KVM hangs guests
// here, so that later processes (each "patchbot vm boot") skip the probe.
// It lives in a directory only patchbot can write: a file anyone could
// plant (the old /tmp one) would force every VM onto TCG.
func (a *accelState) verdictFile() string {
	if a.dir == "" {
		return ""
	}
	return filepath.Join(a.dir, "kvm-hangs-"+bootID())
}

func (a *accelState) pick() (accel string, probe time.Duration) {
	switch {
	case a.mode == "kvm":
		return "kvm", 0
	case a.mode == "tcg" || kvmBroken.Load():
		return "tcg", 0
	}
	if v := a.verdictFile(); v != "" && readPrivate(v) {
		kvmBroken.Store(true)
		a.log("KVM hangs guests on this host (found "+v+"), using TCG", "reason", "an earlier probe")
		return "tcg", 0
	}
	f, err := os.OpenFile("/dev/kvm", os.O_RDWR, 0)
	if err != nil {
		kvmBroken.Store(true)
		a.log("KVM unusable, using TCG", "reason", err)
		return "tcg", 0
	}
	f.Close()
	return "kvm", KVMProbe
}

func (a *accelState) markBad(reason string) bool {
	if a.mode != "" {
		return false // the user asked for this accelerator: no fallback
	}
	if !kvmBroken.Swap(true) {
		a.log("KVM does not work here, falling back to TCG (multi-threaded)", "reason", reason)
		if v := a.verdictFile(); v != "" {
			if err := writePrivate(v, []byte(reason+"\n")); err != nil {
				a.log("cannot keep the KVM verdict", "err", err)
			}
		}
	}
	return true
}

func newQEMUPool(cfg Config) (Pool, error) {
	bin := cfg.QEMU
	if bin == "" {
		bin = "qemu-system-x86_64"
	}
	path, err := exec.LookPath(bin)
	if err != nil {
		return nil, &InfraError{Op: "find QEMU", Err: err}
	}
	if path, err = filepath.Abs(path); err != nil {
		return nil, &InfraError{Op: "find QEMU", Err: err}
	}
	switch cfg.Accel {
	case "", "kvm", "tcg":
	default:
		return nil, fmt.Errorf("qemu: unknown accelerator %q (want kvm or tcg)", cfg.Accel)
	}
	if err := CheckClock(cfg.Clock); err != nil {
		return nil, fmt.Errorf("vmrunner: %w", err)
	}
	mode := cfg.Accel
	if IsICount(cfg.Clock) {
		if cfg.Accel == "kvm" {
			return nil, errors.New("qemu: instruction-counted time (clock icount) needs TCG, not KVM")
		}
		mode = "tcg" // icount is TCG's
	}
	// Whether this QEMU brings up an SMP guest under -icount; a single
	// vCPU runs under any.
	smpICount := false
	if cfg.Clock != ClockHost {
		v, err := qemuVersion(path)
		smpICount = err == nil && atLeast(v, ICountSMPSince)
		if !smpICount && cfg.Clock == ClockAuto {
			why := fmt.Sprintf("it is %d.%d", v[0], v[1])
			if err != nil {
				why = err.Error()
			}
			cfg.Log.Warn("this QEMU runs only single-vCPU guests under instruction-counted time; SMP guests keep TCG's real time",
				"qemu", path, "why", why, "want", fmt.Sprintf("%d.%d or later", ICountSMPSince[0], ICountSMPSince[1]))
		}
	}
	if err := checkBoot(cfg.Boot); err != nil {
		return nil, err
	}
	j, err := newJail(context.Background(), cfg.User)
	if err != nil {
		return nil, err
	}
	acc := &accelState{mode: mode, dir: cfg.RunDir, log: cfg.Log.Warn}
	if err := privateDir(acc.dir); err != nil {
		cfg.Log.Warn("no private directory for host facts; the KVM probe will run in each process", "dir", acc.dir, "err", err)
		acc.dir = ""
	}
	shift, err := poolShift(cfg)
	if err != nil {
		return nil, fmt.Errorf("vmrunner: %w", err)
	}
	return newPool("qemu", cfg, func(s Spec, dir string) (hypervisor, error) {
		boot, kernel, hz, err := bootPath(cfg.Boot, s)
		if err != nil {
			return nil, err
		}
		icount := cfg.Clock != ClockHost && (smpICount || s.CPUs <= 1)
		if IsICount(cfg.Clock) && !icount {
			return nil, &InfraError{Op: "instruction-counted time", Err: fmt.Errorf(
				"this QEMU cannot run a %d-vCPU guest under -icount (%d.%d or later can; scripts/install-deps.sh installs it)",
				s.CPUs, ICountSMPSince[0], ICountSMPSince[1])}
		}
		return &qemuVM{bin: path, spec: s, dir: dir, acc: acc, jail: j, boot: boot, kernel: kernel, hz: hz, icount: icount, shift: shift}, nil
	}), nil
}

func checkBoot(b string) error {
	switch b {
	case BootAuto, BootPVH, BootLegacy:
		return nil
	}
	return fmt.Errorf("vmrunner: unknown boot path %q (want %q or %q)", b, BootPVH, BootLegacy)
}

// qemuVM is one qemu-system-x86_64 process.
type qemuVM struct {
	bin    string
	spec   Spec
	boot   string // BootPVH or BootLegacy
	kernel string // the file booted: the PVH ELF or the bzImage
	hz     int    // the PVH kernel's CONFIG_HZ, 0 if unknown (kernelHZ)
	// icount: under TCG, the guest keeps instruction-counted time
	// at shift (ICountClock); under KVM it keeps real time whatever
	// this says.
	icount bool
	shift  int
	dir    string
	acc    *accelState
	jail   *jail

	mu      sync.Mutex
	cmd     *exec.Cmd
	out     *limitedBuffer
	done    chan struct{} // closed when the process has been reaped
	waitErr error
	accel   string
	agent   io.ReadWriteCloser // the host's end of the agent's socket pair, until dialled
	qmp     *qmp               // QEMU's monitor (monitor.go), nil before start
}

// qemuFiles names what QEMU opens: by path in the line a person runs by
// hand, by inherited descriptor in the jailed run.
type qemuFiles struct {
	kernel, initrd string
	disks          []string // -drive file= values
	pre            []string // arguments before the rest (-add-fd)
	agent          string   // -chardev value of the agent's channel
	monitor        string   // -chardev value of QMP's socket, "" for none
}

// clockOf is the guest's clock under accel.
func (q *qemuVM) clockOf(accel string) string {
	if accel == "tcg" && q.icount {
		return ICountClock(q.shift)
	}
	return ClockHost
}

// args is the QEMU command line for this VM.
func (q *qemuVM) args(accel string, f qemuFiles) []string {
	clock := q.clockOf(accel)
	cmdline := baseCmdline
	machine := "pc"
	serialDev, blkDev := "virtio-serial-pci", "virtio-blk-pci"
	if q.boot == BootPVH {
		// microvm: virtio-mmio devices (QEMU adds them to the kernel
		// command line), an ISA serial port for the console, no PCI, no
		// ACPI (the CPUs are in the MP table, which CONFIG_X86_MPPARSE
		// reads): every device left out is probing time saved under TCG.
		// The PIT stays, as TCG's only reference to calibrate the TSC and
		// APIC timer against, and so does the i8259: on a loaded host the
		// kernel may reject the APIC timer ("verification failure"), and
		// without the i8259 the PIT's interrupt cannot be had either, so
		// no timer ticks and SMP bring-up waits forever. The RTC stays
		// for the wall clock.
		machine = "microvm,x-option-roms=off,isa-serial=on,acpi=off"
		serialDev, blkDev = "virtio-serial-device", "virtio-blk-device"
		cmdline += " " + pvhClockCmdline(accel, clock, q.hz)
	} else if IsICount(clock) {
		// The vCPUs' TSCs count the same virtual clock, but the boot's
		// sync check needs them running at once, which turn-taking vCPUs
		// never are: it marks the TSC unstable and the guest reads the
		// HPET, a trip into QEMU at every clock read.
		cmdline += " tsc=reliable"
	}
	a := append([]string{}, f.pre...)
	a = append(a,
		"-name", q.spec.Name,
		"-machine", machine,
		"-nodefaults", "-no-user-config",
		"-display", "none", "-vga", "none",
		// A guest reset (panic=-1, the agent's power-off) ends QEMU.
		"-no-reboot",
		"-smp", fmt.Sprint(q.spec.CPUs),
		"-m", fmt.Sprint(q.spec.MemMiB),
		"-kernel", f.kernel,
		"-append", strings.TrimSpace(cmdline+" "+q.spec.Cmdline),
		// The console goes to QEMU's stdout, a pipe patchbot reads.
		"-chardev", "stdio,id=con,signal=off",
		"-serial", "chardev:con",
		"-device", serialDev+",id=vser",
		"-chardev", f.agent,
		"-device", "virtserialport,bus=vser.0,chardev=agent,name="+proto.Port,
		"-nic", "none",
	)
	if f.monitor != "" {
		a = append(a, "-chardev", f.monitor, "-mon", "chardev=mon,mode=control")
	}
	a = append(a,
		// seccomp: no exec or fork, no setuid, no obsolete or
		// resource-control system calls.
		"-sandbox", "on,obsolete=deny,elevateprivileges=deny,spawn=deny,resourcecontrol=deny",
	)
	switch {
	case accel == "kvm":
		a = append(a, "-accel", "kvm", "-cpu", "host")
	case IsICount(clock):
		// icount needs single-threaded TCG: the vCPUs take turns.
		a = append(a, "-accel", fmt.Sprintf("tcg,thread=single,tb-size=%d", tbSizeMiB), "-cpu", "max")
		a = append(a, icountArgs(q.shift)...)
	default:
		a = append(a, "-accel", fmt.Sprintf("tcg,thread=multi,tb-size=%d", tbSizeMiB), "-cpu", "max")
	}
	if f.initrd != "" {
		a = append(a, "-initrd", f.initrd)
	}
	for i, d := range f.disks {
		a = append(a, "-drive", fmt.Sprintf("file=%s,format=raw,if=none,id=vd%d,readonly=on", d, i),
			"-device", fmt.Sprintf("%s,drive=vd%d", blkDev, i))
	}
	return a
}

// tbSizeMiB is TCG's translation cache, QEMU's own default (1 GiB): the
// address-space limit below makes room for it. A smaller cache is
// flushed and refilled under the suites' load; measurements were taken
// with this one.
const tbSizeMiB = 1024

// addressSpaceMiB bounds QEMU's address space: guest RAM, the
// translation cache, and QEMU itself (libraries, thread stacks, heap).
func (q *qemuVM) addressSpaceMiB() int {
	return q.spec.MemMiB + tbSizeMiB + 1024 + 64*q.spec.CPUs
}

// reproArgs is the command line a person runs to boot the same VM by
// hand (as a user who can read the files): the agent's channel is a
// socket in the VM's directory, the console on the terminal.
func (q *qemuVM) reproArgs(accel string) []string {
	return q.args(accel, qemuFiles{
		kernel: q.kernel, initrd: q.spec.Initramfs, disks: q.spec.Disks,
		agent: "socket,id=agent,path=" + filepath.Join(q.dir, "agent.sock") + ",server=on,wait=off",
	})
}

// handout opens what the jailed QEMU is given: sealed copies of the
// kernel and initramfs, the disks read-only, and one end of a socket
// pair for the agent. It returns them in descriptor order (3, 4, …) with
// the names QEMU is to use, and the host's end of the agent's pair.
func (q *qemuVM) handout() (files []*os.File, names qemuFiles, host net.Conn, err error) {
	defer func() {
		if err != nil {
			for _, f := range files {
				f.Close()
			}
		}
	}()
	fdName := func(f *os.File) string {
		files = append(files, f)
		return fmt.Sprintf("/proc/self/fd/%d", 2+len(files))
	}
	k, err := sealedCopy(q.kernel)
	if err != nil {
		return files, names, nil, err
	}
	names.kernel = fdName(k)
	if q.spec.Initramfs != "" {
		rd, err := sealedCopy(q.spec.Initramfs)
		if err != nil {
			return files, names, nil, err
		}
		names.initrd = fdName(rd)
	}
	for i, d := range q.spec.Disks {
		f, err := openImage(d)
		if err != nil {
			return files, names, nil, err
		}
		fdName(f)
		// QEMU's block layer opens /dev/fdset/N by duplicating a
		// descriptor of that set with the same access mode.
		names.pre = append(names.pre, "-add-fd", fmt.Sprintf("fd=%d,set=%d", 2+len(files), i+1))
		names.disks = append(names.disks, fmt.Sprintf("/dev/fdset/%d", i+1))
	}
	pair, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return files, names, nil, fmt.Errorf("agent socket pair: %w", err)
	}
	hostEnd := os.NewFile(uintptr(pair[0]), "agent-host")
	host, err = net.FileConn(hostEnd)
	hostEnd.Close()
	guest := os.NewFile(uintptr(pair[1]), "agent-guest")
	if err != nil {
		guest.Close()
		return files, names, nil, fmt.Errorf("agent socket pair: %w", err)
	}
	files = append(files, guest)
	names.agent = fmt.Sprintf("socket,id=agent,fd=%d,server=off", 2+len(files))
	return files, names, host, nil
}

// monitorPair is a socket pair for QEMU's QMP: QEMU's end to hand out,
// the host's as a QMP client.
func monitorPair() (qemuEnd *os.File, c *qmp, err error) {
	pair, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, nil, fmt.Errorf("monitor socket pair: %w", err)
	}
	hostEnd := os.NewFile(uintptr(pair[0]), "qmp-host")
	conn, err := net.FileConn(hostEnd)
	hostEnd.Close()
	qemuEnd = os.NewFile(uintptr(pair[1]), "qmp-qemu")
	if err != nil {
		qemuEnd.Close()
		return nil, nil, fmt.Errorf("monitor socket pair: %w", err)
	}
	return qemuEnd, newQMP(conn), nil
}

func (q *qemuVM) start(ctx context.Context) (launch, error) {
	accel, probe := q.acc.pick()
	l := launch{accel: accel, clock: q.clockOf(accel), probe: probe, boot: q.boot, repro: shellQuote(append([]string{q.bin}, q.reproArgs(accel)...))}
	// A stale console from an earlier attempt would be read as this boot's.
	con, err := os.OpenFile(q.spec.ConsoleLog, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return l, &InfraError{Op: "create console log", Err: err}
	}
	files, names, host, err := q.handout()
	if err != nil {
		con.Close()
		return l, &InfraError{Op: "hand the VM its files", Err: err}
	}
	defer func() {
		for _, f := range files {
			f.Close() // QEMU has its own copies now
		}
	}()
	monEnd, mon, err := monitorPair()
	if err != nil {
		con.Close()
		host.Close()
		return l, &InfraError{Op: "hand the VM its files", Err: err}
	}
	files = append(files, monEnd)
	names.monitor = fmt.Sprintf("socket,id=mon,fd=%d,server=off", 2+len(files))
	argv := q.jail.argv(append([]string{q.bin}, q.args(accel, names)...), accel == "kvm", q.addressSpaceMiB())
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdin = nil
	cmd.Stdout = &cappedWriter{f: con, left: maxConsole}
	out := &limitedBuffer{max: 64 << 10}
	cmd.Stderr = out
	cmd.ExtraFiles = files
	cmd.Env = []string{"PATH=/usr/bin:/bin"}
	// A grandchild keeping the console pipe open must not hang Wait.
	cmd.WaitDelay = 5 * time.Second
	// Its own process group, and killed if we die: a QEMU must never
	// outlive patchbot (bwrap's --die-with-parent takes it down too).
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		con.Close()
		host.Close()
		mon.Close()
		return l, &InfraError{Op: "start qemu", Err: err}
	}
	done := make(chan struct{})
	q.mu.Lock()
	if q.qmp != nil {
		q.qmp.Close() // an earlier attempt's
	}
	q.cmd, q.out, q.done, q.accel, q.agent, q.qmp = cmd, out, done, accel, host, mon
	q.mu.Unlock()
	go func() {
		err := cmd.Wait()
		con.Close()
		q.mu.Lock()
		q.waitErr = err
		q.mu.Unlock()
		close(done)
	}()
	return l, nil
}

// dial hands over the host's end of the agent's socket pair, once.
func (q *qemuVM) dial(ctx context.Context) (io.ReadWriteCloser, error) {
	return handOver(&q.mu, &q.agent, "qemu: the agent's channel was already taken or QEMU was not started")
}

func (q *qemuVM) stopped() <-chan struct{} { return stoppedOf(&q.mu, &q.done) }

// exitStatus: QEMU exits 0 when the guest reset itself under -no-reboot
// (a panic with panic=-1, or the agent's power-off); anything else is
// QEMU failing, or killed (the OOM killer, its limits).
func (q *qemuVM) exitStatus() (bool, error, []byte) {
	q.mu.Lock()
	defer q.mu.Unlock()
	var output []byte
	if q.out != nil {
		output = q.out.Bytes()
	}
	if q.cmd == nil {
		return false, errors.New("qemu was not started"), nil
	}
	if q.waitErr == nil {
		return true, nil, output
	}
	return false, fmt.Errorf("qemu: %w", q.waitErr), output
}

func (q *qemuVM) fallback(reason string) bool {
	q.mu.Lock()
	accel := q.accel
	q.mu.Unlock()
	return accel == "kvm" && q.acc.markBad(reason)
}

// destroy kills the process group and reaps QEMU.
func (q *qemuVM) destroy() error {
	q.mu.Lock()
	cmd, done, agent, mon := q.cmd, q.done, q.agent, q.qmp
	q.agent, q.qmp = nil, nil
	q.mu.Unlock()
	if agent != nil {
		agent.Close()
	}
	if mon != nil {
		mon.Close()
	}
	if cmd == nil {
		return nil
	}
	select {
	case <-done:
		return nil
	default:
	}
	syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	select {
	case <-done:
		return nil
	case <-time.After(10 * time.Second):
		return &InfraError{Op: "reap qemu", Err: fmt.Errorf("pid %d did not exit after SIGKILL", cmd.Process.Pid)}
	}
}

// cappedWriter writes the console to its file up to a limit, then notes
// the cut once and drops the rest (still reading it, so QEMU never
// blocks on a full pipe).
type cappedWriter struct {
	f    *os.File
	left int64
	cut  bool
}

func (w *cappedWriter) Write(p []byte) (int, error) {
	keep := min(int64(len(p)), max(w.left, 0))
	if keep > 0 {
		if _, err := w.f.Write(p[:keep]); err != nil {
			w.left = 0
		} else {
			w.left -= keep
		}
	}
	if keep < int64(len(p)) && !w.cut {
		w.cut = true
		fmt.Fprintf(w.f, "\n[patchbot: console output beyond %d MiB dropped]\n", maxConsole>>20)
	}
	return len(p), nil
}

// limitedBuffer keeps the first max bytes of QEMU's output; enough for
// its error message, bounded if it goes on printing.
type limitedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
	max int
}

func (b *limitedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if room := b.max - b.buf.Len(); room > 0 {
		b.buf.Write(p[:min(len(p), room)])
	}
	return len(p), nil
}

func (b *limitedBuffer) Bytes() []byte {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]byte(nil), b.buf.Bytes()...)
}

// shellQuote joins args into a line a shell runs as the same command.
func shellQuote(args []string) string {
	var b strings.Builder
	for i, a := range args {
		if i > 0 {
			b.WriteByte(' ')
		}
		if a != "" && strings.Trim(a, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_=+,./:@") == "" {
			b.WriteString(a)
			continue
		}
		b.WriteString("'" + strings.ReplaceAll(a, "'", `'\''`) + "'")
	}
	return b.String()
}
