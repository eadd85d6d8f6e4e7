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

func init() {
	register("qemu", newQEMUPool)
}

// kvmBroken is the verdict on this host's KVM, shared by all pools: once a
// boot showed KVM does not work, later boots go straight to TCG.
var kvmBroken atomic.Bool

// accelState picks the accelerator for a pool's VMs.
type accelState struct {
	mode string // "", "kvm" or "tcg" as configured
	log  func(msg string, args ...any)
}

// kvmVerdictFile remembers, until the host reboots, that KVM hangs guests
// here, so that later processes (each "patchbot vm boot") skip the probe.
func kvmVerdictFile() string {
	id, _ := os.ReadFile("/proc/sys/kernel/random/boot_id")
	return filepath.Join(os.TempDir(), "patchbot-kvm-hangs-"+strings.TrimSpace(string(id)))
}

func (a *accelState) pick() (accel string, probe time.Duration) {
	switch {
	case a.mode == "kvm":
		return "kvm", 0
	case a.mode == "tcg" || kvmBroken.Load():
		return "tcg", 0
	}
	if _, err := os.Stat(kvmVerdictFile()); err == nil {
		kvmBroken.Store(true)
		a.log("KVM hangs guests on this host (found "+kvmVerdictFile()+"), using TCG", "reason", "an earlier probe")
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
		os.WriteFile(kvmVerdictFile(), []byte(reason+"\n"), 0o644)
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
	switch cfg.Accel {
	case "", "kvm", "tcg":
	default:
		return nil, fmt.Errorf("qemu: unknown accelerator %q (want kvm or tcg)", cfg.Accel)
	}
	acc := &accelState{mode: cfg.Accel, log: cfg.Log.Warn}
	return newPool("qemu", cfg, func(s Spec, dir string) (hypervisor, error) {
		return &qemuVM{bin: path, spec: s, dir: dir, acc: acc}, nil
	}), nil
}

// qemuVM is one qemu-system-x86_64 process.
type qemuVM struct {
	bin  string
	spec Spec
	dir  string
	acc  *accelState

	mu      sync.Mutex
	cmd     *exec.Cmd
	out     *limitedBuffer
	done    chan struct{} // closed when the process has been reaped
	waitErr error
	accel   string
}

func (q *qemuVM) socket() string { return filepath.Join(q.dir, "agent.sock") }

// args is the QEMU command line for this VM.
func (q *qemuVM) args(accel string) []string {
	a := []string{
		"-name", q.spec.Name,
		"-machine", "pc",
		"-nodefaults", "-no-user-config",
		"-display", "none", "-vga", "none",
		// A guest reset (panic=-1, the agent's power-off) ends QEMU.
		"-no-reboot",
		"-smp", fmt.Sprint(q.spec.CPUs),
		"-m", fmt.Sprint(q.spec.MemMiB),
		"-kernel", q.spec.Kernel,
		"-append", strings.TrimSpace(baseCmdline + " " + q.spec.Cmdline),
		"-chardev", "file,id=con,path=" + q.spec.ConsoleLog,
		"-serial", "chardev:con",
		"-device", "virtio-serial-pci,id=vser",
		"-chardev", "socket,id=agent,path=" + q.socket() + ",server=on,wait=off",
		"-device", "virtserialport,bus=vser.0,chardev=agent,name=" + proto.Port,
		"-nic", "none",
	}
	if accel == "kvm" {
		a = append(a, "-accel", "kvm", "-cpu", "host")
	} else {
		a = append(a, "-accel", "tcg,thread=multi", "-cpu", "max")
	}
	if q.spec.Initramfs != "" {
		a = append(a, "-initrd", q.spec.Initramfs)
	}
	for i, d := range q.spec.Disks {
		a = append(a, "-drive", fmt.Sprintf("file=%s,format=raw,if=virtio,readonly=on,index=%d", d, i))
	}
	return a
}

func (q *qemuVM) start(ctx context.Context) (launch, error) {
	accel, probe := q.acc.pick()
	args := q.args(accel)
	l := launch{accel: accel, probe: probe, repro: shellQuote(append([]string{q.bin}, args...))}
	// A stale console from an earlier attempt would be read as this boot's.
	if err := os.WriteFile(q.spec.ConsoleLog, nil, 0o644); err != nil {
		return l, &InfraError{Op: "create console log", Err: err}
	}
	os.Remove(q.socket())

	cmd := exec.Command(q.bin, args...)
	out := &limitedBuffer{max: 64 << 10}
	cmd.Stdout, cmd.Stderr = out, out
	// Its own process group, and killed if we die: a QEMU must never
	// outlive patchbot.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return l, &InfraError{Op: "start qemu", Err: err}
	}
	done := make(chan struct{})
	q.mu.Lock()
	q.cmd, q.out, q.done, q.accel = cmd, out, done, accel
	q.mu.Unlock()
	go func() {
		err := cmd.Wait()
		q.mu.Lock()
		q.waitErr = err
		q.mu.Unlock()
		close(done)
	}()
	return l, nil
}

func (q *qemuVM) dial(ctx context.Context) (io.ReadWriteCloser, error) {
	var d net.Dialer
	return d.DialContext(ctx, "unix", q.socket())
}

var closedChan = func() chan struct{} { c := make(chan struct{}); close(c); return c }()

func (q *qemuVM) stopped() <-chan struct{} {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.done == nil {
		return closedChan
	}
	return q.done
}

// exitStatus: QEMU exits 0 when the guest reset itself under -no-reboot
// (a panic with panic=-1, or the agent's power-off); anything else is
// QEMU failing.
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
	cmd, done := q.cmd, q.done
	q.mu.Unlock()
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
