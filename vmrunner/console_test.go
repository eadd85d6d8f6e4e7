package vmrunner

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"
)

func TestScanTrouble(t *testing.T) {
	boot := "[    0.000000] Linux version 6.1.0\n[    0.5] Run /init as init process\n"
	tests := []struct {
		name, console, reason, first string
	}{
		{"clean", boot, "", ""},
		{"panic", boot + "[    1.0] Kernel panic - not syncing: VFS: Unable to mount root fs\n[    1.1] CPU: 0 PID: 1\n", "kernel panic", "Kernel panic"},
		{"oops then panic", boot + "[    1.0] BUG: kernel NULL pointer dereference, address: 0000000000000008\n[    1.1] Oops: 0000 [#1] SMP\n[    2.0] Kernel panic - not syncing: Fatal exception\n", "oops", "BUG: kernel NULL pointer"},
		{"gpf", boot + "[    1.0] general protection fault, probably for non-canonical address\n", "oops", "general protection fault"},
		{"soft lockup", boot + "[   30.0] watchdog: BUG: soft lockup - CPU#0 stuck for 22s!\n", "lockup", "soft lockup"},
		{"kernel BUG", boot + "[    1.0] kernel BUG at fs/squashfs/cache.c:123!\n", "kernel BUG", "kernel BUG at"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			reason, at := scanTrouble([]byte(tt.console))
			if reason != tt.reason {
				t.Fatalf("reason = %q, want %q", reason, tt.reason)
			}
			if tt.reason == "" {
				return
			}
			ex := string(excerpt([]byte(tt.console), at))
			if !strings.Contains(ex, tt.first) || !strings.Contains(ex, "Run /init") {
				t.Errorf("excerpt lacks the trouble line %q or the lines before it:\n%s", tt.first, ex)
			}
		})
	}
}

func TestExcerptBounds(t *testing.T) {
	var b strings.Builder
	for i := 0; i < 500; i++ {
		fmt.Fprintf(&b, "line %d\n", i)
	}
	out := []byte(b.String())
	at := strings.Index(b.String(), "line 200\n")
	ex := string(excerpt(out, at))
	if !strings.HasPrefix(ex, "line 190\n") || !strings.Contains(ex, "line 259\n") || strings.Contains(ex, "line 260\n") {
		t.Errorf("excerpt around line 200 = %q…", ex[:40])
	}
	tail := string(excerpt(out, -1))
	if !strings.HasPrefix(tail, "line 460\n") || !strings.HasSuffix(tail, "line 499\n") {
		t.Errorf("tail excerpt starts %q", tail[:20])
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
