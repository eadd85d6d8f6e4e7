// Package agent is the guest side of the vmrunner protocol: it answers
// requests from the host over the virtio-serial port. Serve works over any
// io.ReadWriter, so it runs the same in a guest, in the fake backend, and in
// tests; Main (Linux only) is what /init runs as PID 1.
package agent

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"time"

	"github.com/patchbot/patchbot/vmrunner/proto"
)

// RunSuiteFunc runs one round of a suite and returns a JSON-marshalable
// result (a *suites.Result in the guest). It is a parameter, not an import,
// so that packages above vmrunner can use the fake backend without a cycle.
type RunSuiteFunc func(ctx context.Context, req proto.Request) (any, error)

// Handler answers requests.
type Handler struct {
	RunSuite RunSuiteFunc
	// PrepareSuite answers "prepare-suite"; nil answers it with nothing
	// prepared.
	PrepareSuite RunSuiteFunc
	// PowerOff is called after the "done" event of a poweroff request has
	// been written; nil means nothing happens (tests, fake backend).
	PowerOff func()
	// KernelRelease is reported in "ready" and "info"; uname -r.
	KernelRelease string
}

// Serve writes "ready", then answers requests read from rw until it is
// closed or ctx is done. Requests are served one at a time, in order.
func Serve(ctx context.Context, rw io.ReadWriter, h Handler) error {
	w := &writer{enc: json.NewEncoder(rw)}
	if err := w.send(proto.Event{Type: proto.EventReady, KernelRelease: h.KernelRelease}); err != nil {
		return fmt.Errorf("send ready: %w", err)
	}
	sc := bufio.NewScanner(rw)
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	for sc.Scan() {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		line := sc.Bytes()
		if len(strings.TrimSpace(string(line))) == 0 {
			continue
		}
		var req proto.Request
		if err := json.Unmarshal(line, &req); err != nil {
			// No ID to answer to: report it, end with a done, go on.
			w.send(proto.Event{Type: proto.EventError, Msg: fmt.Sprintf("bad request %q: %v", line, err)})
			w.send(proto.Event{Type: proto.EventDone})
			continue
		}
		h.serveOne(ctx, w, req)
		if req.Op == proto.OpPowerOff && h.PowerOff != nil {
			h.PowerOff()
		}
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("read requests: %w", err)
	}
	return nil
}

// writer serializes events; exec streams output from two goroutines.
type writer struct {
	mu  sync.Mutex
	enc *json.Encoder
}

func (w *writer) send(ev proto.Event) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.enc.Encode(ev)
}

func (h Handler) serveOne(ctx context.Context, w *writer, req proto.Request) {
	ctx = context.WithValue(ctx, sinkKey{}, sink{w: w, id: req.ID})
	data, err := h.do(ctx, w, req)
	switch {
	case err != nil:
		w.send(proto.Event{ID: req.ID, Type: proto.EventError, Msg: err.Error()})
	default:
		raw, merr := json.Marshal(data)
		if merr != nil {
			w.send(proto.Event{ID: req.ID, Type: proto.EventError, Msg: fmt.Sprintf("marshal result: %v", merr)})
			break
		}
		ev := proto.Event{ID: req.ID, Type: proto.EventResult, Data: raw}
		if req.Op == proto.OpInfo {
			ev.KernelRelease = h.KernelRelease
		}
		w.send(ev)
	}
	w.send(proto.Event{ID: req.ID, Type: proto.EventDone})
}

// Info is the "info" result.
type Info struct {
	KernelRelease string   `json:"kernel_release"`
	CPUs          int      `json:"cpus"`
	MemTotalKiB   int64    `json:"mem_total_kib"`
	Cmdline       string   `json:"cmdline"`
	Disks         []string `json:"disks"` // /dev/vd* present
}

// ExecResult is the "exec" result.
type ExecResult struct {
	ExitCode int    `json:"exit_code"`
	Stdout   string `json:"stdout"`
	Stderr   string `json:"stderr"`
	Millis   int64  `json:"ms"`
}

func (h Handler) do(ctx context.Context, w *writer, req proto.Request) (any, error) {
	switch req.Op {
	case proto.OpInfo:
		return h.info(), nil
	case proto.OpExec:
		return execute(ctx, req)
	case proto.OpRunSuite:
		if h.RunSuite == nil {
			return nil, errors.New("run-suite: no suite runner in this agent")
		}
		return h.RunSuite(ctx, req)
	case proto.OpPrepare:
		if h.PrepareSuite == nil {
			return struct{}{}, nil
		}
		return h.PrepareSuite(ctx, req)
	case proto.OpPowerOff:
		return struct{}{}, nil
	default:
		return nil, fmt.Errorf("unknown op %q", req.Op)
	}
}

func (h Handler) info() Info {
	in := Info{KernelRelease: h.KernelRelease, CPUs: onlineCPUs()}
	if b, err := os.ReadFile("/proc/cmdline"); err == nil {
		in.Cmdline = strings.TrimSpace(string(b))
	}
	if b, err := os.ReadFile("/proc/meminfo"); err == nil {
		fmt.Sscanf(string(b), "MemTotal: %d kB", &in.MemTotalKiB)
	}
	for c := 'a'; c <= 'z'; c++ {
		p := "/dev/vd" + string(c)
		if _, err := os.Stat(p); err != nil {
			break
		}
		in.Disks = append(in.Disks, p)
	}
	return in
}

func onlineCPUs() int {
	b, err := os.ReadFile("/sys/devices/system/cpu/online")
	if err != nil {
		return 0
	}
	n := 0
	for _, r := range strings.Split(strings.TrimSpace(string(b)), ",") {
		var lo, hi int
		if k, _ := fmt.Sscanf(r, "%d-%d", &lo, &hi); k == 2 {
			n += hi - lo + 1
		} else if k == 1 {
			n++
		}
	}
	return n
}

// execute runs req.Argv; a non-zero exit is a result, not an error, so the
// host sees the output either way.
func execute(ctx context.Context, req proto.Request) (*ExecResult, error) {
	if len(req.Argv) == 0 {
		return nil, errors.New("exec: empty argv")
	}
	var stdout, stderr strings.Builder
	cmd := exec.CommandContext(ctx, req.Argv[0], req.Argv[1:]...)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	start := time.Now()
	err := cmd.Run()
	res := &ExecResult{Stdout: stdout.String(), Stderr: stderr.String(), Millis: time.Since(start).Milliseconds()}
	var exit *exec.ExitError
	switch {
	case errors.As(err, &exit):
		res.ExitCode = exit.ExitCode()
	case err != nil:
		return nil, fmt.Errorf("exec %q: %w", req.Argv[0], err)
	}
	return res, nil
}
