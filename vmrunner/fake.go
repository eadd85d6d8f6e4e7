package vmrunner

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"sync"

	"github.com/patchbot/patchbot/vmrunner/agent"
)

// The fake backend runs the real agent protocol in this process, over a
// pipe, with no VM. Words in Spec.Cmdline script failures for tests of the
// layers above:
//
//	fake.panic   the "kernel" panics at boot (a *BootError)
//	fake.hang    the agent never reports ready (a *BootError at BootTimeout)
//	fake.nostart the hypervisor fails to start (an *InfraError)
//	fake.silent  the console stays empty and the agent silent
//	fake.crash   the hypervisor fails once the kernel runs (an *InfraError, as QEMU's exit with an error)
//
// The kernel release it reports is "fake".
func init() {
	register("fake", func(cfg Config) (Pool, error) {
		return newPool("fake", cfg, func(s Spec, dir string) (hypervisor, error) {
			return &fakeVM{spec: s, runSuite: cfg.RunSuite, done: make(chan struct{})}, nil
		}), nil
	})
}

type fakeVM struct {
	spec     Spec
	runSuite agent.RunSuiteFunc

	mu    sync.Mutex
	guest net.Conn
	host  net.Conn
	done  chan struct{}
	ended bool
}

func (f *fakeVM) has(word string) bool {
	return strings.Contains(" "+f.spec.Cmdline+" ", " "+word+" ")
}

func (f *fakeVM) start(ctx context.Context) (launch, error) {
	l := launch{accel: "none", repro: "fake " + f.spec.Kernel + " " + f.spec.Cmdline}
	if f.has("fake.nostart") {
		f.stop()
		return l, &InfraError{Op: "start fake VM", Err: errors.New("scripted start failure")}
	}
	con := "Linux version fake (fake backend)\n"
	if f.has("fake.silent") {
		con = ""
	}
	if f.has("fake.panic") {
		con += "Run /init as init process\nKernel panic - not syncing: scripted panic\nCPU: 0 PID: 1 Comm: init\n"
	}
	if err := os.WriteFile(f.spec.ConsoleLog, []byte(con), 0o644); err != nil {
		return l, &InfraError{Op: "write fake console", Err: err}
	}
	f.mu.Lock()
	f.guest, f.host = net.Pipe()
	f.mu.Unlock()
	if f.has("fake.crash") {
		go f.stop() // the hypervisor goes away, not ended by the guest (exitStatus)
		return l, nil
	}
	if f.has("fake.panic") || f.has("fake.hang") || f.has("fake.silent") {
		return l, nil
	}
	h := agent.Handler{RunSuite: f.runSuite, KernelRelease: "fake", PowerOff: f.stop}
	go agent.Serve(context.Background(), f.guest, h)
	return l, nil
}

func (f *fakeVM) dial(ctx context.Context) (io.ReadWriteCloser, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.host == nil {
		return nil, fmt.Errorf("fake VM not started")
	}
	return f.host, nil
}

func (f *fakeVM) stopped() <-chan struct{} { return f.done }

func (f *fakeVM) exitStatus() (bool, error, []byte) {
	if f.has("fake.crash") {
		return false, errors.New("scripted hypervisor failure"), []byte("qemu: fatal: scripted\n")
	}
	return true, nil, nil
}

func (f *fakeVM) stop() {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.ended {
		return
	}
	f.ended = true
	if f.guest != nil {
		f.guest.Close()
	}
	close(f.done)
}

func (f *fakeVM) destroy() error {
	f.stop()
	return nil
}
