//go:build linux && amd64

// Command skewclock runs a command with its wall clock shifted, as if it
// ran on a host whose clock is off:
//
//	skewclock -offset -10m patchbot worker --config FILE --name NAME
//
// The fleet's tests use it to give one worker a clock ten minutes off.
// LD_PRELOAD tools such as libfaketime cannot: a Go program reads the
// clock through the vDSO, never through libc. So skewclock traces the
// command (ptrace): it hides the vDSO from it at exec (the AT_SYSINFO_EHDR
// entry of its auxiliary vector becomes AT_IGNORE), so that the Go runtime,
// like libc, falls back to the clock_gettime system call, and it adds the
// offset to every CLOCK_REALTIME (and _COARSE, _ALARM, TAI) answer, and to
// gettimeofday and time. CLOCK_MONOTONIC and CLOCK_BOOTTIME are left
// alone: a skewed host's uptime is right, its calendar is not. Threads
// are traced as they are made; children the command forks or execs are
// not (they see the true clock).
//
// SIGTERM, SIGINT and SIGHUP are passed on; skewclock exits with the
// command's status. If skewclock is killed, the command is killed with it
// (PTRACE_O_EXITKILL).
package main

import (
	"encoding/binary"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"runtime"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

const (
	atNull        = 0
	atIgnore      = 1
	atSysinfoEhdr = 33

	enosys = ^uint64(37) // -ENOSYS: rax at a syscall-entry stop

	clockRealtime       = 0
	clockRealtimeCoarse = 5
	clockRealtimeAlarm  = 8
	clockTAI            = 11
)

func main() {
	offset := flag.Duration("offset", 0, "shift the command's wall clock by this `duration` (negative: behind)")
	flag.Usage = func() {
		fmt.Fprintf(os.Stderr, "usage: skewclock -offset DURATION COMMAND [ARG...]\n")
		flag.PrintDefaults()
	}
	flag.Parse()
	if flag.NArg() == 0 {
		flag.Usage()
		os.Exit(2)
	}
	os.Exit(run(*offset, flag.Args(), []uintptr{0, 1, 2}))
}

func fail(format string, args ...any) int {
	fmt.Fprintf(os.Stderr, "skewclock: "+format+"\n", args...)
	return 1
}

// run runs args with the offset, its standard input, output and error
// being files, and returns its exit status.
func run(offset time.Duration, args []string, files []uintptr) int {
	path, err := exec.LookPath(args[0])
	if err != nil {
		return fail("%v", err)
	}
	// Every ptrace request must come from the thread that attached.
	runtime.LockOSThread()
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP)
	pid, err := syscall.ForkExec(path, args, &syscall.ProcAttr{Env: os.Environ(),
		Files: files, Sys: &syscall.SysProcAttr{Ptrace: true}})
	if err != nil {
		return fail("starting %s: %v", path, err)
	}
	go func() {
		for s := range sigs {
			syscall.Kill(pid, s.(syscall.Signal))
		}
	}()
	var ws syscall.WaitStatus
	if _, err := syscall.Wait4(pid, &ws, syscall.WALL, nil); err != nil {
		return fail("waiting for %s to start: %v", path, err)
	}
	if !ws.Stopped() {
		return fail("%s did not stop at exec (status %v)", path, ws)
	}
	if err := hideVDSO(pid); err != nil {
		syscall.Kill(pid, syscall.SIGKILL)
		return fail("%v", err)
	}
	opts := unix.PTRACE_O_TRACESYSGOOD | unix.PTRACE_O_TRACECLONE | unix.PTRACE_O_EXITKILL
	if err := syscall.PtraceSetOptions(pid, opts); err != nil {
		syscall.Kill(pid, syscall.SIGKILL)
		return fail("ptrace options: %v", err)
	}
	if err := syscall.PtraceSyscall(pid, 0); err != nil {
		return fail("ptrace: %v", err)
	}
	for {
		tid, err := syscall.Wait4(-1, &ws, syscall.WALL, nil)
		if err == syscall.EINTR {
			continue
		}
		if err != nil {
			return fail("wait: %v", err)
		}
		switch {
		case ws.Exited():
			if tid == pid {
				return ws.ExitStatus()
			}
			continue
		case ws.Signaled():
			if tid == pid {
				return 128 + int(ws.Signal())
			}
			continue
		case !ws.Stopped():
			continue
		}
		inject := 0
		switch sig := ws.StopSignal(); {
		case sig == syscall.SIGTRAP|0x80: // a system call's entry or exit
			skew(tid, offset)
		case ws.TrapCause() > 0: // a clone event: the new thread is traced
		case sig == syscall.SIGSTOP:
			// A new thread's first stop, or a real SIGSTOP: either way
			// the thread goes on (the command is never stopped here).
		default:
			inject = int(sig)
		}
		// A thread may have gone (exit_group) between its stop and this.
		syscall.PtraceSyscall(tid, inject)
	}
}

// hideVDSO turns the vDSO's entry in the stopped process's auxiliary
// vector, on its stack above argv and envp, into AT_IGNORE.
func hideVDSO(pid int) error {
	var regs syscall.PtraceRegs
	if err := syscall.PtraceGetRegs(pid, &regs); err != nil {
		return fmt.Errorf("reading registers at exec: %v", err)
	}
	word := func(addr uint64) (uint64, error) {
		var b [8]byte
		if _, err := syscall.PtracePeekData(pid, uintptr(addr), b[:]); err != nil {
			return 0, fmt.Errorf("reading the stack at %#x: %v", addr, err)
		}
		return binary.LittleEndian.Uint64(b[:]), nil
	}
	sp := regs.Rsp
	argc, err := word(sp)
	if err != nil {
		return err
	}
	p := sp + 8*(argc+2) // past argc, argv and its NULL
	for {                // past envp and its NULL
		v, err := word(p)
		if err != nil {
			return err
		}
		p += 8
		if v == 0 {
			break
		}
	}
	for i := 0; i < 512; i++ {
		typ, err := word(p)
		if err != nil {
			return err
		}
		if typ == atNull {
			return nil // no vDSO: the clock is read by system calls already
		}
		if typ == atSysinfoEhdr {
			var b [8]byte
			binary.LittleEndian.PutUint64(b[:], atIgnore)
			if _, err := syscall.PtracePokeData(pid, uintptr(p), b[:]); err != nil {
				return fmt.Errorf("hiding the vDSO: %v", err)
			}
			return nil
		}
		p += 16
	}
	return fmt.Errorf("no end to the auxiliary vector")
}

// skew adds the offset to the answer of a wall-clock system call, at its
// exit stop.
func skew(tid int, offset time.Duration) {
	var regs syscall.PtraceRegs
	if syscall.PtraceGetRegs(tid, &regs) != nil || regs.Rax == enosys {
		return // gone, or at the entry of the call
	}
	switch regs.Orig_rax {
	case unix.SYS_CLOCK_GETTIME:
		switch regs.Rdi {
		case clockRealtime, clockRealtimeCoarse, clockRealtimeAlarm, clockTAI:
		default:
			return
		}
		if regs.Rax != 0 || regs.Rsi == 0 {
			return
		}
		shift(tid, uintptr(regs.Rsi), offset, 1e9)
	case unix.SYS_GETTIMEOFDAY:
		if regs.Rax != 0 || regs.Rdi == 0 {
			return
		}
		shift(tid, uintptr(regs.Rdi), offset, 1e6)
	case unix.SYS_TIME:
		if int64(regs.Rax) < 0 {
			return
		}
		t := int64(regs.Rax) + int64(offset/time.Second)
		regs.Rax = uint64(t)
		syscall.PtraceSetRegs(tid, &regs)
		if regs.Rdi != 0 {
			var b [8]byte
			binary.LittleEndian.PutUint64(b[:], uint64(t))
			syscall.PtracePokeData(tid, uintptr(regs.Rdi), b[:])
		}
	}
}

// shift adds the offset to a {seconds, fraction} pair in the tracee's
// memory, the fraction in units of 1/perSec of a second.
func shift(tid int, addr uintptr, offset time.Duration, perSec int64) {
	var b [16]byte
	if _, err := syscall.PtracePeekData(tid, addr, b[:]); err != nil {
		return
	}
	sec := int64(binary.LittleEndian.Uint64(b[0:]))
	frac := int64(binary.LittleEndian.Uint64(b[8:]))
	unit := int64(time.Second) / perSec
	total := sec*perSec + frac + int64(offset)/unit
	sec, frac = total/perSec, total%perSec
	if frac < 0 {
		sec, frac = sec-1, frac+perSec
	}
	binary.LittleEndian.PutUint64(b[0:], uint64(sec))
	binary.LittleEndian.PutUint64(b[8:], uint64(frac))
	syscall.PtracePokeData(tid, addr, b[:])
}
