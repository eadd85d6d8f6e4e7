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
	"time"

	"github.com/patchbot/patchbot/vmrunner/agent"
	"github.com/patchbot/patchbot/vmrunner/proto"
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
//	fake.slow=D  the "kernel" prints a line every 50 ms for D (a
//	             time.Duration) before the agent reports ready, as a
//	             guest booting slowly on a loaded host
//	fake.trouble=KIND@N  in run-suite round N (0: prepare-suite) the
//	             "kernel" prints the sample of KIND (oops, warn, hang: see
//	             fakeTrouble) on its console, in every boot that runs
//	             that round; after an oops the request
//	             never answers, as a dead kernel's; after a warning it goes
//	             on; a hang prints nothing and never answers
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

// value is the value of the command line's word NAME=VALUE, the last one
// given; "" without one.
func (f *fakeVM) value(name string) string {
	v := ""
	for _, w := range strings.Fields(f.spec.Cmdline) {
		if x, ok := strings.CutPrefix(w, name+"="); ok {
			v = x
		}
	}
	return v
}

// print appends text to the console, as the "kernel" printing it.
func (f *fakeVM) print(text string) {
	if con, err := os.OpenFile(f.spec.ConsoleLog, os.O_APPEND|os.O_WRONLY, 0); err == nil {
		con.WriteString(text)
		con.Close()
	}
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
	if f.ended { // started again after destroy (Reboot)
		f.done, f.ended = make(chan struct{}), false
	}
	f.mu.Unlock()
	if f.has("fake.crash") {
		go f.stop() // the hypervisor goes away, not ended by the guest (exitStatus)
		return l, nil
	}
	if f.has("fake.panic") || f.has("fake.hang") || f.has("fake.silent") {
		return l, nil
	}
	h := agent.Handler{RunSuite: f.scripted(f.runSuite), PrepareSuite: f.scripted(nil), KernelRelease: "fake", PowerOff: f.stop}
	go func(guest net.Conn, done <-chan struct{}) {
		if !f.bootSlowly(done) {
			return
		}
		agent.Serve(context.Background(), guest, h)
	}(f.guest, f.done)
	return l, nil
}

// bootSlowly prints a console line every 50 ms for fake.slow's duration,
// if the word is given; false if the VM stopped meanwhile.
func (f *fakeVM) bootSlowly(done <-chan struct{}) bool {
	d, _ := time.ParseDuration(f.value("fake.slow"))
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for end := time.Now().Add(d); time.Now().Before(end); {
		select {
		case <-done:
			return false
		case t := <-tick.C:
			f.print(fmt.Sprintf("[%12.6f] fake: still booting\n", float64(t.UnixNano()%1e12)/1e9))
		}
	}
	return true
}

func (f *fakeVM) dial(ctx context.Context) (io.ReadWriteCloser, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.host == nil {
		return nil, fmt.Errorf("fake VM not started")
	}
	return f.host, nil
}

func (f *fakeVM) stopped() <-chan struct{} {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.done
}

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

// fakeTrouble is what the scripted kernel prints for fake.trouble=KIND@N,
// in the form a 6.1 kernel prints it.
var fakeTrouble = map[string]string{
	"oops": `[   50.101010] ------------[ cut here ]------------
[   50.101020] kernel BUG at fs/squashfs/cache.c:71!
[   50.101030] invalid opcode: 0000 [#1] SMP
[   50.101040] CPU: 1 PID: 94 Comm: patchbot-agent Not tainted 6.1.0 #1
[   50.101050] RIP: 0010:squashfs_cache_get+0x70/0x243
[   50.101060] Call Trace:
[   50.101070]  <TASK>
[   50.101080]  squashfs_read_metadata+0x5d/0xf0
[   50.101090]  squashfs_read_inode+0x8c/0x700
[   50.101100]  </TASK>
[   50.101110] ---[ end trace 0000000000000000 ]---
[   50.101120] Kernel panic - not syncing: Fatal exception
`,
	"warn": `[   50.101010] ------------[ cut here ]------------
[   50.101020] squashfs: scripted warning
[   50.101030] WARNING: CPU: 0 PID: 94 at fs/squashfs/cache.c:80 squashfs_cache_get+0x1a3/0x243
[   50.101040] RIP: 0010:squashfs_cache_get+0x1a3/0x243
[   50.101050] Call Trace:
[   50.101060]  <TASK>
[   50.101070]  squashfs_read_metadata+0x5d/0xf0
[   50.101080]  </TASK>
[   50.101090] ---[ end trace 0000000000000000 ]---
`,
	"hang": "",
}

// scripted wraps run-suite (or, with run nil, prepare-suite) with the
// fake.trouble=KIND@N word, if any.
func (f *fakeVM) scripted(run agent.RunSuiteFunc) agent.RunSuiteFunc {
	kind, round := "", -1
	if v := f.value("fake.trouble"); v != "" {
		k, n, _ := strings.Cut(v, "@")
		fmt.Sscan(n, &round)
		kind = k
	}
	text, ok := fakeTrouble[kind]
	prepare := run == nil
	if !ok || round < 0 || prepare != (round == 0) {
		return run
	}
	return func(ctx context.Context, req proto.Request) (any, error) {
		if !prepare && req.Round != round {
			if run == nil {
				return nil, errors.New("fake backend: no suite runner")
			}
			return run(ctx, req)
		}
		if text != "" {
			f.print(text)
		}
		if kind == "warn" {
			if run == nil {
				return nil, nil
			}
			return run(ctx, req)
		}
		select { // a dead kernel answers nothing
		case <-ctx.Done():
		case <-f.done:
		}
		return nil, errors.New("fake backend: the VM stopped")
	}
}
