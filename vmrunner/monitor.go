package vmrunner

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"sync"
	"time"

	"github.com/patchbot/patchbot/vmrunner/report"
)

// A hung guest that printed nothing is looked into through the
// hypervisor's monitor (report/cpus.go says what is read and why): each
// vCPU's registers sampled a few times, then, with the guest stopped, the
// stack of the vCPU busy in the kernel walked by its frame pointers. The
// monitor is QEMU's human monitor: through QMP's human-monitor-command
// for a QEMU patchbot starts, through libvirt's qemu-monitor-command for a
// domain.

// monitor runs one of QEMU's human monitor commands on the VM.
type monitor interface {
	hmp(ctx context.Context, cmd string) (string, error)
}

// How a hang is looked into: samples of the registers, their spacing,
// the frames walked at most, and the time all of it may take. A guest
// whose vCPUs spin on PAUSE answers the monitor slowly (why was not
// examined): under a host loaded 7-10 a look with ten samples 100 ms
// apart took 12-27 s, where an idle guest's takes 2 s, so five are
// taken, and the bound is generous.
const (
	hangSamples     = 5
	HangSampleEvery = 200 * time.Millisecond
	maxStackDepth   = 32
	// maxStackSwitches: an NMI or exception stack, the IRQ stack, the
	// task's.
	maxStackSwitches = 2
	// ptRegsBP, ptRegsIP: the words of x86-64's struct pt_regs that hold
	// rbp and rip.
	ptRegsBP      = 4
	ptRegsIP      = 16
	hangLookLimit = 60 * time.Second
)

// lookAtHang samples a hung guest's vCPUs and walks the stack of the one
// busy in the kernel; nil when the hypervisor has no monitor or the guest
// could not be read.
func (m *machine) lookAtHang() *report.Sampled {
	mon, ok := m.hv.(monitor)
	if !ok {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), hangLookLimit)
	defer cancel()
	var sym *report.Symbolizer
	if v := m.vmlinux(); v != "" {
		if s, err := report.Open(v); err == nil {
			defer s.Close()
			sym = s
		}
	}
	start := time.Now()
	s, err := sampleCPUs(ctx, mon, sym, kernelHZ(m.vmlinux()))
	if err != nil {
		m.log.Warn("looking into a hung guest", "name", m.spec.Name, "err", err, "took", time.Since(start).Round(time.Millisecond))
	} else {
		m.log.Info("looked into a hung guest", "name", m.spec.Name, "stuck", s.Stuck(), "took", time.Since(start).Round(time.Millisecond))
	}
	return s
}

// spinning looks into the guest and says whether it spins (Pace): a vCPU
// busy in the kernel in most samples while the guest's clock crawls.
func (m *machine) spinning() (string, bool) {
	m.spunMu.Lock()
	crawl := crawlFor(m.clock)
	m.spunMu.Unlock()
	s := m.lookAtHang()
	if s == nil || !s.Stuck() || s.HostClock <= 0 || s.GuestClock.Seconds() >= crawl*s.HostClock.Seconds() {
		return "", false
	}
	where := "in the kernel"
	if s.Stack != nil && s.Stack.Where() != "" {
		where = "in " + s.Stack.Where()
	}
	clock := "its clock stood still"
	if s.GuestClock > 0 {
		clock = fmt.Sprintf("its clock ran at 1/%.0f of the host's", s.HostClock.Seconds()/s.GuestClock.Seconds())
	}
	m.log.Info("a guest spins", "name", m.spec.Name, "where", where, "clock", clock)
	m.spunMu.Lock()
	m.spun = s
	m.spunMu.Unlock()
	return fmt.Sprintf("a vCPU spun %s while %s", where, clock), true
}

// sampleCPUs is lookAtHang's work: hangSamples readings of the registers,
// then the guest stopped, read once more, the busiest kernel vCPU's stack
// walked, and the guest let go.
func sampleCPUs(ctx context.Context, mon monitor, sym *report.Symbolizer, hz int) (*report.Sampled, error) {
	var samples [][]report.Registers
	// The guest's clock beside the host's, over the samples: jiffies_64
	// at the first and the last (hz 0: not known, not read).
	var jiffiesAt uint64
	if sym != nil && hz > 0 {
		jiffiesAt, _ = sym.Object("jiffies_64")
	}
	readClock := func() (uint64, time.Time, bool) {
		if jiffiesAt == 0 {
			return 0, time.Time{}, false
		}
		w, err := readWords(ctx, mon, jiffiesAt, 1)
		now := time.Now()
		if err != nil || len(w) != 1 {
			return 0, now, false
		}
		return w[0], now, true
	}
	j0, t0, ok0 := readClock()
	for i := 0; i < hangSamples; i++ {
		if i > 0 {
			select {
			case <-ctx.Done():
				return nil, ctx.Err()
			case <-time.After(HangSampleEvery):
			}
		}
		regs, err := readRegisters(ctx, mon)
		if err != nil {
			return nil, err
		}
		samples = append(samples, regs)
	}
	j1, t1, ok1 := readClock()
	clocks := func(s *report.Sampled) *report.Sampled {
		s.Every = HangSampleEvery
		if ok0 && ok1 && j1 >= j0 {
			s.GuestClock = time.Duration(j1-j0) * time.Second / time.Duration(hz)
			s.HostClock = t1.Sub(t0)
		}
		return s
	}
	seen := clocks(report.Sample(samples, -1, nil, sym))
	if !seen.Stuck() {
		return seen, nil
	}
	// Stopped, the stack does not change under the walk.
	if _, err := mon.hmp(ctx, "stop"); err != nil {
		return seen, err
	}
	defer mon.hmp(context.WithoutCancel(ctx), "cont")
	now, err := readRegisters(ctx, mon)
	if err != nil {
		return seen, err
	}
	// The vCPU busy in the kernel most often, if it is in the kernel now.
	var pick *report.Registers
	best := 0
	for _, c := range seen.CPUs {
		for i := range now {
			if now[i].CPU == c.CPU && now[i].Kernel() && c.Busy > best {
				pick, best = &now[i], c.Busy
			}
		}
	}
	if pick == nil {
		return seen, nil
	}
	stack, ended := walkFrames(ctx, mon, *pick)
	seen = clocks(report.Sample(samples, pick.CPU, stack, sym))
	if ended != "" {
		seen.Stack.Corrupted = "the walk of the frame pointers stopped: " + ended
	}
	return seen, nil
}

// readRegisters is every vCPU's registers, as the monitor prints them.
func readRegisters(ctx context.Context, mon monitor) ([]report.Registers, error) {
	out, err := mon.hmp(ctx, "info registers -a")
	if err != nil {
		return nil, err
	}
	return report.ParseRegisters(out)
}

// walkFrames is the vCPU's instruction pointer, the return addresses its
// frame pointers give, and the instruction an interrupt's registers hold
// where the walk goes through them (the kernels are built with
// CONFIG_FRAME_POINTER): at each frame, the saved frame pointer and the
// return address above it. The kernel half of the address space is the
// same in every vCPU's page tables, so the monitor's own vCPU reads any
// kernel stack. A vCPU stopped in an interrupt or an exception is on
// another stack than its task's: the frame at the top of that stack links
// to the task's, so a frame pointer may leave its stack maxStackSwitches
// times (as the kernel's own unwinder goes from the IRQ stack to the
// task's). The walk ends at the first word that is not a kernel text
// address or, past those, a frame pointer that does not climb the stack;
// ended says why, "" when the chain ended as a task's does (a zero frame
// pointer, or user space's below a system call).
//
// The frame pointer is the stopped function's own only once its
// prologue has run (`push %rbp; mov %rsp,%rbp`), and a function built
// without a frame (a leaf) never makes one: stopped there, the chain
// from RBP starts at the caller's caller. The caller is then on the top
// of the stack (topReturn), and goes in between.
func walkFrames(ctx context.Context, mon monitor, r report.Registers) (stack []report.WalkedPC, ended string) {
	stack, ended = walkChain(ctx, mon, r)
	if ret, ok := topReturn(ctx, mon, r); ok && (len(stack) < 2 || stack[1].PC != ret) {
		stack = append(stack[:1], append([]report.WalkedPC{{PC: ret}}, stack[1:]...)...)
		if len(stack) > maxStackDepth {
			stack = stack[:maxStackDepth]
		}
	}
	return stack, ended
}

// callReach is how far below RIP the call into its function may point
// for topReturn: kernel functions are shorter.
const callReach = 4096

// topReturn is the return address into the caller of the function a vCPU
// stopped in, from the top of its stack: [RSP] before the function
// pushed anything (a leaf, or its prologue before the push), [RSP+8]
// after a push of RBP alone (RBP still the caller's). A word is taken
// only if the instruction before it is a direct call (e8 rel32) of an
// address at most callReach below RIP: the call that entered the
// function RIP is in. Anything else there (a frame's data, an indirect
// call's return) is none.
func topReturn(ctx context.Context, mon monitor, r report.Registers) (uint64, bool) {
	top, err := readWords(ctx, mon, r.RSP, 2)
	if err != nil || len(top) < 2 {
		return 0, false
	}
	for i, ret := range top {
		if i == 1 && top[0] != r.RBP {
			break // [RSP] is not a pushed RBP: [RSP+8] is the function's data
		}
		if !report.KernelText(ret) {
			continue
		}
		w, err := readWords(ctx, mon, ret-5, 1)
		if err != nil || len(w) < 1 || byte(w[0]) != 0xe8 {
			continue
		}
		target := ret + uint64(int64(int32(uint32(w[0]>>8))))
		if target <= r.RIP && r.RIP-target < callReach {
			return ret, true
		}
	}
	return 0, false
}

// readWords reads n words of the guest's memory at addr through the
// monitor.
func readWords(ctx context.Context, mon monitor, addr uint64, n int) ([]uint64, error) {
	out, err := mon.hmp(ctx, fmt.Sprintf("x /%dgx 0x%x", n, addr))
	if err != nil {
		return nil, err
	}
	return report.ParseWords(out, addr)
}

// walkChain is walkFrames' walk by the frame pointers alone.
func walkChain(ctx context.Context, mon monitor, r report.Registers) (stack []report.WalkedPC, ended string) {
	stack = []report.WalkedPC{{PC: r.RIP, At: true}}
	bp := r.RBP
	switches := 0
	for {
		switch {
		case len(stack) == maxStackDepth:
			return stack, fmt.Sprintf("cut at %d frames", maxStackDepth)
		case bp < 1<<63:
			return stack, "" // the end of the chain, or user space's frames
		case bp%8 == 1:
			// An interrupt or exception's entry encodes its registers
			// as the frame pointer (ENCODE_FRAME_POINTER: pt_regs + 1):
			// the interrupted code's frame pointer and instruction
			// are in them, as the kernel's own unwinder reads them.
			regs := bp - 1
			out, err := mon.hmp(ctx, fmt.Sprintf("x /%dgx 0x%x", ptRegsIP+1, regs))
			if err != nil {
				return stack, err.Error()
			}
			w, err := report.ParseWords(out, regs)
			if err != nil || len(w) <= ptRegsIP {
				return stack, fmt.Sprintf("the registers at %#x could not be read", regs)
			}
			if !report.KernelText(w[ptRegsIP]) {
				return stack, "" // it interrupted user space
			}
			stack = append(stack, report.WalkedPC{PC: w[ptRegsIP], At: true})
			bp = w[ptRegsBP]
			continue
		case bp%8 != 0:
			return stack, fmt.Sprintf("frame pointer %#x is not a kernel stack's", bp)
		}
		w, err := readWords(ctx, mon, bp, 2)
		if err != nil {
			return stack, err.Error()
		}
		if len(w) < 2 || !report.KernelText(w[1]) {
			return stack, fmt.Sprintf("the word above frame pointer %#x is not a kernel address", bp)
		}
		stack = append(stack, report.WalkedPC{PC: w[1]})
		if w[0] != 0 && (w[0] <= bp || w[0]-bp > 64<<10) {
			if switches == maxStackSwitches {
				return stack, fmt.Sprintf("frame pointer %#x does not climb the stack from %#x", w[0], bp)
			}
			switches++ // onto the stack that was interrupted
		}
		bp = w[0]
	}
}

// qmp is a client of QEMU's machine protocol on a connected socket, used
// only for human-monitor-command. QEMU greets on connection and sends
// events only after the capabilities are negotiated, so nothing need be
// read until the first command.
type qmp struct {
	mu    sync.Mutex
	conn  net.Conn
	r     *bufio.Reader
	ready bool
	id    int
}

// maxQMPLine bounds one message from QEMU ("info registers -a" of a
// 2-vCPU guest is about 4 KB).
const maxQMPLine = 1 << 20

func newQMP(conn net.Conn) *qmp {
	return &qmp{conn: conn, r: bufio.NewReaderSize(conn, maxQMPLine)}
}

// qmpReply is one message from QEMU: a reply (Return or Error, with the
// command's ID), an event, or the greeting.
type qmpReply struct {
	Return json.RawMessage `json:"return"`
	Error  *struct {
		Class string `json:"class"`
		Desc  string `json:"desc"`
	} `json:"error"`
	Event string          `json:"event"`
	QMP   json.RawMessage `json:"QMP"`
	ID    json.RawMessage `json:"id"`
}

func (c *qmp) hmp(ctx context.Context, cmd string) (string, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	deadline, ok := ctx.Deadline()
	if !ok {
		deadline = time.Now().Add(10 * time.Second)
	}
	c.conn.SetDeadline(deadline)
	defer c.conn.SetDeadline(time.Time{})
	if !c.ready {
		if _, err := c.read(); err != nil { // the greeting
			return "", fmt.Errorf("qmp greeting: %w", err)
		}
		if _, err := c.call("qmp_capabilities", nil); err != nil {
			return "", err
		}
		c.ready = true
	}
	ret, err := c.call("human-monitor-command", map[string]string{"command-line": cmd})
	if err != nil {
		return "", err
	}
	var s string
	if err := json.Unmarshal(ret, &s); err != nil {
		return "", fmt.Errorf("qmp %q: %w", cmd, err)
	}
	return s, nil
}

// call sends a command and reads up to its reply, skipping events.
func (c *qmp) call(cmd string, args any) (json.RawMessage, error) {
	c.id++
	id := fmt.Sprint(c.id)
	msg := map[string]any{"execute": cmd, "id": id}
	if args != nil {
		msg["arguments"] = args
	}
	data, _ := json.Marshal(msg)
	if _, err := c.conn.Write(append(data, '\n')); err != nil {
		return nil, fmt.Errorf("qmp %s: %w", cmd, err)
	}
	for {
		r, err := c.read()
		if err != nil {
			return nil, fmt.Errorf("qmp %s: %w", cmd, err)
		}
		if r.Event != "" || r.QMP != nil || string(r.ID) != `"`+id+`"` {
			continue
		}
		if r.Error != nil {
			return nil, fmt.Errorf("qmp %s: %s: %s", cmd, r.Error.Class, r.Error.Desc)
		}
		return r.Return, nil
	}
}

func (c *qmp) read() (qmpReply, error) {
	var r qmpReply
	line, err := c.r.ReadSlice('\n')
	if errors.Is(err, bufio.ErrBufferFull) {
		return r, fmt.Errorf("a message longer than %d bytes", maxQMPLine)
	}
	if err != nil {
		return r, err
	}
	if err := json.Unmarshal(line, &r); err != nil {
		return r, fmt.Errorf("not QMP: %w", err)
	}
	return r, nil
}

func (c *qmp) Close() error { return c.conn.Close() }

// hmp on a QEMU patchbot started: its QMP socket.
func (q *qemuVM) hmp(ctx context.Context, cmd string) (string, error) {
	q.mu.Lock()
	mon := q.qmp
	q.mu.Unlock()
	if mon == nil {
		return "", errors.New("qemu: no monitor")
	}
	return mon.hmp(ctx, cmd)
}

// hmpFlag is VIR_DOMAIN_QEMU_MONITOR_COMMAND_HMP: the command is the
// human monitor's, libvirt wraps it in QMP.
const hmpFlag = 1

// hmp on a libvirt domain: qemu-monitor-command (the domain is marked
// "custom-monitor" tainted in its log, as virsh's would be).
func (v *libvirtVM) hmp(ctx context.Context, cmd string) (string, error) {
	v.mu.Lock()
	dom := v.dom
	v.mu.Unlock()
	if dom == nil {
		return "", errors.New("libvirt: no domain")
	}
	type answer struct {
		out string
		err error
	}
	done := make(chan answer, 1)
	go func() {
		out, err := v.conn.QEMUDomainMonitorCommand(*dom, cmd, hmpFlag)
		done <- answer{out, err}
	}()
	select {
	case a := <-done:
		return a.out, a.err
	case <-ctx.Done():
		return "", ctx.Err()
	}
}
