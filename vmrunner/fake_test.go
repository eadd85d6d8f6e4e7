package vmrunner

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/patchbot/patchbot/vmrunner/agent"
	"github.com/patchbot/patchbot/vmrunner/proto"
)

func fakeKernel(t *testing.T) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "bzImage")
	if err := os.WriteFile(p, []byte("not a kernel"), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func newFakePool(t *testing.T, cfg Config) Pool {
	t.Helper()
	cfg.WorkDir = t.TempDir()
	p, err := New("fake", cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

func TestFakeBootAndRequests(t *testing.T) {
	ctx := context.Background()
	p := newFakePool(t, Config{RunSuite: func(ctx context.Context, req proto.Request) (any, error) {
		return map[string]string{"suite": req.Suite}, nil
	}})
	vm, err := p.Create(ctx, Spec{Name: "t", Kernel: fakeKernel(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer vm.Close()
	info, err := vm.Boot(ctx)
	if err != nil {
		t.Fatalf("Boot: %v", err)
	}
	if info.Backend != "fake" || info.KernelRelease != "fake" {
		t.Errorf("info = %+v", info)
	}

	var events []string
	raw, err := vm.Do(ctx, proto.Request{Op: proto.OpRunSuite, Suite: "cache-contention"}, func(ev proto.Event) { events = append(events, ev.Type) })
	if err != nil {
		t.Fatalf("run-suite: %v", err)
	}
	if string(raw) != `{"suite":"cache-contention"}` {
		t.Errorf("run-suite result = %s", raw)
	}
	if strings.Join(events, ",") != "result,done" {
		t.Errorf("events = %v, want result,done", events)
	}

	_, err = vm.Do(ctx, proto.Request{Op: "no-such-op"}, nil)
	var ge *GuestError
	if !errors.As(err, &ge) || !strings.Contains(ge.Msg, "unknown op") {
		t.Errorf("unknown op: err = %v, want a GuestError", err)
	}

	raw, err = vm.Do(ctx, proto.Request{Op: proto.OpExec, Argv: []string{"sh", "-c", "echo hi; exit 3"}}, nil)
	if err != nil {
		t.Fatalf("exec: %v", err)
	}
	var res agent.ExecResult
	if err := json.Unmarshal(raw, &res); err != nil {
		t.Fatal(err)
	}
	if res.ExitCode != 3 || res.Stdout != "hi\n" {
		t.Errorf("exec = %+v", res)
	}

	if _, err := vm.Do(ctx, proto.Request{Op: proto.OpPowerOff}, nil); err != nil {
		t.Errorf("poweroff: %v", err)
	}
	if err := vm.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
	if err := vm.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
}

func TestFakeFailuresCarryBlame(t *testing.T) {
	tests := []struct {
		cmdline  string
		wantBoot bool // else infra
		want     string
	}{
		{"fake.panic", true, "Kernel panic - not syncing: scripted panic"},
		{"fake.hang", true, "hang"},
		{"fake.nostart", false, "scripted start failure"},
	}
	for _, tt := range tests {
		t.Run(tt.cmdline, func(t *testing.T) {
			p := newFakePool(t, Config{})
			vm, err := p.Create(context.Background(), Spec{Kernel: fakeKernel(t), Cmdline: tt.cmdline, BootTimeout: 300 * time.Millisecond})
			if err != nil {
				t.Fatal(err)
			}
			defer vm.Close()
			_, err = vm.Boot(context.Background())
			if IsBoot(err) != tt.wantBoot || IsInfra(err) == tt.wantBoot {
				t.Fatalf("Boot err = %v (%T); want boot failure: %v", err, err, tt.wantBoot)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("Boot err = %v, want it to mention %q", err, tt.want)
			}
		})
	}
}

// A boot whose console keeps growing goes on past BootTimeout up to
// BootLimit; a quiet one is a hang at BootTimeout all the same, and
// without a BootLimit BootTimeout is the one deadline.
func TestBootLimitFollowsTheConsole(t *testing.T) {
	tests := []struct {
		name    string
		cmdline string
		limit   time.Duration
		hang    string        // "": boots
		within  time.Duration // the boot's end, boot or hang
	}{
		{"slow, printing, with a limit", "fake.slow=1s", 10 * time.Second, "", 5 * time.Second},
		{"slow, printing, no limit", "fake.slow=1s", 0, "no answer within 300ms", 900 * time.Millisecond},
		{"slow past the limit", "fake.slow=5s", 800 * time.Millisecond, "no answer within 800ms", 2 * time.Second},
		{"quiet, with a limit", "fake.hang", 10 * time.Second, "the console quiet for 300ms", 2 * time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := newFakePool(t, Config{})
			vm, err := p.Create(context.Background(), Spec{Kernel: fakeKernel(t), Cmdline: tt.cmdline,
				BootTimeout: 300 * time.Millisecond, BootLimit: tt.limit})
			if err != nil {
				t.Fatal(err)
			}
			defer vm.Close()
			start := time.Now()
			info, err := vm.Boot(context.Background())
			took := time.Since(start)
			switch {
			case tt.hang == "" && err != nil:
				t.Fatalf("Boot after %s: %v, want it booted", took, err)
			case tt.hang == "" && info.BootDuration < time.Second:
				t.Errorf("booted in %s, before the scripted 1s", info.BootDuration)
			case tt.hang != "" && (!IsBoot(err) || !strings.Contains(err.Error(), tt.hang)):
				t.Fatalf("Boot after %s: err = %v, want a hang mentioning %q", took, err, tt.hang)
			}
			if took > tt.within {
				t.Errorf("Boot took %s, want within %s", took, tt.within)
			}
		})
	}
}

func TestPoolLimit(t *testing.T) {
	p := newFakePool(t, Config{Limit: 1})
	k := fakeKernel(t)
	vm, err := p.Create(context.Background(), Spec{Kernel: k})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if _, err := p.Create(ctx, Spec{Kernel: k}); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("second Create with limit 1: err = %v, want deadline exceeded", err)
	}
	vm.Close()
	vm2, err := p.Create(context.Background(), Spec{Kernel: k})
	if err != nil {
		t.Fatalf("Create after Close freed the slot: %v", err)
	}
	vm2.Close()
}

func TestSpecErrors(t *testing.T) {
	p := newFakePool(t, Config{})
	for _, s := range []Spec{{}, {Kernel: "/no/such/bzImage"}, {Kernel: fakeKernel(t), Disks: []string{"/no/such.img"}}} {
		if _, err := p.Create(context.Background(), s); err == nil {
			t.Errorf("Create(%+v) succeeded, want an error", s)
		}
	}
	if _, err := New("vmware", Config{}); err == nil {
		t.Error("New(vmware) succeeded")
	}
}

// A request the guest never answers is a hang at the run deadline, and
// trouble on the console during a request is the kernel's fault.
func TestFakeRunDeadline(t *testing.T) {
	stuck := make(chan struct{})
	defer close(stuck)
	p := newFakePool(t, Config{RunSuite: func(ctx context.Context, req proto.Request) (any, error) {
		<-stuck
		return nil, nil
	}})
	vm, err := p.Create(context.Background(), Spec{Kernel: fakeKernel(t), RunTimeout: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer vm.Close()
	if _, err := vm.Boot(context.Background()); err != nil {
		t.Fatal(err)
	}
	_, err = vm.Do(context.Background(), proto.Request{Op: proto.OpRunSuite, Suite: "s"}, nil)
	var be *BootError
	if !errors.As(err, &be) || !strings.Contains(be.Reason, "hang: no answer to run-suite") {
		t.Fatalf("stuck run-suite: err = %v, want a hang BootError", err)
	}

	f, err := os.OpenFile(vm.(*machine).spec.ConsoleLog, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteString("[   9.0] BUG: kernel NULL pointer dereference, address: 0000000000000008\n")
	f.Close()
	_, err = vm.Do(context.Background(), proto.Request{Op: proto.OpRunSuite, Suite: "s"}, nil)
	if !errors.As(err, &be) || be.Reason != "oops" || !strings.Contains(string(be.Excerpt), "NULL pointer") {
		t.Fatalf("oops during a request: err = %v, want an oops BootError", err)
	}
}

// The caller's own deadline is not the kernel's hang.
func TestCallerDeadlineIsNotAHang(t *testing.T) {
	p := newFakePool(t, Config{})
	vm, err := p.Create(context.Background(), Spec{Kernel: fakeKernel(t), Cmdline: "fake.hang"})
	if err != nil {
		t.Fatal(err)
	}
	defer vm.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	_, err = vm.Boot(ctx)
	if !errors.Is(err, context.DeadlineExceeded) || IsBoot(err) {
		t.Errorf("Boot past the caller's deadline: err = %v (%T), want context.DeadlineExceeded and no BootError", err, err)
	}
}
