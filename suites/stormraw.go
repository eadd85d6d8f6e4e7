package suites

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// The raw workers (Params.Workers "raw") run a cache-contention storm as
// a process of its own, as the seed's T POSIX threads would: one OS
// thread a worker, each making its system calls raw, with as many of Go's
// processors as workers (so a worker blocked in the kernel keeps its
// own), the collector off and no preemption signals. In the agent, the T
// workers are locked goroutines sharing GOMAXPROCS processors, and Go's
// runtime hands a processor from one thread to the next around every
// blocking call: which worker issues its next call is then the runtime's
// choice as much as the kernel's. Measured, that was a small part of the
// storms' spread (docs/suites.md, "The workloads" and "Where the promise
// is not kept yet").
//
// The agent sends the storm (stormSpec) on stdin; the process starts its
// workers, each waits on a futex, and it writes one byte when all are
// waiting. The agent writes one byte to start them (within its counters'
// window), and the process answers with the workers' times (stormReply)
// and exits.

// stormOps are what a storm's workers do to each of their files.
const (
	stormStat  = "stat"  // lstat
	stormRead  = "read"  // open, read to the end, close; the bytes must be the file's size
	stormMixed = "mixed" // open, read to the end, stat, close (filebench's line in the seed)
)

type stormSpec struct {
	Op    string
	Files []string // absolute paths
	Sizes []int64  // each file's size: what a read must return
	Plan  [][]int  // Plan[t]: the files worker t visits, in order
}

type stormReply struct {
	Elapsed int64     // ns, from the start to the last worker's end
	Lat     [][]int64 // ns, Lat[t][k]: worker t's k-th file
	Bytes   int64     // read by every worker together
	Err     string
}

// check says what is wrong with a spec: an unknown op, a size missing, a
// file out of range. Both ends check it.
func (spec stormSpec) check() error {
	switch spec.Op {
	case stormStat, stormRead, stormMixed:
	default:
		return fmt.Errorf("storm: %q is not an operation (want %s, %s or %s)", spec.Op, stormStat, stormRead, stormMixed)
	}
	if len(spec.Sizes) != len(spec.Files) {
		return fmt.Errorf("storm: %d sizes for %d files", len(spec.Sizes), len(spec.Files))
	}
	if len(spec.Plan) == 0 || len(spec.Plan) > maxStormWorkers {
		return fmt.Errorf("storm: %d workers, want 1 to %d", len(spec.Plan), maxStormWorkers)
	}
	for t, plan := range spec.Plan {
		for _, i := range plan {
			if i < 0 || i >= len(spec.Files) {
				return fmt.Errorf("storm: worker %d visits file %d of %d", t, i, len(spec.Files))
			}
		}
	}
	return nil
}

// stormReadyTimeout bounds the raw workers' start: a thousand threads
// start in well under a second.
var stormReadyTimeout = time.Minute

// maxStormWorkers bounds the raw workers' threads (and Go's processors,
// one a worker): the seed's largest shape is 128.
const maxStormWorkers = 1024

// rawStorm runs spec in a raw workers' process and returns the time from
// the start to the last worker's end, every worker's latencies and the
// bytes read. measure wraps the start and the wait, so the process's
// start and its workers' setup are outside what is counted.
func rawStorm(spec stormSpec, measure func(run func() error) error) (time.Duration, latencies, int64, error) {
	if err := spec.check(); err != nil {
		return 0, nil, 0, err
	}
	cmd, in, out, err := startRawChild("storm", len(spec.Plan)+1)
	if err != nil {
		return 0, nil, 0, fmt.Errorf("starting the storm's workers: %w", err)
	}
	defer waitChild(cmd, 10*time.Second)
	defer in.Close()
	if err := json.NewEncoder(in).Encode(spec); err != nil {
		return 0, nil, 0, fmt.Errorf("the storm's workers: %w", err)
	}
	// Its workers' setup is bounded: a process that cannot get them all
	// waiting (say, too few processors) is killed, not waited on forever.
	kill := time.AfterFunc(stormReadyTimeout, func() { cmd.Process.Kill() })
	_, err = io.ReadFull(out, make([]byte, 1))
	if !kill.Stop() || err != nil {
		return 0, nil, 0, fmt.Errorf("the storm's workers never got ready (within %v): %v", stormReadyTimeout, err)
	}
	var rep stormReply
	err = measure(func() error {
		if _, err := in.Write([]byte{1}); err != nil {
			return fmt.Errorf("starting the storm: %w", err)
		}
		if err := json.NewDecoder(out).Decode(&rep); err != nil {
			return fmt.Errorf("the storm's workers: %w", err)
		}
		if rep.Err != "" {
			return errors.New(rep.Err)
		}
		return nil
	})
	if err != nil {
		return 0, nil, 0, err
	}
	var all latencies
	for _, l := range rep.Lat {
		for _, d := range l {
			all = append(all, time.Duration(d))
		}
	}
	return time.Duration(rep.Elapsed), all, rep.Bytes, nil
}

// stormWorkers is the raw workers' process.
func stormWorkers() error {
	var spec stormSpec
	dec := json.NewDecoder(os.Stdin)
	if err := dec.Decode(&spec); err != nil {
		return err
	}
	if err := spec.check(); err != nil {
		return err
	}
	if runtime.GOMAXPROCS(0) <= len(spec.Plan) {
		return fmt.Errorf("storm: GOMAXPROCS %d for %d workers: a worker blocked in the kernel holds its processor", runtime.GOMAXPROCS(0), len(spec.Plan))
	}
	paths, err := cPaths(spec.Files)
	if err != nil {
		return err
	}
	n := len(spec.Plan)
	var (
		gate    uint32 // 0 until the start; the workers wait on it
		waiting sync.WaitGroup
		done    sync.WaitGroup
		lat     = make([][]int64, n)
		ends    = make([]time.Time, n)
		errs    = make([]error, n)
		bytes   atomic.Int64
	)
	waiting.Add(n)
	done.Add(n)
	for t := 0; t < n; t++ {
		go func() {
			defer done.Done()
			runtime.LockOSThread()
			buf := make([]byte, 128<<10)
			var st unix.Stat_t
			l := make([]int64, 0, len(spec.Plan[t]))
			waiting.Done()
			for atomic.LoadUint32(&gate) == 0 {
				futex(&gate, futexWaitPrivate, 0)
			}
			for _, i := range spec.Plan[t] {
				t0 := time.Now()
				got, e := rawStormOp(spec.Op, paths[i], buf, &st)
				l = append(l, int64(time.Since(t0)))
				if e != 0 {
					errs[t] = fmt.Errorf("%s %s: %w", spec.Op, spec.Files[i], e)
					break
				}
				if spec.Op != stormStat && got != spec.Sizes[i] {
					errs[t] = fmt.Errorf("%s: read %d bytes, the image has %d", spec.Files[i], got, spec.Sizes[i])
					break
				}
				bytes.Add(got)
			}
			ends[t] = time.Now()
			lat[t] = l
		}()
	}
	waiting.Wait()
	if _, err := os.Stdout.Write([]byte{1}); err != nil {
		return err
	}
	// The start is the byte 1. The spec's JSON ends with a newline, which
	// the decoder may have left in the pipe: it is not the start.
	start := io.MultiReader(dec.Buffered(), os.Stdin)
	for b := []byte{0}; b[0] != 1; {
		if _, err := io.ReadFull(start, b); err != nil {
			return fmt.Errorf("storm: no start: %w", err)
		}
	}
	t0 := time.Now()
	atomic.StoreUint32(&gate, 1)
	futex(&gate, futexWakePrivate, n)
	done.Wait()
	rep := stormReply{Lat: lat, Bytes: bytes.Load()}
	for _, e := range ends {
		rep.Elapsed = max(rep.Elapsed, int64(e.Sub(t0)))
	}
	if err := errors.Join(errs...); err != nil {
		rep.Err = err.Error()
	}
	return json.NewEncoder(os.Stdout).Encode(rep)
}

// The futex operations (linux/futex.h): the workers wait on the gate in
// the kernel, and one call wakes them all.
const (
	futexWaitPrivate = 0 | 128 // FUTEX_WAIT | FUTEX_PRIVATE_FLAG
	futexWakePrivate = 1 | 128 // FUTEX_WAKE | FUTEX_PRIVATE_FLAG
)

func futex(addr *uint32, op, val int) {
	unix.RawSyscall6(unix.SYS_FUTEX, uintptr(unsafe.Pointer(addr)), uintptr(op), uintptr(val), 0, 0, 0)
}

// rawStormOp does op to path in raw system calls and returns the bytes
// read.
func rawStormOp(op string, path *byte, buf []byte, st *unix.Stat_t) (int64, syscall.Errno) {
	if op == stormStat {
		_, _, e := unix.RawSyscall6(unix.SYS_NEWFSTATAT, uintptr(atFDCWD), uintptr(unsafe.Pointer(path)),
			uintptr(unsafe.Pointer(st)), unix.AT_SYMLINK_NOFOLLOW, 0, 0)
		return 0, e
	}
	fd, _, e := unix.RawSyscall6(unix.SYS_OPENAT, uintptr(atFDCWD), uintptr(unsafe.Pointer(path)),
		uintptr(unix.O_RDONLY|unix.O_CLOEXEC), 0, 0, 0)
	if e != 0 {
		return 0, e
	}
	defer unix.RawSyscall(unix.SYS_CLOSE, fd, 0, 0)
	var n int64
	for {
		m, _, e := unix.RawSyscall(unix.SYS_READ, fd, uintptr(unsafe.Pointer(&buf[0])), uintptr(len(buf)))
		if e == unix.EINTR {
			continue
		}
		if e != 0 {
			return n, e
		}
		if m == 0 {
			break
		}
		n += int64(m)
	}
	if op == stormMixed {
		_, _, e := unix.RawSyscall6(unix.SYS_NEWFSTATAT, uintptr(atFDCWD), uintptr(unsafe.Pointer(path)),
			uintptr(unsafe.Pointer(st)), 0, 0, 0)
		return n, e
	}
	return n, 0
}
