package vmrunner

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// scanAll feeds console text to a scanner in pieces of n bytes, as reads
// of a growing file would.
func scanAll(text string, n int) *scanner {
	var s scanner
	for i := 0; i < len(text); i += n {
		s.write([]byte(text[i:min(i+n, len(text))]))
	}
	return &s
}

func TestScanTrouble(t *testing.T) {
	boot := "[    0.000000] Linux version 6.1.0\n[    0.5] Run /init as init process\n"
	tests := []struct {
		name, console, reason, first string
	}{
		{"clean", boot, "", ""},
		{"panic", boot + "[    1.0] Kernel panic - not syncing: VFS: Unable to mount root fs\n[    1.1] CPU: 0 PID: 1\n", "kernel panic", "Kernel panic"},
		{"oops then panic", boot + "[    1.0] BUG: kernel NULL pointer dereference, address: 0000000000000008\n[    1.1] Oops: 0000 [#1] SMP\n[    2.0] Kernel panic - not syncing: Fatal exception\n", "oops", "BUG: kernel NULL pointer"},
		{"gpf", boot + "[    1.0] general protection fault, probably for non-canonical address 0xdead000000000100: 0000 [#1] SMP\n", "oops", "general protection fault"},
		{"invalid opcode", boot + "[    1.0] invalid opcode: 0000 [#1] SMP\n", "oops", "invalid opcode"},
		{"soft lockup", boot + "[   30.0] watchdog: BUG: soft lockup - CPU#0 stuck for 22s! [agent:94]\n", "soft lockup", "soft lockup"},
		{"kernel BUG", boot + "[    1.0] kernel BUG at fs/squashfs/cache.c:123!\n", "kernel BUG", "kernel BUG at"},
		{"hung task", boot + "[   60.0] INFO: task agent:94 blocked for more than 30 seconds.\n", "hung task", "blocked for more"},
		{"rcu stall", boot + "[   30.0] rcu: INFO: rcu_sched detected stalls on CPUs/tasks:\n", "RCU stall", "detected stalls"},
		// A warning is counted, not trouble that ends a round.
		{"warning", boot + "[    1.0] WARNING: CPU: 1 PID: 1 at fs/x.c:12 f+0x1/0x2\n[    1.1] ---[ end trace 0000000000000000 ]---\n", "", ""},
		// A panic line whose newline has not arrived yet: read when the
		// console ends (the VM stopped).
		{"unfinished panic line", boot + "[    1.0] Kernel panic - not syncing: Attempted to kill init!", "kernel panic", "Kernel panic"},
	}
	for _, tt := range tests {
		for _, n := range []int{1, 7, 1 << 20} {
			t.Run(fmt.Sprintf("%s/reads of %d", tt.name, n), func(t *testing.T) {
				s := scanAll(tt.console, n)
				s.finish()
				if s.reason != tt.reason {
					t.Fatalf("reason = %q, want %q", s.reason, tt.reason)
				}
				if !s.banner {
					t.Error("the banner was not seen")
				}
				if tt.reason == "" {
					return
				}
				ex := string(s.excerpt())
				if !strings.Contains(ex, tt.first) || !strings.Contains(ex, "Run /init") {
					t.Errorf("excerpt lacks the trouble line %q or the lines before it:\n%s", tt.first, ex)
				}
			})
		}
	}
}

func TestExcerptBounds(t *testing.T) {
	var b strings.Builder
	for i := 0; i < 500; i++ {
		if i == 200 {
			b.WriteString("Kernel panic - not syncing: line 200\n")
			continue
		}
		fmt.Fprintf(&b, "line %d\n", i)
	}
	ex := string(scanAll(b.String(), 4096).excerpt())
	if !strings.HasPrefix(ex, "line 190\n") || !strings.Contains(ex, "line 259\n") || strings.Contains(ex, "line 260\n") {
		t.Errorf("excerpt around line 200 = %q…", ex[:40])
	}
	tail := string(scanAll(strings.Replace(b.String(), "Kernel panic", "Kernel fine", 1), 4096).excerpt())
	if !strings.HasPrefix(tail, "line 460\n") || !strings.HasSuffix(tail, "line 499\n") {
		t.Errorf("tail excerpt starts %q", tail[:20])
	}
}

// A guest that prints a 16 MiB line without a newline, and then panics:
// the line is cut in the excerpt, the panic is found, the excerpt stays
// within its bytes, and no escape sequence survives.
func TestLongLineThenPanic(t *testing.T) {
	long := strings.Repeat("\x1b]0;owned\x07A", (16<<20)/12)
	text := "Linux version 6.1.0\n" + long + "\nKernel panic - not syncing: after a long line\n"
	s := scanAll(text, 64<<10)
	if s.reason != "kernel panic" {
		t.Fatalf("reason %q, want kernel panic", s.reason)
	}
	ex := s.excerpt()
	if len(ex) > excerptBytes+128 {
		t.Errorf("excerpt of %d bytes, over %d", len(ex), excerptBytes)
	}
	if !strings.Contains(string(ex), fmt.Sprintf("[line cut: %d bytes]", len(long))) {
		t.Errorf("the long line is not said to be cut:\n%.300s", ex)
	}
	if strings.ContainsAny(string(ex), "\x1b\x07") {
		t.Error("an escape sequence reached the excerpt")
	}
	// Written raw to the serial port, the long line has no newline before
	// the kernel's own panic message: the panic is found at its end.
	s = scanAll("Linux version 6.1.0\n"+long+"Kernel panic - not syncing: after a long line\n", 64<<10)
	if s.reason != "kernel panic" || !strings.Contains(string(s.excerpt()), "[line cut: ") ||
		!strings.Contains(string(s.excerpt()), "Kernel panic - not syncing: after a long line") {
		t.Errorf("panic at the end of a long line: reason %q, excerpt %.600q", s.reason, s.excerpt())
	}
	// Without the newline, the hang's tail holds the cut line too.
	tail := scanAll("Linux version\n"+long, 1<<20).excerpt()
	if len(tail) > excerptBytes || !strings.Contains(string(tail), "[line cut:") {
		t.Errorf("tail of a hang: %d bytes: %.200s", len(tail), tail)
	}
}

// The console read from a growing file is scanned once: reading it again
// with nothing new costs nothing, and a sign split between two writes of
// the file is found.
func TestConsoleReadsIncrementally(t *testing.T) {
	path := filepath.Join(t.TempDir(), "console.log")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	c := &console{path: path}
	f.WriteString("Linux version 6.1\n" + strings.Repeat("x", 1<<20) + " Kernel pan")
	if c.trouble(false) != nil {
		t.Fatal("trouble before the sign is whole")
	}
	if c.scan.total != int64(1<<20+len("Linux version 6.1\n Kernel pan")) {
		t.Fatalf("scanned %d bytes", c.scan.total)
	}
	c.refresh()
	if c.scan.total != int64(1<<20+len("Linux version 6.1\n Kernel pan")) {
		t.Fatalf("a refresh with nothing new scanned again: %d bytes", c.scan.total)
	}
	f.WriteString("ic - not syncing: split\n")
	be := c.trouble(true)
	if be == nil || be.Reason != "kernel panic" || be.Report == nil || be.Report.Message != "split" {
		t.Fatalf("trouble = %v, want the panic split between two writes", be)
	}
	if !c.alive() {
		t.Error("the banner was not seen")
	}
}

// BenchmarkConsoleScan is the console's scan cost per MiB received (the
// MB/s column), kernel-like lines and one line without a newline, fed in
// 64 KiB pieces: the scanner alone (scan), and read from a file that grows
// by 64 KiB before each check, as a boot reads it (file: the writes, the
// reads and the kept copy included).
func BenchmarkConsoleScan(b *testing.B) {
	var kernel strings.Builder
	for kernel.Len() < 16<<20 {
		fmt.Fprintf(&kernel, "[%5d.%06d] squashfs: cache entry %d released, waking %d waiters\n", kernel.Len()%9999, kernel.Len()%999999, kernel.Len(), kernel.Len()%7)
	}
	for _, bc := range []struct{ name, text string }{
		{"kernel-lines", kernel.String()},
		{"one-16MiB-line", strings.Repeat("A", 16<<20)},
	} {
		b.Run(bc.name+"/scan", func(b *testing.B) {
			text := []byte(bc.text)
			b.SetBytes(int64(len(text)))
			for b.Loop() {
				var s scanner
				for i := 0; i < len(text); i += 64 << 10 {
					s.write(text[i:min(i+64<<10, len(text))])
				}
				if s.reason != "" {
					b.Fatal("trouble in a clean console")
				}
			}
		})
		b.Run(bc.name+"/file", func(b *testing.B) {
			path := filepath.Join(b.TempDir(), "console.log")
			b.SetBytes(int64(len(bc.text)))
			for b.Loop() {
				f, err := os.Create(path)
				if err != nil {
					b.Fatal(err)
				}
				c := &console{path: path}
				for i := 0; i < len(bc.text); i += 64 << 10 {
					f.WriteString(bc.text[i:min(i+64<<10, len(bc.text))])
					if c.trouble(false) != nil {
						b.Fatal("trouble in a clean console")
					}
				}
				f.Close()
			}
		})
	}
}

// slowAccelVM is a fake whose first launch, "under KVM", never shows the
// kernel's banner; the machine must fall back and boot again.
type slowAccelVM struct {
	*fakeVM
	launches int
}

func (s *slowAccelVM) start(ctx context.Context) (launch, error) {
	s.launches++
	s.fakeVM.done, s.fakeVM.ended = make(chan struct{}), false
	if s.launches == 1 {
		s.fakeVM.spec.Cmdline = "fake.silent"
		l, err := s.fakeVM.start(ctx)
		l.accel, l.probe = "kvm", 50*time.Millisecond
		return l, err
	}
	s.fakeVM.spec.Cmdline = ""
	l, err := s.fakeVM.start(ctx)
	l.accel = "tcg"
	return l, err
}

func (s *slowAccelVM) fallback(reason string) bool { return s.launches == 1 }

func TestBootFallsBackWhenAccelHangs(t *testing.T) {
	p := newFakePool(t, Config{})
	vm, err := p.Create(context.Background(), Spec{Kernel: fakeKernel(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer vm.Close()
	m := vm.(*machine)
	slow := &slowAccelVM{fakeVM: m.hv.(*fakeVM)}
	m.hv = slow
	info, err := vm.Boot(context.Background())
	if err != nil {
		t.Fatalf("Boot: %v", err)
	}
	if slow.launches != 2 || info.Accel != "tcg" {
		t.Errorf("launches = %d, accel = %q; want a second launch under tcg", slow.launches, info.Accel)
	}
}
