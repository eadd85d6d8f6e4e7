package report

import (
	"bufio"
	"debug/elf"
	"fmt"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"
)

// A guest that hangs without a report of its own (a loop the watchdogs do
// not see, interrupts off where no NMI watchdog runs, a livelock) is
// still a machine the hypervisor can look into: where each vCPU's
// instruction pointer is, sampled a few times, says whether the kernel is
// stuck in one place, and the frame pointers of the vCPU that is give its
// call trace. This file reads what QEMU's monitor prints ("info registers
// -a", "x /2gx") and makes a Report of it; vmrunner does the asking.

// Registers is one vCPU's state as QEMU's "info registers -a" prints it:
// the registers a trace needs, its privilege level, and whether it is
// halted (idle).
type Registers struct {
	CPU           int
	RIP, RSP, RBP uint64
	CPL           int
	Halted        bool
	// Long says the vCPU is in 64-bit mode ("RIP=" rather than "EIP="):
	// a kernel running, not firmware or the boot's early code.
	Long bool
}

// Kernel says whether the vCPU is running kernel code: privilege level 0
// at a kernel text address.
func (r Registers) Kernel() bool { return r.Long && r.CPL == 0 && KernelText(r.RIP) }

// KernelText says whether pc is in the x86-64 kernel's text mapping (the
// kernels patchbot builds are not randomised: their addresses are
// vmlinux's own).
func KernelText(pc uint64) bool { return pc >= 0xffffffff80000000 && pc < 0xffffffffff000000 }

var (
	cpuHeader = regexp.MustCompile(`^CPU#(\d+)`)
	regField  = regexp.MustCompile(`\b(RIP|EIP|RSP|ESP|RBP|EBP|CPL|HLT)=([0-9a-fA-F]+)`)
)

// maxCPUs bounds what ParseRegisters keeps of a monitor's answer.
const maxCPUs = 256

// ParseRegisters reads QEMU's "info registers -a": a "CPU#N" line, then
// that vCPU's registers, for each vCPU.
func ParseRegisters(text string) ([]Registers, error) {
	var out []Registers
	var cur *Registers
	sc := bufio.NewScanner(strings.NewReader(text))
	sc.Buffer(make([]byte, 0, 4096), 64<<10)
	for sc.Scan() {
		line := sc.Text()
		if m := cpuHeader.FindStringSubmatch(line); m != nil {
			if len(out) == maxCPUs {
				break
			}
			n, _ := strconv.Atoi(m[1])
			out = append(out, Registers{CPU: n, CPL: -1})
			cur = &out[len(out)-1]
			continue
		}
		if cur == nil {
			continue
		}
		for _, m := range regField.FindAllStringSubmatch(line, -1) {
			v, err := strconv.ParseUint(m[2], 16, 64)
			if err != nil {
				continue
			}
			switch m[1] {
			case "RIP":
				cur.RIP, cur.Long = v, true
			case "EIP":
				cur.RIP = v
			case "RSP", "ESP":
				cur.RSP = v
			case "RBP", "EBP":
				cur.RBP = v
			case "CPL":
				cur.CPL = int(v)
			case "HLT":
				cur.Halted = v != 0
			}
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("reading the monitor's registers: %w", err)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("the monitor printed no vCPU's registers: %.80q", text)
	}
	return out, nil
}

// ParseWords reads what QEMU's "x /Ngx ADDR" prints, "ADDR: 0xW 0xW",
// into the words at ADDR onwards; an error when the monitor could not
// read the memory.
func ParseWords(text string, addr uint64) ([]uint64, error) {
	var words []uint64
	for _, line := range strings.Split(text, "\n") {
		at, rest, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok {
			continue
		}
		a, err := strconv.ParseUint(at, 16, 64)
		if err != nil || a != addr+8*uint64(len(words)) {
			continue
		}
		for _, f := range strings.Fields(rest) {
			w, err := strconv.ParseUint(strings.TrimPrefix(f, "0x"), 16, 64)
			if err != nil {
				return nil, fmt.Errorf("memory at %#x: %s", addr, strings.TrimSpace(rest))
			}
			words = append(words, w)
		}
	}
	if len(words) == 0 {
		return nil, fmt.Errorf("memory at %#x: the monitor printed %.80q", addr, text)
	}
	return words, nil
}

// idleFunc names the functions a vCPU waits in when it has nothing to do
// but has not halted (polling idle, the halt instruction's own address).
var idleFunc = regexp.MustCompile(`^(default_idle|arch_cpu_idle|native_safe_halt|cpu_idle_poll|do_idle|cpu_startup_entry|mwait_idle.*|poll_idle|acpi_idle.*|intel_idle.*|halt)$`)

// Sampled is where a hung guest's vCPUs were, read from the hypervisor
// Samples times: per vCPU, how often it was halted, in user space or in
// the kernel, and its most frequent kernel function. Stack is the call
// trace of the vCPU to blame (the one most often busy in the kernel),
// walked by its frame pointers while the guest was stopped, as a Report:
// its Frames (the instruction first, Context "RIP"), Guilty and Decoded
// as for a kernel's own report; nil when no vCPU was busy in the kernel.
type Sampled struct {
	Samples int `json:"samples"`
	// Every is the time between samples.
	Every time.Duration `json:"every"`
	// GuestClock is how far the guest's clock (jiffies) advanced over
	// HostClock of the host's, from the first sample to the last; zero
	// when it could not be read. A vCPU that spins may stop a guest's
	// clock (under instruction-counted time, a loop on PAUSE), and
	// with it every watchdog that would have reported the spin.
	GuestClock time.Duration `json:"guest_clock,omitempty"`
	HostClock  time.Duration `json:"host_clock,omitempty"`
	CPUs       []CPUSeen     `json:"cpus"`
	Stack      *Report       `json:"stack,omitempty"`
}

// CPUSeen is one vCPU over the samples.
type CPUSeen struct {
	CPU int `json:"cpu"`
	// Samples in each state: halted or in the idle loop, in user space,
	// busy in the kernel.
	Halted int `json:"halted,omitempty"`
	User   int `json:"user,omitempty"`
	Busy   int `json:"busy,omitempty"`
	// Top is the kernel function Busy samples were most often in, and
	// TopCount how often.
	Top      *Frame `json:"top,omitempty"`
	TopCount int    `json:"top_count,omitempty"`
}

// Stuck says whether any vCPU was busy in the kernel in most samples: the
// kernel stuck in a loop rather than waiting.
func (s *Sampled) Stuck() bool {
	for _, c := range s.CPUs {
		if 2*c.Busy > s.Samples {
			return true
		}
	}
	return false
}

// Lines are the samples, one line a vCPU ("vCPU 1: busy in the kernel in
// 10 of 10 samples, 10 of them at flock_lock_inode_wait+0x4e/0x90
// fs/locks.c:2038"), then the clocks when they were read.
func (s *Sampled) Lines() []string {
	var out []string
	for _, c := range s.CPUs {
		var parts []string
		if c.Busy > 0 {
			p := fmt.Sprintf("busy in the kernel in %d", c.Busy)
			if c.Top != nil {
				p += fmt.Sprintf(" (%d at %s)", c.TopCount, c.Top.String())
			}
			parts = append(parts, p)
		}
		if c.User > 0 {
			parts = append(parts, fmt.Sprintf("in user space in %d", c.User))
		}
		if c.Halted > 0 {
			parts = append(parts, fmt.Sprintf("idle in %d", c.Halted))
		}
		if len(parts) == 0 {
			parts = append(parts, "elsewhere (firmware, or not yet in the kernel)")
		}
		out = append(out, fmt.Sprintf("vCPU %d: %s, of %d samples", c.CPU, strings.Join(parts, ", "), s.Samples))
	}
	if s.HostClock > 0 {
		out = append(out, fmt.Sprintf("the guest's clock (jiffies) advanced %s while the host's advanced %s",
			s.GuestClock.Round(time.Millisecond), s.HostClock.Round(time.Millisecond)))
	}
	return out
}

// funcAt is the function symbol containing pc, as a Frame (Func, Offset,
// Size); false when pc is in none.
func (s *Symbolizer) funcAt(pc uint64) (Frame, bool) {
	sym, ok := s.textAt(pc)
	if !ok {
		return Frame{}, false
	}
	return Frame{Func: sym.Name, Offset: pc - sym.Value, Size: sym.Size}, true
}

// textAt is the sized code symbol containing pc: a function, or a code
// symbol of assembly (entry_SYSCALL_64) that is not typed as one.
func (s *Symbolizer) textAt(pc uint64) (elf.Symbol, bool) {
	s.byAddrOnce.Do(func() {
		syms, _ := s.f.Symbols()
		for _, sym := range syms {
			t := elf.ST_TYPE(sym.Info)
			if sym.Size > 0 && KernelText(sym.Value) && (t == elf.STT_FUNC || t == elf.STT_NOTYPE) {
				s.byAddr = append(s.byAddr, sym)
			}
		}
		sort.Slice(s.byAddr, func(i, j int) bool { return s.byAddr[i].Value < s.byAddr[j].Value })
	})
	i := sort.Search(len(s.byAddr), func(i int) bool { return s.byAddr[i].Value > pc }) - 1
	for ; i >= 0; i-- {
		sym := s.byAddr[i]
		if pc >= sym.Value && pc < sym.Value+sym.Size {
			return sym, true
		}
		if pc-sym.Value > 1<<20 {
			break
		}
	}
	return elf.Symbol{}, false
}

// Object is the address of the data symbol name (a variable), false
// when vmlinux has none of that name.
func (s *Symbolizer) Object(name string) (uint64, bool) {
	syms, err := s.f.Symbols()
	if err != nil {
		return 0, false
	}
	for _, sym := range syms {
		if sym.Name == name && elf.ST_TYPE(sym.Info) == elf.STT_OBJECT {
			return sym.Value, true
		}
	}
	return 0, false
}

// symbolOnly names a frame with no symbol table: its address.
func symbolOnly(pc uint64) Frame { return Frame{Func: fmt.Sprintf("0x%x", pc)} }

// A WalkedPC is one address of a stack walked by its frame pointers,
// innermost first.
type WalkedPC struct {
	PC uint64
	// At: the instruction itself, where the code was (the stopped vCPU's,
	// or the one an interrupt's or exception's registers hold), rather
	// than a return address, whose call is the instruction before.
	At bool
}

// Sample makes a Sampled of the vCPUs' registers, one []Registers a
// sample, and of the stack the caller walked (stack: the vCPU's index,
// its instruction pointer, then what its frame pointers gave, innermost
// first; stackCPU < 0 when none was walked). sym names the functions and
// decodes the stack; nil leaves them as addresses.
func Sample(samples [][]Registers, stackCPU int, stack []WalkedPC, sym *Symbolizer) *Sampled {
	name := func(pc uint64) Frame {
		if sym != nil {
			if f, ok := sym.funcAt(pc); ok {
				return f
			}
		}
		return symbolOnly(pc)
	}
	out := &Sampled{Samples: len(samples)}
	byCPU := map[int]int{} // vCPU -> index in out.CPUs
	tops := map[int]map[string]int{}
	firsts := map[int]map[string]Frame{}
	for _, regs := range samples {
		for _, r := range regs {
			i, ok := byCPU[r.CPU]
			if !ok {
				i = len(out.CPUs)
				byCPU[r.CPU] = i
				out.CPUs = append(out.CPUs, CPUSeen{CPU: r.CPU})
				tops[r.CPU], firsts[r.CPU] = map[string]int{}, map[string]Frame{}
			}
			c := &out.CPUs[i]
			switch {
			case r.Halted:
				c.Halted++
			case r.Long && r.CPL == 3:
				c.User++
			case r.Kernel():
				f := name(r.RIP)
				if idleFunc.MatchString(f.Func) {
					c.Halted++
					continue
				}
				c.Busy++
				tops[r.CPU][f.Func]++
				if _, ok := firsts[r.CPU][f.Func]; !ok {
					firsts[r.CPU][f.Func] = f
				}
			}
		}
	}
	sort.Slice(out.CPUs, func(i, j int) bool { return out.CPUs[i].CPU < out.CPUs[j].CPU })
	for i := range out.CPUs {
		c := &out.CPUs[i]
		best := ""
		for fn, n := range tops[c.CPU] {
			if n > c.TopCount || n == c.TopCount && fn < best {
				best, c.TopCount = fn, n
			}
		}
		if best != "" {
			f := firsts[c.CPU][best]
			if sym != nil {
				r := &Report{Frames: []Frame{f}}
				r.Frames[0].Context = "RIP"
				sym.Decode(r)
				f = r.Frames[0]
			}
			c.Top = &f
		}
	}
	if stackCPU >= 0 && len(stack) > 0 {
		r := &Report{Time: -1}
		for _, w := range stack {
			if w.At {
				// The kernel's traces print such an instruction as
				// the registers' "RIP:", decoded as it is.
				f := name(w.PC)
				f.Context = "RIP"
				r.Frames = append(r.Frames, f)
				continue
			}
			// A return address: the call is the instruction before,
			// which may be the last of another function (a call that
			// does not return), so the function is pc-1's, as the
			// kernel's own traces name it.
			f := name(w.PC - 1)
			if f.Size > 0 {
				f.Offset++
			}
			r.Frames = append(r.Frames, f)
		}
		r.Guilty = guilty(r)
		if sym != nil {
			sym.Decode(r)
		} else {
			r.Decoded = ErrNoVmlinux.Error()
		}
		r.Title = "a hang"
		if f := r.GuiltyFrame(); f != nil {
			r.Title = "a hang in " + f.Func
		}
		r.Header = fmt.Sprintf("vCPU %d, stopped: its instruction and the calls its frame pointers give", stackCPU)
		out.Stack = r
	}
	return out
}
