package vmrunner

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/patchbot/patchbot/vmrunner/proto"
	"github.com/patchbot/patchbot/vmrunner/report"
)

// hypervisor is what a backend does for one VM. Everything else — waiting
// for the agent, requests, telling the kernel's faults from ours — is
// shared, in machine.
type hypervisor interface {
	// start launches the VM with the console going to consolePath.
	start(ctx context.Context) (launch, error)
	// dial connects to the agent's port; called until it succeeds.
	dial(ctx context.Context) (io.ReadWriteCloser, error)
	// stopped is closed when the VM has stopped.
	stopped() <-chan struct{}
	// exitStatus, after stopped, tells whether the guest ended the VM
	// itself (reset or power-off: the kernel's doing) and what the
	// hypervisor printed.
	exitStatus() (guestEnded bool, err error, output []byte)
	// destroy stops the VM and frees everything it held; idempotent.
	destroy() error
}

// stoppedOf is stopped for a backend that makes done when it starts the
// VM and closes it when the VM has stopped, done guarded by mu: a VM that
// never started has stopped.
func stoppedOf(mu *sync.Mutex, done *chan struct{}) <-chan struct{} {
	mu.Lock()
	defer mu.Unlock()
	if *done == nil {
		return closedChan
	}
	return *done
}

var closedChan = func() chan struct{} { c := make(chan struct{}); close(c); return c }()

// handOver is dial for a backend that holds the host's end of the agent's
// channel in *c, guarded by mu: the first caller takes it, a later one
// (or one before there is a channel) gets the error none.
func handOver(mu *sync.Mutex, c *io.ReadWriteCloser, none string) (io.ReadWriteCloser, error) {
	mu.Lock()
	defer mu.Unlock()
	if *c == nil {
		return nil, errors.New(none)
	}
	a := *c
	*c = nil
	return a, nil
}

// launch describes a started VM.
type launch struct {
	accel string
	clock string // ClockHost or ICountClock's
	boot  string // BootPVH or BootLegacy
	repro string // what reproduces it by hand
	// probe, when non-zero, is how long the kernel has to show a sign of
	// life before the accelerator is deemed broken (see qemu's KVM check).
	probe time.Duration
}

// errDeadline is the cause of a boot or run deadline passing: the guest's
// hang, told apart from the caller's own deadline.
var errDeadline = errors.New("vm deadline")

// errNoProgress: the guest showed no kernel output within launch.probe.
var errNoProgress = errors.New("no kernel output")

// fallbacker is a hypervisor that can retry with a slower accelerator.
type fallbacker interface {
	fallback(reason string) bool
}

// machine is an Instance on some hypervisor.
type machine struct {
	backend string
	spec    Spec
	dir     string // removed on Close
	log     *slog.Logger
	hv      hypervisor
	con     *console
	release func() // gives the pool slot back

	mu        sync.Mutex // one request at a time
	ch        *channel   // the current connection to the agent, under mu
	booted    bool       // Boot succeeded once, under mu: Reboot may start it again, even after a reboot failed
	chMu      sync.Mutex // Close may run while Boot or Do holds mu
	chans     []*channel // every connection opened, closed by Close
	closeOnce sync.Once
	closeErr  error

	spunMu sync.Mutex
	spun   *report.Sampled // the look that found the guest spinning (Pace), for the hang's error
	clock  string          // the booted guest's Info.Clock, under spunMu (crawlFor)

	// earlier, earlierMore: the warnings of the consoles of boots before
	// this one (Reboot), under earlierMu (not mu, which a request holds
	// for as long as it runs).
	earlierMu   sync.Mutex
	earlier     []report.Warning
	earlierMore int
}

// Console returns the serial console output so far.
func (m *machine) Console() []byte { return m.con.bytes() }

// Boot launches the VM and waits for the agent's ready.
func (m *machine) Boot(ctx context.Context) (Info, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.ch != nil {
		return Info{}, fmt.Errorf("boot %s: already booted", m.spec.Name)
	}
	info, err := m.boot(ctx)
	if errors.Is(err, errNoProgress) || IsInfra(err) {
		// KVM that hangs the guest or fails to start: retry once with a
		// slower accelerator, if the backend has one.
		reason := fmt.Sprintf("under %s the kernel printed nothing within the probe time", info.Accel)
		if IsInfra(err) {
			reason = err.Error()
		}
		fb, ok := m.hv.(fallbacker)
		if ok && fb.fallback(reason) {
			m.hv.destroy()
			m.closeChannel()
			os.Remove(m.con.path)
			m.con = &console{path: m.con.path}
			info, err = m.boot(ctx)
		}
	}
	if err != nil {
		// A failed boot leaves nothing running; Close stays safe to call.
		m.hv.destroy()
		m.closeChannel()
		if errors.Is(err, errNoProgress) {
			err = &InfraError{Op: "boot " + m.spec.Name, Err: err}
		}
		return info, err
	}
	m.booted = true
	return info, nil
}

// Reboot boots the kernel afresh: the VM is destroyed and started again
// from its spec, as Boot started it, with a new console, and Reboot waits
// for the agent's ready. A reboot that failed leaves the VM to be
// rebooted again (a hung reboot is tried once more). What the guest held
// (a prepared suite, the page cache, where its memory went) is gone; the
// warnings of the earlier boots' consoles are kept, and Warnings counts
// them with this boot's.
func (m *machine) Reboot(ctx context.Context) (Info, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if !m.booted {
		return Info{}, fmt.Errorf("reboot %s: not booted", m.spec.Name)
	}
	ws, more := m.con.warnings()
	if err := m.hv.destroy(); err != nil {
		return Info{}, err
	}
	m.closeChannel()
	m.earlierMu.Lock()
	m.earlier, m.earlierMore = report.AddWarnings(m.earlier, m.earlierMore, ws, more)
	m.earlierMu.Unlock()
	m.con = &console{path: m.con.path} // start empties the log: its owner (libvirt's QEMU) may keep it
	info, err := m.boot(ctx)
	if err != nil {
		m.hv.destroy()
		m.closeChannel()
	}
	return info, err
}

func (m *machine) boot(ctx context.Context) (Info, error) {
	start := time.Now()
	l, err := m.hv.start(ctx)
	info := Info{Backend: m.backend, Accel: l.accel, Clock: l.clock, Repro: l.repro, Boot: l.boot}
	if info.Clock == "" {
		info.Clock = ClockHost
	}
	if err != nil {
		return info, err
	}
	m.log.Info("vm launched", "name", m.spec.Name, "backend", m.backend, "accel", l.accel, "clock", info.Clock, "boot", l.boot, "repro", l.repro)
	m.spunMu.Lock()
	m.clock = info.Clock
	m.spunMu.Unlock()

	// One deadline, or (BootLimit) a limit and a deadline on a quiet
	// console, which the loop below watches.
	ctx, cancel := context.WithTimeoutCause(ctx, m.bootLimit(), errDeadline)
	defer cancel()
	ctx, quiet := context.WithCancelCause(ctx)
	defer quiet(nil)
	conn, err := m.dialLoop(ctx)
	if err != nil {
		return info, m.blame(ctx, err, "waiting for the agent port", proto.Request{}, start)
	}
	m.ch = newChannel(conn)
	m.chMu.Lock()
	m.chans = append(m.chans, m.ch)
	m.chMu.Unlock()

	var probe <-chan time.Time
	if l.probe > 0 {
		t := time.NewTimer(l.probe)
		defer t.Stop()
		probe = t.C
	}
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case ev, ok := <-m.ch.events:
			if !ok {
				return info, m.blame(ctx, m.ch.readErr(), "waiting for the agent's ready", proto.Request{}, start)
			}
			if ev.Type == proto.EventReady {
				info.KernelRelease = ev.KernelRelease
				info.BootDuration = time.Since(start)
				m.log.Info("vm ready", "name", m.spec.Name, "kernel", ev.KernelRelease, "boot", info.BootDuration)
				return info, nil
			}
		case <-tick.C:
			if err := m.checkConsole(false, proto.Request{}, start); err != nil {
				return info, err
			}
			if m.bootLimit() > m.spec.BootTimeout && time.Since(later(start, m.con.lastGrew())) > m.spec.BootTimeout {
				quiet(&hangCause{reason: fmt.Sprintf("the console quiet for %s waiting for the agent's ready", m.spec.BootTimeout)})
			}
		case <-probe:
			if !m.con.alive() {
				return info, errNoProgress
			}
		case <-m.hv.stopped():
			return info, m.blame(ctx, nil, "waiting for the agent's ready", proto.Request{}, start)
		case <-ctx.Done():
			return info, m.blame(ctx, ctx.Err(), "waiting for the agent's ready", proto.Request{}, start)
		}
	}
}

// bootLimit is how long a boot may take at most: BootLimit, if longer
// than BootTimeout.
func (m *machine) bootLimit() time.Duration {
	return max(m.spec.BootTimeout, m.spec.BootLimit)
}

func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// dialLoop connects to the agent's port, which the hypervisor creates
// shortly after it starts.
func (m *machine) dialLoop(ctx context.Context) (io.ReadWriteCloser, error) {
	for {
		conn, err := m.hv.dial(ctx)
		if err == nil {
			return conn, nil
		}
		select {
		case <-m.hv.stopped():
			return nil, err
		case <-ctx.Done():
			return nil, fmt.Errorf("%w (last: %v)", ctx.Err(), err)
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// checkConsole returns a BootError for the kernel's first fatal report,
// once it is whole (console.trouble), its trace decoded; ended says the
// console will not grow. The console is scanned as it arrives, each byte
// once (console.go): a suite may run for long, and a guest may print
// without end. req is the request running (none at boot), since when.
func (m *machine) checkConsole(ended bool, req proto.Request, since time.Time) error {
	be := m.con.trouble(ended)
	if be == nil {
		return nil
	}
	be.at(req, since)
	if be.Report != nil {
		m.decode(be.Report)
		m.log.Warn("kernel trouble", "name", m.spec.Name, "op", req.Op, "suite", req.Suite, "round", req.Round,
			"title", be.Report.Title, "where", be.Report.Where())
	}
	return be
}

// vmlinux is the kernel's ELF with its debug information: Spec.Vmlinux,
// or the "vmlinux" beside the bzImage (where images keeps it).
func (m *machine) vmlinux() string {
	if m.spec.Vmlinux != "" {
		return m.spec.Vmlinux
	}
	if p := filepath.Join(filepath.Dir(m.spec.Kernel), "vmlinux"); p != m.spec.Kernel {
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	return ""
}

// decode turns a report's trace into function and file:line, from the
// kernel's own vmlinux.
func (m *machine) decode(r *report.Report) {
	if r == nil || len(r.Frames) == 0 || r.Decoded != "" {
		return
	}
	v := m.vmlinux()
	if v == "" {
		r.Decoded = report.ErrNoVmlinux.Error()
		return
	}
	report.Decode(v, r)
}

// Warnings are the kernel warnings (WARN_ON(), WARN()) its consoles showed
// since the first boot, each with its count and its first report, decoded; more
// counts warnings whose titles came after report.MaxWarnings others.
func (m *machine) Warnings() ([]report.Warning, int) {
	ws, more := m.con.warnings()
	m.earlierMu.Lock()
	ws, more = report.AddWarnings(m.earlier, m.earlierMore, ws, more)
	m.earlierMu.Unlock()
	var sym *report.Symbolizer
	for _, w := range ws {
		if len(w.Report.Frames) == 0 {
			continue
		}
		if sym == nil {
			v := m.vmlinux()
			if v == "" {
				w.Report.Decoded = report.ErrNoVmlinux.Error()
				continue
			}
			s, err := report.Open(v)
			if err != nil {
				w.Report.Decoded = err.Error()
				continue
			}
			defer s.Close()
			sym = s
		}
		sym.Decode(w.Report)
	}
	return ws, more
}

// blame turns a failure to reach or hear the agent into the right error:
// trouble on the console or a guest that ended the VM is the kernel's
// fault; a hypervisor that failed is ours; a deadline is a hang; the
// caller's cancellation is passed through.
func (m *machine) blame(ctx context.Context, cause error, doing string, req proto.Request, since time.Time) error {
	// Give QEMU a moment to flush the console of a dying guest.
	stopped := false
	select {
	case <-m.hv.stopped():
		stopped = true
	case <-time.After(200 * time.Millisecond):
	}
	// A VM that stopped, or a request that hit our own deadline, ends
	// the console: a report it holds is taken as it stands.
	ended := stopped || errors.Is(context.Cause(ctx), errDeadline)
	if err := m.checkConsole(ended, req, since); err != nil {
		return err
	}
	select {
	case <-m.hv.stopped():
		guestEnded, err, output := m.hv.exitStatus()
		if guestEnded {
			be := &BootError{Reason: "the VM stopped " + doing, Excerpt: m.con.tail()}
			be.at(req, since)
			return be
		}
		return &InfraError{Op: fmt.Sprintf("run %s (%s)", m.spec.Name, doing), Err: err, Output: output, running: true}
	default:
	}
	// Only our own deadline is a hang; the caller's deadline or
	// cancellation is passed through as it is.
	if errors.Is(context.Cause(ctx), errDeadline) {
		reason := fmt.Sprintf("hang: no answer within %s %s", m.bootLimit(), doing)
		var h *hangCause
		if errors.As(context.Cause(ctx), &h) {
			reason = "hang: " + h.reason
		}
		m.spunMu.Lock()
		sampled := m.spun // the look that called the hang, if one did
		m.spun = nil
		m.spunMu.Unlock()
		if sampled == nil {
			sampled = m.lookAtHang()
		}
		be := &BootError{Reason: reason, Excerpt: m.con.tail(), Sampled: sampled}
		be.at(req, since)
		if s := be.Sampled; s != nil {
			where := "no vCPU busy in the kernel"
			if s.Stack != nil {
				where = s.Stack.Where()
			}
			m.log.Warn("kernel trouble", "name", m.spec.Name, "op", req.Op, "suite", req.Suite, "round", req.Round,
				"title", "hang", "where", where)
		}
		return be
	}
	if ctx.Err() != nil {
		return fmt.Errorf("%s: %s: %w", m.spec.Name, doing, ctx.Err())
	}
	return &InfraError{Op: fmt.Sprintf("%s: %s", m.spec.Name, doing), Err: cause, running: true}
}

// Do sends req and gathers its events up to "done".
func (m *machine) Do(ctx context.Context, req proto.Request, onEvent func(proto.Event)) (json.RawMessage, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.ch == nil {
		return nil, fmt.Errorf("%s %s: the VM is not booted", req.Op, m.spec.Name)
	}
	if req.ID == "" {
		req.ID = fmt.Sprintf("%s-%d", req.Op, time.Now().UnixNano())
	}
	// A wedged guest stops reading and the write blocks: send aside, so
	// the console and the deadline are still watched.
	sent := make(chan error, 1)
	ch := m.ch
	start := time.Now()
	go func() { sent <- ch.send(req) }()
	runCtx, cancel := context.WithTimeoutCause(ctx, m.spec.RunTimeout, errDeadline)
	defer cancel()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	var (
		result   json.RawMessage
		guestErr error
	)
	for {
		select {
		case err := <-sent:
			if err != nil {
				return nil, m.blameRun(runCtx, err, req, start)
			}
		case ev, ok := <-m.ch.events:
			if !ok {
				return nil, m.blameRun(runCtx, m.ch.readErr(), req, start)
			}
			if ev.ID != req.ID {
				continue // a repeated "ready", or a late event of an abandoned request
			}
			if onEvent != nil {
				onEvent(ev)
			}
			switch ev.Type {
			case proto.EventResult:
				result = ev.Data
			case proto.EventError:
				guestErr = &GuestError{Op: req.Op, Msg: ev.Msg}
			case proto.EventDone:
				return result, guestErr
			}
		case <-tick.C:
			if req.Op == proto.OpPowerOff {
				continue // a kernel going down may print anything
			}
			if err := m.checkConsole(false, req, start); err != nil {
				return nil, err
			}
		case <-m.hv.stopped():
			if req.Op == proto.OpPowerOff {
				return nil, nil // it may stop before "done" reaches us
			}
			return nil, m.blameRun(runCtx, nil, req, start)
		case <-runCtx.Done():
			return nil, m.blameRun(runCtx, runCtx.Err(), req, start)
		}
	}
}

func (m *machine) blameRun(ctx context.Context, cause error, req proto.Request, start time.Time) error {
	err := m.blame(ctx, cause, "running "+req.Op, req, start)
	var be *BootError
	var h *hangCause
	if errors.As(err, &be) && strings.HasPrefix(be.Reason, "hang:") && !errors.As(context.Cause(ctx), &h) {
		be.Reason = fmt.Sprintf("hang: no answer to %s within %s", req.Op, m.spec.RunTimeout)
	}
	return err
}

func (m *machine) closeChannel() {
	if m.ch != nil {
		m.ch.Close()
		m.ch = nil
	}
}

// Close destroys the VM, closes the channel and removes the work directory.
func (m *machine) Close() error {
	m.closeOnce.Do(func() {
		m.closeErr = m.hv.destroy()
		m.chMu.Lock()
		for _, ch := range m.chans {
			ch.Close()
		}
		m.chMu.Unlock()
		if m.dir != "" {
			os.RemoveAll(m.dir)
		}
		if m.release != nil {
			m.release()
		}
	})
	return m.closeErr
}

// pool is a Pool over one kind of hypervisor, with the concurrency limit
// and the bookkeeping that lets Close reap everything.
type pool struct {
	backend string
	cfg     Config
	slots   chan struct{}
	newHV   func(spec Spec, dir string) (hypervisor, error)
	onClose func() error // the backend's own cleanup (e.g. libvirt connection)

	mu     sync.Mutex
	live   map[*machine]bool
	closed bool
}

func newPool(backend string, cfg Config, newHV func(Spec, string) (hypervisor, error)) *pool {
	return &pool{backend: backend, cfg: cfg, slots: make(chan struct{}, cfg.Limit), newHV: newHV, live: map[*machine]bool{}}
}

// Create waits for a free slot, then prepares (but does not start) a VM.
func (p *pool) Create(ctx context.Context, s Spec) (Instance, error) {
	s.setDefaults()
	if err := s.check(); err != nil {
		return nil, err
	}
	select {
	case p.slots <- struct{}{}:
	case <-ctx.Done():
		return nil, fmt.Errorf("create %s: waiting for a free VM slot: %w", s.Name, ctx.Err())
	}
	release := func() { <-p.slots }
	p.mu.Lock()
	closed := p.closed
	p.mu.Unlock()
	if closed {
		release()
		return nil, fmt.Errorf("create %s: the pool is closed", s.Name)
	}
	// 0700: the console and the agent's channel are the VM's alone (the
	// libvirt backend gives the directory to QEMU's user).
	dir, err := os.MkdirTemp(p.cfg.WorkDir, "patchbot-vm-"+safeName(s.Name)+"-")
	if err != nil {
		release()
		return nil, &InfraError{Op: "create " + s.Name, Err: err}
	}
	if s.ConsoleLog == "" {
		s.ConsoleLog = filepath.Join(dir, "console.log")
	}
	hv, err := p.newHV(s, dir)
	if err != nil {
		os.RemoveAll(dir)
		release()
		return nil, err
	}
	m := &machine{backend: p.backend, spec: s, dir: dir, log: p.cfg.Log, hv: hv, con: &console{path: s.ConsoleLog}}
	m.release = func() {
		p.mu.Lock()
		delete(p.live, m)
		p.mu.Unlock()
		release()
	}
	p.mu.Lock()
	p.live[m] = true
	p.mu.Unlock()
	return m, nil
}

// Close closes every instance still open.
func (p *pool) Close() error {
	p.mu.Lock()
	p.closed = true
	var ms []*machine
	for m := range p.live {
		ms = append(ms, m)
	}
	p.mu.Unlock()
	var errs []error
	for _, m := range ms {
		errs = append(errs, m.Close())
	}
	if p.onClose != nil {
		errs = append(errs, p.onClose())
	}
	return errors.Join(errs...)
}

func safeName(s string) string {
	return strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_' {
			return r
		}
		return '_'
	}, s)
}
