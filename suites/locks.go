package suites

import (
	"encoding/binary"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// The locks suite needs N processes, not threads: POSIX locks belong to a
// process, so threads of one process never contend. The contenders are this
// same executable started again with childEnv set; the init function below
// turns such a process into a contender before main runs, so the guest
// agent, the CLI and test binaries all work without a separate program.
const (
	childEnv     = "PATCHBOT_SUITES_CHILD"
	lockKindEnv  = "PATCHBOT_LOCK_KIND"
	lockFileEnv  = "PATCHBOT_LOCK_FILE"
	lockCountEnv = "PATCHBOT_LOCK_COUNTS" // file of one uint64 per contender
	lockIndexEnv = "PATCHBOT_LOCK_INDEX"
	lockTimeEnv  = "PATCHBOT_LOCK_DURATION"
	lockRawEnv   = "PATCHBOT_LOCK_RAW" // "1": the lock calls are raw (Params.Workers "raw")
)

func init() {
	var run func() error
	switch os.Getenv(childEnv) {
	case "":
		return
	case "locks":
		run = lockContender
	case "fuse":
		run = fuseServer
	case "bonnie":
		run = bonnieClient
	case "storm":
		run = stormWorkers
	default:
		fmt.Fprintf(os.Stderr, "%s=%q: unknown child role\n", childEnv, os.Getenv(childEnv))
		os.Exit(2)
	}
	if err := run(); err != nil {
		fmt.Fprintf(os.Stderr, "%s child: %v\n", os.Getenv(childEnv), err)
		os.Exit(1)
	}
	os.Exit(0)
}

// lockContender signals ready on stdout, waits for stdin to close (the
// start), locks and unlocks for the duration, and stores its count.
func lockContender() error {
	kind := os.Getenv(lockKindEnv)
	d, err := time.ParseDuration(os.Getenv(lockTimeEnv))
	if err != nil {
		return err
	}
	idx, err := strconv.Atoi(os.Getenv(lockIndexEnv))
	if err != nil {
		return err
	}
	f, err := os.OpenFile(os.Getenv(lockFileEnv), os.O_RDWR, 0)
	if err != nil {
		return err
	}
	fd := int(f.Fd())
	lock, unlock := lockOps(kind, fd, os.Getenv(lockRawEnv) == "1")
	if lock == nil {
		return fmt.Errorf("unknown lock kind %q", kind)
	}
	if err := pin(idx); err != nil {
		return err
	}
	if _, err := os.Stdout.Write([]byte{1}); err != nil {
		return err
	}
	io.Copy(io.Discard, os.Stdin) // returns when the parent closes the start pipe
	var n uint64
	for deadline := time.Now().Add(d); time.Now().Before(deadline); n++ {
		if err := lock(); err != nil {
			return err
		}
		if err := unlock(); err != nil {
			return err
		}
	}
	counts, err := os.OpenFile(os.Getenv(lockCountEnv), os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	var b [8]byte
	binary.LittleEndian.PutUint64(b[:], n)
	if _, err := counts.WriteAt(b[:], int64(idx)*8); err != nil {
		return err
	}
	return counts.Close()
}

// pin keeps contender idx on CPU idx mod the CPUs it may run on, so that
// both kernels measure the same placement. Left to the scheduler, where
// two contenders happened to run moved a cell by up to 3x from one window
// to the next under instruction-counted time (13 to 40 thousand posix
// acquisitions a second, one kernel, one boot): the scheduler's luck, not
// the lock code's.
func pin(idx int) error {
	// The affinity is a thread's: the locking loop stays on this one.
	runtime.LockOSThread()
	var all unix.CPUSet
	if err := unix.SchedGetaffinity(0, &all); err != nil {
		return fmt.Errorf("reading the CPUs a contender may use: %w", err)
	}
	var cpus []int
	for c := 0; c < len(all)*64 && len(cpus) < all.Count(); c++ {
		if all.IsSet(c) {
			cpus = append(cpus, c)
		}
	}
	if len(cpus) == 0 {
		return nil
	}
	var one unix.CPUSet
	one.Set(cpus[idx%len(cpus)])
	if err := unix.SchedSetaffinity(0, &one); err != nil {
		return fmt.Errorf("pinning contender %d: %w", idx, err)
	}
	return nil
}

// lockOps are a kind's lock and unlock calls on fd. Raw, they go to the
// kernel without telling Go's runtime (unix.RawSyscall): a call blocked
// on the lock keeps the contender's one processor, so the runtime's
// monitor thread neither takes it away nor is woken to give it back, as
// it is around every blocking call made through the syscall package.
func lockOps(kind string, fd int, raw bool) (lock, unlock func() error) {
	sys := unix.Syscall
	if raw {
		sys = unix.RawSyscall
	}
	call := func(trap, a1, a2, a3 uintptr) error {
		if _, _, e := sys(trap, a1, a2, a3); e != 0 {
			return e
		}
		return nil
	}
	switch kind {
	case "posix":
		wr := unix.Flock_t{Type: unix.F_WRLCK, Whence: 0}
		un := unix.Flock_t{Type: unix.F_UNLCK, Whence: 0}
		return func() error { return call(unix.SYS_FCNTL, uintptr(fd), unix.F_SETLKW, uintptr(unsafe.Pointer(&wr))) },
			func() error { return call(unix.SYS_FCNTL, uintptr(fd), unix.F_SETLK, uintptr(unsafe.Pointer(&un))) }
	case "flock":
		return func() error { return call(unix.SYS_FLOCK, uintptr(fd), unix.LOCK_EX, 0) },
			func() error { return call(unix.SYS_FLOCK, uintptr(fd), unix.LOCK_UN, 0) }
	}
	return nil, nil
}

// runLocks measures acquisitions per second for each lock kind and number
// of contenders.
func runLocks(r *round) error {
	dir, err := os.MkdirTemp("", "patchbot-locks-")
	if err != nil {
		return fmt.Errorf("creating lock dir: %w", err)
	}
	defer os.RemoveAll(dir)
	d := time.Duration(r.cfg.Params.Duration)
	r.res.Notes["duration_per_cell"] = d.String()
	for _, kind := range r.cfg.Workloads {
		logSum, cells := 0.0, 0
		for _, n := range r.cfg.Params.Contenders {
			if err := r.ctx.Err(); err != nil {
				return err
			}
			params := map[string]string{"contenders": strconv.Itoa(n)}
			total, err := r.lockCell(dir, kind, n, d, params)
			if err != nil {
				return fmt.Errorf("%s, %d contenders: %w", kind, n, err)
			}
			rate := float64(total) / d.Seconds()
			r.sample(kind, params, mAcqPerS, rate)
			if rate > 0 {
				logSum += math.Log(rate)
				cells++
			}
		}
		// The curve as one figure: the geometric mean over its contender
		// counts, which a change of the lock code moves wherever it moves
		// the curve, with a fraction of one cell's spread (docs/suites.md,
		// "locks").
		if cells == len(r.cfg.Params.Contenders) && cells > 1 {
			r.sample(kind, nil, mAcqCurve, math.Exp(logSum/float64(cells)))
		}
	}
	return nil
}

func (r *round) lockCell(dir, kind string, n int, d time.Duration, params map[string]string) (uint64, error) {
	lockFile := filepath.Join(dir, "lock")
	countFile := filepath.Join(dir, "counts")
	if err := os.WriteFile(lockFile, nil, 0o644); err != nil {
		return 0, err
	}
	if err := os.WriteFile(countFile, make([]byte, 8*n), 0o644); err != nil {
		return 0, err
	}
	self, err := os.Executable()
	if err != nil {
		return 0, fmt.Errorf("finding this executable to start contenders: %w", err)
	}
	startR, startW, err := os.Pipe()
	if err != nil {
		return 0, err
	}
	readyR, readyW, err := os.Pipe()
	if err != nil {
		return 0, err
	}
	var procs []*exec.Cmd
	killAll := func() {
		startW.Close()
		for _, p := range procs {
			p.Process.Kill()
			p.Wait()
		}
	}
	for i := 0; i < n; i++ {
		cmd := exec.CommandContext(r.ctx, self)
		cmd.Env = append(os.Environ(), childEnv+"=locks", lockKindEnv+"="+kind, lockFileEnv+"="+lockFile,
			lockCountEnv+"="+countFile, lockIndexEnv+"="+strconv.Itoa(i), lockTimeEnv+"="+d.String(),
			"GOMAXPROCS=1")
		if r.cfg.Params.Workers == "raw" {
			cmd.Env = append(cmd.Env, lockRawEnv+"=1", "GOGC=off", "GODEBUG=asyncpreemptoff=1")
		}
		cmd.Stdin, cmd.Stdout, cmd.Stderr = startR, readyW, os.Stderr
		if err := cmd.Start(); err != nil {
			killAll()
			startR.Close()
			readyR.Close()
			readyW.Close()
			return 0, fmt.Errorf("starting contender %d: %w", i, err)
		}
		procs = append(procs, cmd)
	}
	startR.Close()
	readyW.Close()
	defer readyR.Close()
	if _, err := io.ReadFull(readyR, make([]byte, n)); err != nil {
		killAll()
		return 0, fmt.Errorf("waiting for %d contenders to be ready: %w", n, err)
	}
	err = r.measure(kind, params, false, func() error {
		startW.Close() // every contender starts now
		for i, p := range procs {
			if err := p.Wait(); err != nil {
				return fmt.Errorf("contender %d: %w", i, err)
			}
		}
		return nil
	})
	if err != nil {
		killAll()
		return 0, err
	}
	b, err := os.ReadFile(countFile)
	if err != nil {
		return 0, err
	}
	var total uint64
	for i := 0; i < n; i++ {
		total += binary.LittleEndian.Uint64(b[i*8:])
	}
	return total, nil
}
