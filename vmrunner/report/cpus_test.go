package report

import (
	"os"
	"strings"
	"testing"
)

// registers-panic-loop.txt is QEMU 10's "info registers -a" of a 2-vCPU
// guest whose kernel panicked at boot (no root file system, panic=0):
// vCPU 0 loops in the panic's delay (delay_tsc), vCPU 1 was stopped by
// the panic and halted.
func TestParseRegisters(t *testing.T) {
	data, err := os.ReadFile("testdata/registers-panic-loop.txt")
	if err != nil {
		t.Fatal(err)
	}
	regs, err := ParseRegisters(string(data))
	if err != nil {
		t.Fatal(err)
	}
	want := []Registers{
		{CPU: 0, RIP: 0xffffffff812cead4, RSP: 0xffa0000000013db8, RBP: 0xffa0000000013dc0, CPL: 0, Long: true},
		{CPU: 1, RIP: 0xffffffff8102349f, RSP: 0xffa00000000b0fc8, RBP: 0xffa00000000b0fd8, CPL: 0, Halted: true, Long: true},
	}
	if len(regs) != len(want) {
		t.Fatalf("%d vCPUs, want %d: %+v", len(regs), len(want), regs)
	}
	for i := range want {
		if regs[i] != want[i] {
			t.Errorf("vCPU %d: %+v, want %+v", i, regs[i], want[i])
		}
	}
	if !regs[0].Kernel() {
		t.Errorf("vCPU 0 at %#x, CPL 0: not seen in the kernel", regs[0].RIP)
	}
}

// A vCPU still in 32-bit code (firmware, the boot's early code) prints
// EIP: it is not in the kernel, whatever its address.
func TestParseRegistersEarlyBoot(t *testing.T) {
	text := "CPU#0\nRIP=000000000200a545 RFL=00000006 [-----P-] CPL=0 II=0 A20=1 SMM=0 HLT=0\n" +
		"CPU#1\nEAX=000f424a EBX=00000000\nESI=00000000 EDI=00000000 EBP=00000000 ESP=00006c5c\n" +
		"EIP=000fd0cf EFL=00000002 [-------] CPL=0 II=0 A20=1 SMM=0 HLT=1\n"
	regs, err := ParseRegisters(text)
	if err != nil {
		t.Fatal(err)
	}
	if len(regs) != 2 || regs[0].Kernel() || regs[1].Long || !regs[1].Halted || regs[1].RSP != 0x6c5c {
		t.Errorf("%+v", regs)
	}
	if _, err := ParseRegisters("Error: no CPU\n"); err == nil {
		t.Error("an answer with no vCPU parsed")
	}
}

func TestParseWords(t *testing.T) {
	w, err := ParseWords("ffa0000000013dc0: 0xffa0000000013dd0 0xffffffff812cea81\r\n", 0xffa0000000013dc0)
	if err != nil || len(w) != 2 || w[0] != 0xffa0000000013dd0 || w[1] != 0xffffffff812cea81 {
		t.Errorf("words %x, err %v", w, err)
	}
	if _, err := ParseWords("ffffffff81000000: Cannot access memory\r\n", 0xffffffff81000000); err == nil ||
		!strings.Contains(err.Error(), "Cannot access memory") {
		t.Errorf("unreadable memory: err %v", err)
	}
	// Words printed for another address are not this one's.
	if _, err := ParseWords("0000000000001000: 0x1 0x2\n", 0x2000); err == nil {
		t.Error("words at another address taken")
	}
}

// Sample counts each vCPU's states and names the busy one's most frequent
// function; a guest whose vCPUs are busy in the kernel in most samples
// is stuck, one whose vCPUs idle is not.
func TestSample(t *testing.T) {
	busy := func(cpu int, rip uint64) Registers {
		return Registers{CPU: cpu, RIP: rip, CPL: 0, Long: true}
	}
	idle := Registers{CPU: 1, RIP: 0xffffffff8102349f, Halted: true, Long: true}
	user := Registers{CPU: 1, RIP: 0x401000, CPL: 3, Long: true}
	var samples [][]Registers
	for i := 0; i < 10; i++ {
		rip := uint64(0xffffffff812cead4)
		if i == 3 {
			rip = 0xffffffff812cea81
		}
		other := idle
		if i%2 == 0 {
			other = user
		}
		samples = append(samples, []Registers{busy(0, rip), other})
	}
	s := Sample(samples, 0, []WalkedPC{{PC: 0xffffffff812cead4, At: true}, {PC: 0xffffffff812cea81}}, nil)
	if !s.Stuck() {
		t.Error("vCPU 0 busy in the kernel in 10 of 10 samples: not stuck")
	}
	if len(s.CPUs) != 2 || s.CPUs[0].Busy != 10 || s.CPUs[0].TopCount != 9 || s.CPUs[0].Top.Func != "0xffffffff812cead4" ||
		s.CPUs[1].Halted != 5 || s.CPUs[1].User != 5 || s.CPUs[1].Busy != 0 {
		t.Errorf("%+v", s.CPUs)
	}
	lines := strings.Join(s.Lines(), "\n")
	for _, want := range []string{"vCPU 0: busy in the kernel in 10 (9 at 0xffffffff812cead4), of 10 samples", "vCPU 1: in user space in 5, idle in 5, of 10 samples"} {
		if !strings.Contains(lines, want) {
			t.Errorf("lines lack %q:\n%s", want, lines)
		}
	}
	if s.Stack == nil || len(s.Stack.Frames) != 2 || s.Stack.Frames[0].Context != "RIP" || s.Stack.Decoded != ErrNoVmlinux.Error() {
		t.Errorf("stack %+v", s.Stack)
	}

	var quiet [][]Registers
	for i := 0; i < 10; i++ {
		r := idle
		r.CPU = 0
		quiet = append(quiet, []Registers{r, idle})
	}
	if q := Sample(quiet, -1, nil, nil); q.Stuck() || q.Stack != nil || q.CPUs[0].Halted != 10 {
		t.Errorf("an idle guest: stuck %v, %+v", q.Stuck(), q.CPUs)
	}
}
