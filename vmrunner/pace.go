package vmrunner

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"strings"
	"sync"
	"time"

	"github.com/patchbot/patchbot/vmrunner/proto"
)

// A patched kernel that hangs without reporting it (a livelock, a loop
// that yields, a request lost in the kernel) would hold its round until
// Spec.RunTimeout, half an hour. The base kernel ran the same request just
// before or beside it, in a VM of the same shape on the same host: a
// patched request that goes a generous multiple of the base's own time
// without an answer or a sign of progress (any event of the request: the
// suites send one after each workload they measure) is a hang of the
// patched kernel, reported with the console's last lines and what the
// base did. The multiple is generous, and progress restarts it, because a
// patch may make a workload slower, and a slower workload is a regression
// to measure, not a hang: on the panel the slowest patched round took
// 3.05 times its base round in cache-contention on real time, and
// readahead-off's readahead rounds on instruction-counted time 16 times
// and more (104 s against 6.5 s: every page a read of its own, each waiting
// for the host's emulated disk), which a limit on the whole request called
// a hang.

// A guest can be seen to spin sooner (monitor.go): the host looks into a
// patched request that has gone EarlyFactor times the base's time, and at
// least Early, without progress; a guest busy in the kernel in most
// samples while its clock crawls (below 1/5 of the host's: under
// instruction-counted time a vCPU spinning on PAUSE all but stops it, and
// with it the kernel's own watchdogs) is hung, and called so then. A slow
// guest is not: a kernel path made longer runs the guest's clock as
// before, and a guest waiting for its disk is idle. Anything else waits
// for the full limit.

// Defaults of a Pace.
const (
	DefaultHangFactor      = 6
	DefaultHangMin         = 3 * time.Minute
	DefaultHangEarly       = time.Minute
	DefaultHangEarlyFactor = 3
)

// crawlRate is the guest's clock against the host's below which a guest
// busy in the kernel is taken to spin, at ICountShift (a spin on PAUSE
// was measured at 1/19 of the host's, docs/vmrunner.md).
const crawlRate = 0.2

// crawlFor is crawlRate for a guest of the given clock. At another
// shift the guest's clock runs 2^(shift - ICountShift) times as fast for
// the same instructions, a spinning guest's and a working one's alike: at
// shift 0 a quarter as fast, so a working guest would crawl by shift 2's
// measure, and the rate scales with the shift. Real time never crawls.
func crawlFor(clock string) float64 {
	shift, ok := ICountShiftOf(clock)
	if !ok {
		return crawlRate
	}
	return math.Ldexp(crawlRate, shift-ICountShift)
}

// spinner is a guest the host can look into (machine): whether it spins,
// and a line saying how it was seen.
type spinner interface {
	spinning() (how string, spins bool)
}

// Doer is what runs a request on a guest: an Instance, or a paced one.
type Doer interface {
	Do(ctx context.Context, req proto.Request, onEvent func(proto.Event)) (json.RawMessage, error)
}

// Pace times the base kernel's requests and gives the patched kernel's the
// deadline they imply: Factor times the base's time for the same request
// (the same op, suite and round; the longest of the op and suite when
// the base did not run that round), and at least Min. A request the base
// has not run yet (both kernels prepare at once) gets its deadline as
// soon as the base's is known. The zero value is not usable: NewPace.
type Pace struct {
	Factor float64
	Min    time.Duration
	// A guest that can be looked into is, once without progress for
	// EarlyFactor times the base's time and at least Early, and called
	// hung if it spins; Early 0 never looks. The look tells a spin from
	// a slow kernel, so it may come sooner than the limit.
	EarlyFactor float64
	Early       time.Duration

	mu      sync.Mutex
	took    map[string]time.Duration // op/suite/round -> the base's time
	longest map[string]time.Duration // op/suite -> the base's longest
	changed chan struct{}            // closed and replaced when took grows
}

// NewPace is a Pace with the default factor and floor.
func NewPace() *Pace {
	return &Pace{Factor: DefaultHangFactor, Min: DefaultHangMin, EarlyFactor: DefaultHangEarlyFactor, Early: DefaultHangEarly,
		took: map[string]time.Duration{}, longest: map[string]time.Duration{}, changed: make(chan struct{})}
}

func paceKeys(req proto.Request) (round, kind string) {
	kind = req.Op + "/" + req.Suite
	return fmt.Sprintf("%s/%d", kind, req.Round), kind
}

// Base wraps the base kernel's guest: its requests are timed.
func (p *Pace) Base(g Doer) Doer { return &paced{p: p, g: g, base: true} }

// Patched wraps the patched kernel's guest: its requests get the base's
// deadline.
func (p *Pace) Patched(g Doer) Doer { return &paced{p: p, g: g} }

type paced struct {
	p    *Pace
	g    Doer
	base bool
}

func (d *paced) Do(ctx context.Context, req proto.Request, onEvent func(proto.Event)) (json.RawMessage, error) {
	if d.base {
		start := time.Now()
		out, err := d.g.Do(ctx, req, onEvent)
		if err == nil {
			d.p.record(req, time.Since(start))
		}
		return out, err
	}
	if req.Op == proto.OpPowerOff {
		return d.g.Do(ctx, req, onEvent)
	}
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	done := make(chan struct{})
	defer close(done)
	alive := make(chan struct{}, 1)
	look, _ := d.g.(spinner)
	go d.p.watch(req, time.Now(), cancel, done, alive, look)
	return d.g.Do(ctx, req, func(ev proto.Event) {
		select {
		case alive <- struct{}{}:
		default:
		}
		if onEvent != nil {
			onEvent(ev)
		}
	})
}

func (p *Pace) record(req proto.Request, took time.Duration) {
	round, kind := paceKeys(req)
	p.mu.Lock()
	defer p.mu.Unlock()
	p.took[round] = took
	p.longest[kind] = max(p.longest[kind], took)
	close(p.changed)
	p.changed = make(chan struct{})
}

// limit is the deadline of a patched request and what it comes from;
// ok is false while the base has not run it.
func (p *Pace) limit(req proto.Request) (limit, factored time.Duration, why string, changed <-chan struct{}, ok bool) {
	round, kind := paceKeys(req)
	p.mu.Lock()
	defer p.mu.Unlock()
	base, same := p.took[round]
	if !same {
		base = p.longest[kind]
	}
	if base == 0 {
		return 0, 0, "", p.changed, false
	}
	what := req.Op
	if req.Suite != "" {
		what += " " + req.Suite
	}
	if req.Round > 0 {
		what += fmt.Sprintf(" round %d", req.Round)
	}
	factored = time.Duration(p.Factor * float64(base))
	limit = max(factored, p.Min)
	did := fmt.Sprintf("the base kernel's same request took %s", base.Round(100*time.Millisecond))
	if !same {
		did = fmt.Sprintf("the base kernel's longest %s took %s", kind, base.Round(100*time.Millisecond))
	}
	why = fmt.Sprintf("no answer to %s, nor progress, within %s; %s in a VM of the same shape (a hang is %g times the base's time without progress, at least %s)",
		what, limit.Round(time.Second), did, p.Factor, p.Min)
	return limit, factored, why, p.changed, true
}

// watch cancels a patched request (cancel) with a hang cause once it
// goes its limit since it started or last showed progress (alive), or,
// when it can be looked into (look), its early limit spinning; done ends
// the watch.
func (p *Pace) watch(req proto.Request, start time.Time, cancel context.CancelCauseFunc, done, alive <-chan struct{}, look spinner) {
	looked := false
	for {
		limit, factored, why, changed, ok := p.limit(req)
		if !ok {
			select {
			case <-changed:
				continue
			case <-alive:
				start = time.Now()
				continue
			case <-done:
				return
			}
		}
		at := limit
		early := max(time.Duration(float64(factored)*p.EarlyFactor/p.Factor), p.Early)
		if look != nil && !looked && p.Early > 0 && early < limit {
			at = early
		}
		t := time.NewTimer(time.Until(start.Add(at)))
		select {
		case <-alive:
			t.Stop()
			start, looked = time.Now(), false
			continue
		case <-t.C:
			if at == limit {
				cancel(&hangCause{reason: why})
				return
			}
			looked = true
			if how, spins := look.spinning(); spins {
				cancel(&hangCause{reason: p.spinReason(req, at, how)})
				return
			}
		case <-done:
			t.Stop()
			return
		}
	}
}

// spinReason is the hang cause of a guest seen spinning after long
// without progress.
func (p *Pace) spinReason(req proto.Request, after time.Duration, how string) string {
	_, _, why, _, _ := p.limit(req)
	// why begins "no answer to X, nor progress, within LIMIT; the base ..."
	_, rest, _ := strings.Cut(why, "; ")
	what := req.Op
	if req.Suite != "" {
		what += " " + req.Suite
	}
	if req.Round > 0 {
		what += fmt.Sprintf(" round %d", req.Round)
	}
	return fmt.Sprintf("no answer to %s, nor progress, within %s, and %s; %s", what, after.Round(time.Second), how, rest)
}

// hangCause is a request's context cancelled for a hang: machine.blame
// takes it for its own deadline (errDeadline), with the reason.
type hangCause struct{ reason string }

func (h *hangCause) Error() string        { return "hang: " + h.reason }
func (h *hangCause) Is(target error) bool { return target == errDeadline }
