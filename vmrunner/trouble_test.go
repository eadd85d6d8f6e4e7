package vmrunner

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/patchbot/patchbot/vmrunner/proto"
	"github.com/patchbot/patchbot/vmrunner/report"
)

func bootFake(t *testing.T, cmdline string) Instance {
	t.Helper()
	p := newFakePool(t, Config{RunSuite: func(ctx context.Context, req proto.Request) (any, error) {
		return map[string]int{"round": req.Round}, nil
	}})
	vm, err := p.Create(context.Background(), Spec{Kernel: fakeKernel(t), Cmdline: cmdline})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { vm.Close() })
	if _, err := vm.Boot(context.Background()); err != nil {
		t.Fatal(err)
	}
	return vm
}

func round(n int) proto.Request {
	return proto.Request{Op: proto.OpRunSuite, Suite: "cache-contention", Round: n}
}

// An oops in a round ends it within seconds, not at the run deadline, as
// a BootError that carries the kernel's report and says which round.
func TestTroubleEndsTheRound(t *testing.T) {
	vm := bootFake(t, "fake.trouble=oops@2")
	if _, err := vm.Do(context.Background(), round(1), nil); err != nil {
		t.Fatalf("round 1: %v", err)
	}
	start := time.Now()
	_, err := vm.Do(context.Background(), round(2), nil)
	took := time.Since(start)
	var be *BootError
	if !errors.As(err, &be) || be.Report == nil {
		t.Fatalf("round 2: err = %v, want a BootError with a report", err)
	}
	if took > reportWait+time.Second {
		t.Errorf("the round ended %s after the oops, want within %s", took, reportWait)
	}
	if be.Reason != string(report.KindBUG) || be.Report.Title != "kernel BUG in squashfs_cache_get" ||
		be.Report.Location != "fs/squashfs/cache.c:71" {
		t.Errorf("reason %q, title %q, location %q", be.Reason, be.Report.Title, be.Report.Location)
	}
	if be.Op != proto.OpRunSuite || be.Suite != "cache-contention" || be.Round != 2 {
		t.Errorf("trouble placed at %s %s round %d", be.Op, be.Suite, be.Round)
	}
	if !strings.Contains(be.Error(), "kernel trouble during run-suite: kernel BUG in squashfs_cache_get") {
		t.Errorf("error text %q", be.Error())
	}
	// The fake kernel has no vmlinux: the report says so, and keeps its
	// frames as printed.
	if be.Report.Decoded != report.ErrNoVmlinux.Error() || len(be.Report.Frames) != 3 {
		t.Errorf("decoded %q, %d frames", be.Report.Decoded, len(be.Report.Frames))
	}
}

// A warning does not end the round: it is counted.
func TestWarningIsCounted(t *testing.T) {
	vm := bootFake(t, "fake.trouble=warn@1")
	for n := 1; n <= 2; n++ {
		if _, err := vm.Do(context.Background(), round(n), nil); err != nil {
			t.Fatalf("round %d: %v", n, err)
		}
	}
	ws, more := vm.Warnings()
	if len(ws) != 1 || more != 0 || ws[0].Count != 1 || ws[0].Report.Title != "WARNING in squashfs_cache_get" ||
		ws[0].Report.Message != "squashfs: scripted warning" {
		t.Fatalf("warnings %+v (more %d)", ws, more)
	}
}

// A reboot starts the kernel afresh, and the warnings of the boots before
// it still count: a warning printed in two boots counts 2.
func TestRebootKeepsTheWarnings(t *testing.T) {
	vm := bootFake(t, "fake.trouble=warn@1")
	for boot := 1; boot <= 2; boot++ {
		if boot > 1 {
			info, err := vm.Reboot(context.Background())
			if err != nil || info.KernelRelease != "fake" {
				t.Fatalf("reboot: %+v, %v", info, err)
			}
			if c := string(vm.Console()); strings.Contains(c, "scripted warning") {
				t.Errorf("the new boot's console holds the last boot's warning:\n%s", c)
			}
		}
		if _, err := vm.Do(context.Background(), round(1), nil); err != nil {
			t.Fatalf("boot %d, round 1: %v", boot, err)
		}
		ws, _ := vm.Warnings()
		if len(ws) != 1 || ws[0].Count != boot {
			t.Fatalf("after boot %d: warnings %+v, want 1 title counted %d", boot, ws, boot)
		}
	}
}

// A patched request that outlives Factor times the base's own time for
// it is a hang, said with what the base did; one within it is not.
func TestPaceHang(t *testing.T) {
	base := bootFake(t, "")
	patched := bootFake(t, "fake.trouble=hang@1")
	p := NewPace()
	p.Factor, p.Min = 3, 300*time.Millisecond
	if _, err := p.Base(base).Do(context.Background(), round(1), nil); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	_, err := p.Patched(patched).Do(context.Background(), round(1), nil)
	took := time.Since(start)
	var be *BootError
	if !errors.As(err, &be) || !strings.HasPrefix(be.Reason, "hang: no answer to run-suite cache-contention round 1, nor progress, within") ||
		!strings.Contains(be.Reason, "the base kernel's same request took") {
		t.Fatalf("err = %v, want a hang that says what the base did", err)
	}
	if took < p.Min || took > p.Min+2*time.Second {
		t.Errorf("the hang was called after %s, want about %s", took, p.Min)
	}
	if !Recheck(err) {
		t.Error("a hang is not rechecked against the base")
	}
	// A round the base has not run takes the longest of its kind.
	if _, err := p.Patched(base).Do(context.Background(), round(2), nil); err != nil {
		t.Errorf("a quick round 2 on a healthy kernel: %v", err)
	}
}

// progressDoer answers after total, sending a progress event every
// (none when every is 0), or gives up with the request's cancellation.
type progressDoer struct{ every, total time.Duration }

func (d progressDoer) Do(ctx context.Context, req proto.Request, onEvent func(proto.Event)) (json.RawMessage, error) {
	end := time.After(d.total)
	var tick <-chan time.Time
	if d.every > 0 {
		t := time.NewTicker(d.every)
		defer t.Stop()
		tick = t.C
	}
	for {
		select {
		case <-end:
			return json.RawMessage(`{}`), nil
		case <-tick:
			onEvent(proto.Event{ID: req.ID, Type: proto.EventProgress, Msg: "a workload measured"})
		case <-ctx.Done():
			return nil, context.Cause(ctx)
		}
	}
}

// A patched request far slower than the base's is no hang while it shows
// progress (a patch that makes every read wait for the disk); one as slow
// and silent is.
func TestPaceProgressIsNotAHang(t *testing.T) {
	p := NewPace()
	p.Factor, p.Min = 2, 300*time.Millisecond
	if _, err := p.Base(progressDoer{total: 50 * time.Millisecond}).Do(context.Background(), round(1), nil); err != nil {
		t.Fatal(err)
	}
	var events int
	if _, err := p.Patched(progressDoer{every: 100 * time.Millisecond, total: 1200 * time.Millisecond}).Do(context.Background(), round(1),
		func(proto.Event) { events++ }); err != nil || events < 5 {
		t.Errorf("a slow patched round that shows progress: %v after %d events, want its answer and the events passed on", err, events)
	}
	// Silent for 5 s: cut at the base's pace (300 ms here), long before;
	// a base slowed to over 2.5 s by a loaded host cannot pass it.
	_, err := p.Patched(progressDoer{total: 5 * time.Second}).Do(context.Background(), round(1), nil)
	if err == nil || !strings.Contains(err.Error(), "nor progress") {
		t.Errorf("a silent patched round as slow: %v, want a hang", err)
	}
}

// A patched request started before the base's (both kernels prepare at
// once) gets its deadline when the base's time is known.
func TestPaceWaitsForTheBase(t *testing.T) {
	base := bootFake(t, "")
	patched := bootFake(t, "fake.trouble=hang@1")
	p := NewPace()
	p.Factor, p.Min = 2, 200*time.Millisecond
	errc := make(chan error, 1)
	start := time.Now()
	go func() {
		_, err := p.Patched(patched).Do(context.Background(), round(1), nil)
		errc <- err
	}()
	time.Sleep(500 * time.Millisecond)
	if _, err := p.Base(base).Do(context.Background(), round(1), nil); err != nil {
		t.Fatal(err)
	}
	err := <-errc
	if !errors.As(err, new(*BootError)) || time.Since(start) < 500*time.Millisecond {
		t.Fatalf("err = %v after %s", err, time.Since(start))
	}
}

// lookDoer is a progressDoer the host can look into: spins says what it
// finds.
type lookDoer struct {
	progressDoer
	spins  bool
	looked *int
}

func (d lookDoer) spinning() (string, bool) {
	*d.looked++
	return "a vCPU spun in flock_lock_inode_wait while its clock ran at 1/19 of the host's", d.spins
}

// A silent patched request is looked into at the early limit: one that
// spins is a hang then, said with how it was seen; one that does not
// spin waits for the full limit, looked into once.
func TestPaceSpinIsCalledEarly(t *testing.T) {
	p := NewPace()
	p.Factor, p.Min, p.EarlyFactor, p.Early = 2, 1500*time.Millisecond, 1, 300*time.Millisecond
	if _, err := p.Base(progressDoer{total: 50 * time.Millisecond}).Do(context.Background(), round(1), nil); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		spins  bool
		at     time.Duration
		reason string
	}{
		{true, p.Early, "nor progress, within 0s, and a vCPU spun in flock_lock_inode_wait while its clock ran at 1/19 of the host's; the base kernel's same request took"},
		{false, p.Min, "nor progress, within 2s; the base kernel's same request took"},
	} {
		looked := 0
		start := time.Now()
		_, err := p.Patched(lookDoer{progressDoer{total: 5 * time.Second}, tt.spins, &looked}).Do(context.Background(), round(1), nil)
		took := time.Since(start)
		var h *hangCause
		if !errors.As(err, &h) || !strings.Contains(h.reason, tt.reason) {
			t.Errorf("spins %v: err %v, want a hang saying %q", tt.spins, err, tt.reason)
		}
		if took < tt.at || took > tt.at+time.Second || looked != 1 {
			t.Errorf("spins %v: called after %s, looked into %d times; want after about %s, looked into once", tt.spins, took, looked, tt.at)
		}
	}
}
