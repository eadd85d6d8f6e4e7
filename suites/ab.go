package suites

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/patchbot/patchbot/blame"
	"github.com/patchbot/patchbot/vmrunner/proto"
)

// Guest runs requests on a booted VM's agent; vmrunner.Instance is one.
// Declared here so that this package does not depend on vmrunner (it is
// linked into the agent).
type Guest interface {
	Do(ctx context.Context, req proto.Request, onEvent func(proto.Event)) (json.RawMessage, error)
}

// Side is one kernel of a comparison: a label ("base", "patched") and the
// guest that runs it.
type Side struct {
	Label string
	// Kernel says who is to blame when the side fails (base: the
	// infrastructure; patched: the patch). Empty blames nobody in
	// particular: a failure is the infrastructure's.
	Kernel blame.Kernel
	Guest  Guest
	Accel  string // from the boot, for the Result
	Clock  string // the guest's time, from the boot (vmrunner.Info.Clock)
	// Params are extra request parameters, e.g. ParamImage = "/dev/vda".
	Params map[string]string
	// Done are the side's rounds measured before, when the run goes on
	// from them (RunAB); nil for a fresh run.
	Done *Result
	// Reboot boots the side's kernel afresh in its guest (a profile with
	// Params.Reboot: before every round but the first); nil when it
	// cannot, and then such a profile is refused.
	Reboot func(ctx context.Context) error
}

// Stopping says when the rounds of an A/B run stop: the fewest and the
// most rounds a side, and, between them, after each round, whether the
// evidence is enough. The statistics behind it are package judge's
// (judge.Rounds); Fixed is a number of rounds set in advance.
type Stopping interface {
	// Bounds are the fewest and the most rounds a side (round numbers,
	// for a run that goes on from earlier rounds).
	Bounds() (min, max int)
	// Stop is asked after every round from the fewest on while the most
	// is not reached, with one Result per side so far (in the order of
	// the sides): why the rounds stop (StopSettled, StopFutile), or "" to
	// go on.
	Stop(sides []*Result) string
	// Plan names the rule, as every Result records it (Result.Plan), so
	// that judging the results again applies it; "" for none.
	Plan() string
}

// Fixed runs exactly that many rounds on every side.
type Fixed int

// Bounds are n and n.
func (n Fixed) Bounds() (int, int) { return int(n), int(n) }

// Stop never stops early.
func (Fixed) Stop([]*Result) string { return "" }

// Plan is "": a fixed number of rounds records no rule.
func (Fixed) Plan() string { return "" }

// Quiet is how RunAB keeps the host quiet around the rounds and records
// its load: the readings, what counts as busy, how often a busy round is
// run again, how long to wait for a busy host, and the host's calibration.
// The zero value reads nothing and repeats nothing.
type Quiet struct {
	// Host reads the load of the host that drives the rounds, before and
	// after every round; nil records none.
	Host func() (HostLoad, error)
	// Busy says whether a reading shows the host too busy for a round to
	// count (nil: DefaultBusy). A round is busy when the reading before or
	// after it is. A busy round is run again, up to Repeats times in all
	// (0: the most rounds a side, negative: never); one beyond that is
	// kept and flagged (Round.Busy), and the results are marked noisy
	// (Result.Noisy).
	Busy    func(HostLoad) bool
	Repeats int
	// Calibrate, when set, times the host before the first round; its
	// reading is recorded in every Result (Result.Calibration).
	Calibrate func() (Calibration, error)
	// Wait is how long to wait, before a round, for a busy host to become
	// quiet (reading it every quietPoll) before running the round anyway;
	// 0 does not wait.
	Wait time.Duration
}

// HostQuiet is the pipeline's quiet on this machine: the host's load read
// around every round (ReadHostLoad over a quarter of a second), a busy
// round run again up to BusyRepeats times, up to a minute's wait for a
// busy host, and the host calibrated before the rounds.
func HostQuiet() Quiet {
	return Quiet{Host: ReadHostLoad(250 * time.Millisecond), Repeats: BusyRepeats, Calibrate: Calibrate, Wait: time.Minute}
}

// quietPoll is how often a busy host is read again while waiting for it.
var quietPoll = 2 * time.Second

func checkBounds(stop Stopping) (min, max int, err error) {
	min, max = stop.Bounds()
	if min < 1 {
		return 0, 0, fmt.Errorf("plan: min %d rounds: want at least 1", min)
	}
	if max < min {
		return 0, 0, fmt.Errorf("plan: max %d rounds is below min %d", max, min)
	}
	return min, max, nil
}

// Why the rounds of a run ended (Result.Stop).
const (
	StopFixed   = "fixed"   // a fixed number of rounds
	StopSettled = "settled" // the plan's rule was satisfied
	StopMax     = "max"     // the rule was not satisfied by the maximum
	StopFutile  = "futile"  // more rounds could not satisfy the rule
)

// HostLoad is one reading of the load of the host that drives the rounds.
type HostLoad struct {
	Time time.Time `json:"time"`
	// Load1 is the 1-minute load average (/proc/loadavg): the record a
	// person recognises, though it lags by a minute.
	Load1 float64 `json:"load1"`
	// Runnable is the number of tasks runnable at the reading, the reader
	// not counted (/proc/loadavg's fourth field).
	Runnable int `json:"runnable"`
	// Busy is the share of the host's CPU time, over all its CPUs, spent
	// outside idle and iowait during the reading's window (/proc/stat): 0.5
	// is one of two cores busy. Between rounds the guests are idle, so this
	// is what else runs on the host.
	Busy float64 `json:"busy"`
	// Window is how long Busy was measured over, in seconds.
	Window float64 `json:"window"`
}

// BusyShare is the host CPU share from which DefaultBusy calls the host
// busy: a quarter of its CPU time, half a core of this 2-core machine.
// Idle guests under TCG and this process take a few percent.
const BusyShare = 0.25

// DefaultBusy calls the host busy from BusyShare of its CPU time:
// something else (a build, git gc, another VM) runs beside the rounds.
func DefaultBusy(l HostLoad) bool { return l.Busy >= BusyShare }

// Round records one round on one kernel.
type Round struct {
	N       int       `json:"n"`
	Started time.Time `json:"started"`
	Seconds float64   `json:"seconds"`
	// Before and After are the host's load around the round (Quiet.Host).
	Before *HostLoad `json:"before,omitempty"`
	After  *HostLoad `json:"after,omitempty"`
	// Busy: the host was busy around the round (Quiet.Busy).
	Busy bool `json:"busy,omitempty"`
	// Repeated: the round was busy and run again; its samples are not in
	// the Result.
	Repeated bool `json:"repeated,omitempty"`
}

// RunAB runs rounds of cfg on every side, interleaved (A B A B …, so that
// drift hits both sides alike), for as many rounds as stop says, keeping
// the host as quiet says, and returns one Result per side with the samples
// of all rounds, the record of every round and why the rounds stopped.
// Progress gets a line per round and side.
//
// A side with Done goes on from those rounds: the new ones are numbered on
// from the last round of any side, judged with them and added to them, and
// no guest is prepared again. A side without a Guest is not run: its Done
// stands for it (base rounds kept from an earlier run).
func RunAB(ctx context.Context, cfg *Config, sides []Side, stop Stopping, quiet Quiet, progress io.Writer) ([]*Result, error) {
	if len(sides) == 0 {
		return nil, errors.New("no kernels to run")
	}
	lo, hi, err := checkBounds(stop)
	if err != nil {
		return nil, err
	}
	if progress == nil {
		progress = io.Discard
	}
	a := &abRun{ctx: ctx, cfg: cfg, sides: sides, quiet: quiet, busy: quiet.Busy, repeats: quiet.Repeats, progress: progress,
		start: time.Now(), of: strconv.Itoa(hi), fresh: make([]*Result, len(sides)), records: make([][]Round, len(sides)),
		prepared: make([]Prepared, len(sides))}
	if a.busy == nil {
		a.busy = DefaultBusy
	}
	if a.repeats == 0 {
		a.repeats = hi
	}
	a.repeats = max(0, a.repeats)
	sequential := hi > lo
	why := StopFixed
	if sequential {
		a.of = "≤" + a.of
		why = StopMax
	}
	n := lastRound(sides)
	var calib *Calibration
	if quiet.Calibrate != nil && n == 0 {
		k, err := quiet.Calibrate()
		if err != nil {
			fmt.Fprintf(progress, "calibrating the host: %v\n", err)
		} else {
			calib = &k
			fmt.Fprintf(progress, "host calibration: %s in %.1f ms (best of %d)\n", k.What, k.Seconds*1000, k.Repeats)
		}
	}
	if n == 0 {
		if a.prepared, err = prepare(ctx, cfg, sides); err != nil {
			return nil, err
		}
		fmt.Fprintf(progress, "%s prepared %s in %s\n",
			cfg.Suite, plural(len(sides), "guest"), time.Since(a.start).Round(100*time.Millisecond))
	}
	if cfg.Params.Reboot {
		for _, s := range sides {
			if s.Guest != nil && s.Reboot == nil {
				return nil, fmt.Errorf("%s %s: the profile boots each round afresh, and %s's guest cannot reboot", cfg.Suite, cfg.Profile, s.Label)
			}
		}
	}
	a.together = counted(sides)
	if a.together {
		fmt.Fprintf(progress, "%s: the guests keep instruction-counted time, so their rounds run at once and the host's load does not repeat them\n", cfg.Suite)
	}
	for n < hi {
		n++
		if err := a.round(n); err != nil {
			return a.fresh, err
		}
		if !sequential || n < lo {
			continue
		}
		if w := stop.Stop(soFar(sides, a.fresh)); w == StopSettled || w == StopFutile && n < hi {
			why = w
			break
		}
	}
	for i, r := range a.fresh {
		if r == nil {
			continue
		}
		for k, v := range a.prepared[i].Phases {
			if r.Phases == nil {
				r.Phases = map[string]float64{}
			}
			r.Phases[k] += v
		}
		r.Notes["rounds"] = strconv.Itoa(n)
		r.Plan = stop.Plan()
		r.Stop = why
		r.Rounds = a.records[i]
		r.Calibration = calib
		for _, rd := range a.records {
			for _, x := range rd {
				r.Noisy = r.Noisy || x.Busy && !x.Repeated
			}
		}
	}
	out := soFar(sides, a.fresh)
	for _, r := range out {
		r.Plan, r.Stop = stop.Plan(), why
	}
	return out, nil
}

// abRun is one RunAB call's state: each side's rounds so far, their
// records, and the host's load as last read.
type abRun struct {
	ctx      context.Context
	cfg      *Config
	sides    []Side
	quiet    Quiet
	busy     func(HostLoad) bool
	repeats  int // busy rounds that may still be run again
	together bool
	progress io.Writer
	start    time.Time
	of       string    // the rounds to run, for progress: "5" or "≤6"
	last     *HostLoad // read after the last round run in turn
	fresh    []*Result
	records  [][]Round
	prepared []Prepared // what preparing and rebooting each side took
	// The round being run is boots parts on every side, each on a boot of
	// its own (Params.Boots; without it one part, on the boot before):
	// its parts so far, a side's each.
	parts    [][]*Result
	partRecs [][]Round
}

// round runs round n on every side: each of its parts, rebooting the
// sides before every part but a run's very first when the profile boots
// afresh, and folds them into the round.
func (a *abRun) round(n int) error {
	boots := a.cfg.Params.boots()
	a.parts, a.partRecs = make([][]*Result, len(a.sides)), make([][]Round, len(a.sides))
	defer a.done()
	for part := 1; part <= boots; part++ {
		label := ""
		if boots > 1 {
			label = fmt.Sprintf(" boot %d/%d", part, boots)
		}
		if a.cfg.Params.Reboot && (n > 1 || part > 1) {
			again, err := reboot(a.ctx, a.cfg, a.sides, a.progress)
			for i, p := range again {
				a.prepared[i] = addPhases(a.prepared[i], p)
			}
			if err != nil {
				return err
			}
		}
		run := a.inTurn
		if a.together {
			run = a.atOnce
		}
		if err := run(n, label); err != nil {
			return err
		}
	}
	return nil
}

// done folds the parts run so far into the round: one record a side that
// ran any, and its samples if it ran them all.
func (a *abRun) done() {
	for i := range a.sides {
		if len(a.partRecs[i]) > 0 {
			a.records[i] = append(a.records[i], joinRecords(a.partRecs[i]))
		}
		if len(a.parts[i]) == a.cfg.Params.boots() {
			a.fresh[i] = merge(a.fresh[i], FoldBoots(a.parts[i]))
		}
	}
}

// atOnce runs a part of round n on every side at once.
func (a *abRun) atOnce(n int, label string) error {
	res, recs, err := roundTogether(a.ctx, a.cfg, a.sides, n, a.read)
	for i, rec := range recs {
		if rec == nil {
			continue
		}
		fmt.Fprintf(a.progress, "%s round %d/%s%s %-8s %6.1fs  (%s elapsed)\n",
			a.cfg.Suite, n, a.of, label, a.sides[i].Label, rec.Seconds, time.Since(a.start).Round(time.Second))
		a.partRecs[i] = append(a.partRecs[i], *rec)
		if res[i] != nil {
			a.parts[i] = append(a.parts[i], res[i])
		}
	}
	return err
}

// inTurn runs a part of round n on each side in turn, again while the
// host was busy around it and repeats are left.
func (a *abRun) inTurn(n int, label string) error {
	for i, s := range a.sides {
		if s.Guest == nil {
			continue
		}
		for {
			b, err := a.before()
			if err != nil {
				return err
			}
			rec := Round{N: n, Started: time.Now().UTC(), Before: b}
			res, err := runOne(a.ctx, a.cfg, s, n)
			rec.Seconds = time.Since(rec.Started).Seconds()
			if err != nil {
				return err
			}
			rec.After = a.read()
			a.last = rec.After
			rec.Busy = rec.Before != nil && a.busy(*rec.Before) || rec.After != nil && a.busy(*rec.After)
			note := ""
			if rec.Busy {
				rec.Repeated = a.repeats > 0
				note = "  host busy (" + busyText(rec) + "): kept, flagged"
				if rec.Repeated {
					note = "  host busy (" + busyText(rec) + "): repeating"
				}
			}
			fmt.Fprintf(a.progress, "%s round %d/%s%s %-8s %6.1fs  (%s elapsed)%s\n",
				a.cfg.Suite, n, a.of, label, s.Label, rec.Seconds, time.Since(a.start).Round(time.Second), note)
			if rec.Repeated {
				// A repeated part is on the record as a round of its own,
				// as a repeated round always was.
				a.records[i] = append(a.records[i], rec)
				a.repeats--
				continue
			}
			a.partRecs[i] = append(a.partRecs[i], rec)
			a.parts[i] = append(a.parts[i], res)
			break
		}
	}
	return nil
}

// read is the host's load now, nil if it cannot be read.
func (a *abRun) read() *HostLoad {
	if a.quiet.Host == nil {
		return nil
	}
	l, err := a.quiet.Host()
	if err != nil {
		fmt.Fprintf(a.progress, "reading the host's load: %v\n", err)
		return nil
	}
	return &l
}

// before is the host's load before a round run in turn: the reading
// after the last one, unless it was busy; then the host is read again,
// and waited for.
func (a *abRun) before() (*HostLoad, error) {
	if a.last != nil && !a.busy(*a.last) {
		return a.last, nil
	}
	l := a.read()
	for waited := time.Duration(0); l != nil && a.busy(*l) && waited < a.quiet.Wait; waited += quietPoll {
		select {
		case <-a.ctx.Done():
			return nil, a.ctx.Err()
		case <-time.After(quietPoll):
		}
		l = a.read()
	}
	return l, nil
}

// joinRecords is the record of a round run in parts (Params.Boots): from
// the first part's start and load to the last one's, the parts' seconds
// summed, busy if any part was.
func joinRecords(parts []Round) Round {
	out := parts[0]
	out.Seconds = 0
	for _, p := range parts {
		out.Seconds += p.Seconds
		out.Busy = out.Busy || p.Busy
	}
	out.After = parts[len(parts)-1].After
	return out
}

// lastRound is the last round any side has done, 0 for a fresh run.
func lastRound(sides []Side) int {
	n := 0
	for _, s := range sides {
		if s.Done != nil {
			for _, rd := range s.Done.Rounds {
				n = max(n, rd.N)
			}
		}
	}
	return n
}

// soFar is each side's rounds so far: those done before and the fresh
// ones, joined.
func soFar(sides []Side, fresh []*Result) []*Result {
	out := make([]*Result, len(sides))
	for i, s := range sides {
		switch {
		case s.Guest == nil:
			held := *s.Done
			out[i] = &held
		case s.Done != nil && fresh[i] != nil:
			out[i] = join(s.Done, fresh[i])
		case s.Done != nil:
			out[i] = s.Done
		default:
			out[i] = fresh[i]
		}
	}
	return out
}

// join appends the rounds of b (a continuation of the same run) to a.
func join(a, b *Result) *Result {
	out := *a
	out.Samples = append(append([]Sample{}, a.Samples...), b.Samples...)
	out.Rounds = append(append([]Round{}, a.Rounds...), b.Rounds...)
	out.Calls = AddCalls(a.Calls, b.Calls)
	out.Finished, out.Plan, out.Stop = b.Finished, b.Plan, b.Stop
	out.Noisy = a.Noisy || b.Noisy
	out.Phases = sumPhases(a.Phases, b.Phases)
	out.Notes = map[string]string{}
	for k, v := range a.Notes {
		out.Notes[k] = v
	}
	for k, v := range b.Notes {
		out.Notes[k] = v
	}
	return &out
}

// prepare has every side's guest prepare cfg's rounds (Prepare), all at
// once: what each would otherwise arm inside its first round, seconds under
// TCG, is done while no round runs, side by side instead of in turn.
func prepare(ctx context.Context, cfg *Config, sides []Side) ([]Prepared, error) {
	out := make([]Prepared, len(sides))
	errs := make([]error, len(sides))
	eachGuest(sides, func(i int, s Side) {
		req := proto.Request{
			ID: fmt.Sprintf("%s-%s-prepare", cfg.Suite, s.Label), Op: proto.OpPrepare,
			Suite: cfg.Suite, Profile: cfg.Profile, Params: s.Params,
		}
		raw, err := s.Guest.Do(ctx, req, nil)
		if err == nil {
			err = json.Unmarshal(raw, &out[i])
		}
		if err != nil {
			errs[i] = fmt.Errorf("%s: preparing %s: %w", cfg.Suite, s.Label, s.blame(err))
			return
		}
		// The infrastructure's, not the kernel's: the agent was built from
		// a source tree that is not this binary's.
		if got := out[i].Shape; got != "" && got != cfg.Sum() {
			errs[i] = fmt.Errorf("%s: the %s guest's agent resolves profile %s to another shape (%.40q) than this binary (%s): "+
				"the agent is built from the patchbot source tree when its initramfs is made, and that tree changed since this binary was built; rebuild patchbot",
				cfg.Suite, s.Label, cfg.Profile, got, cfg.Sum())
		}
	})
	return out, errors.Join(errs...)
}

// eachGuest calls f for every side that runs (one with a guest; a side
// without one has its rounds done), all at once, and waits for them.
func eachGuest(sides []Side, f func(i int, s Side)) {
	var wg sync.WaitGroup
	for i, s := range sides {
		if s.Guest == nil {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			f(i, s)
		}()
	}
	wg.Wait()
}

// blame puts err on the side's kernel, when it has one.
func (s Side) blame(err error) error {
	if s.Kernel != "" {
		return blame.On(s.Kernel, err)
	}
	return err
}

// reboot boots every side that runs afresh, all at once, and prepares
// them again: what each spent on both, as Prepared phases.
func reboot(ctx context.Context, cfg *Config, sides []Side, progress io.Writer) ([]Prepared, error) {
	took := make([]float64, len(sides))
	errs := make([]error, len(sides))
	eachGuest(sides, func(i int, s Side) {
		start := time.Now()
		err := s.Reboot(ctx)
		took[i] = time.Since(start).Seconds()
		if err != nil {
			errs[i] = fmt.Errorf("%s: rebooting %s: %w", cfg.Suite, s.Label, s.blame(err))
		}
	})
	out := make([]Prepared, len(sides))
	for i := range sides {
		if sides[i].Guest != nil {
			out[i].Phases = map[string]float64{PhaseReboot: took[i]}
		}
	}
	if err := errors.Join(errs...); err != nil {
		return out, err
	}
	start := time.Now()
	again, err := prepare(ctx, cfg, sides)
	for i := range out {
		out[i] = addPhases(out[i], again[i])
	}
	var parts []string
	for i, s := range sides {
		if s.Guest != nil {
			parts = append(parts, fmt.Sprintf("%s in %.1fs", s.Label, took[i]))
		}
	}
	fmt.Fprintf(progress, "%s rebooted %s, prepared in %s\n", cfg.Suite, strings.Join(parts, ", "), time.Since(start).Round(100*time.Millisecond))
	return out, err
}

// addPhases is p with q's phase times added.
func addPhases(p, q Prepared) Prepared {
	if len(q.Phases) == 0 {
		return p
	}
	p.Phases = sumPhases(p.Phases, q.Phases)
	return p
}

// sumPhases is the phase times of ms added, in a new map.
func sumPhases(ms ...map[string]float64) map[string]float64 {
	out := map[string]float64{}
	for _, m := range ms {
		for k, v := range m {
			out[k] += v
		}
	}
	return out
}

// counted reports whether every side that runs keeps instruction-counted
// time (vmrunner.ClockICount, at any shift): their figures count the guest's
// instructions, which the host's load cannot move, so their rounds may
// run at once, each guest on its own host thread.
func counted(sides []Side) bool {
	n := 0
	for _, s := range sides {
		if s.Guest == nil {
			continue
		}
		if s.Clock != "icount" && !strings.HasPrefix(s.Clock, "icount:") {
			return false
		}
		n++
	}
	return n > 0
}

// roundTogether runs round n on every side with a guest at once, and
// records each side's round (the host read before and after, never
// repeated). The first side to fail stops the others; its error is the
// one returned, as a *TogetherError.
func roundTogether(ctx context.Context, cfg *Config, sides []Side, n int, read func() *HostLoad) ([]*Result, []*Round, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	res := make([]*Result, len(sides))
	recs := make([]*Round, len(sides))
	before := read()
	var (
		mu    sync.Mutex
		first *TogetherError
	)
	eachGuest(sides, func(i int, s Side) {
		rec := &Round{N: n, Started: time.Now().UTC(), Before: before}
		r, err := runOne(ctx, cfg, s, n)
		rec.Seconds = time.Since(rec.Started).Seconds()
		mu.Lock()
		defer mu.Unlock()
		recs[i] = rec
		if err != nil {
			if first == nil {
				first = &TogetherError{Err: err, Round: n, OthersDone: true}
				for j, o := range sides {
					first.OthersDone = first.OthersDone && (j == i || o.Guest == nil || res[j] != nil)
				}
				cancel()
			}
			return
		}
		res[i] = r
	})
	after := read()
	for _, r := range recs {
		if r != nil {
			r.After = after
		}
	}
	if first != nil {
		return res, recs, first
	}
	return res, recs, nil
}

// TogetherError is the first failure of a round the sides ran at once
// (roundTogether): the others' rounds were stopped when it came, so that
// a side whose kernel got into trouble costs seconds, not a round. Whether
// they had finished the round by then says what they are evidence of:
// OthersDone, every other side ran round Round whole; otherwise they ran
// the rounds before it whole and this one at the same time, as far as the
// failing side got.
type TogetherError struct {
	Err        error
	Round      int
	OthersDone bool
}

func (e *TogetherError) Error() string { return e.Err.Error() }
func (e *TogetherError) Unwrap() error { return e.Err }

// runOne runs round n of cfg on one side.
func runOne(ctx context.Context, cfg *Config, s Side, n int) (*Result, error) {
	params := map[string]string{ParamKernel: s.Label, ParamAccel: s.Accel}
	if s.Clock != "" {
		params[ParamClock] = s.Clock
	}
	for k, v := range s.Params {
		params[k] = v
	}
	req := proto.Request{
		ID: fmt.Sprintf("%s-%s-%d", cfg.Suite, s.Label, n), Op: proto.OpRunSuite,
		Suite: cfg.Suite, Profile: cfg.Profile, Round: n, Params: params,
	}
	raw, err := s.Guest.Do(ctx, req, nil)
	if err != nil {
		return nil, fmt.Errorf("%s round %d on %s: %w", cfg.Suite, n, s.Label, s.blame(err))
	}
	var res Result
	if err := json.Unmarshal(raw, &res); err != nil {
		return nil, fmt.Errorf("%s round %d on %s: decoding the guest's result: %w", cfg.Suite, n, s.Label, err)
	}
	return &res, nil
}

func busyText(r Round) string {
	pct := func(l *HostLoad) string {
		if l == nil {
			return "?"
		}
		return fmt.Sprintf("%.0f%%", 100*l.Busy)
	}
	return "CPU " + pct(r.Before) + " before, " + pct(r.After) + " after"
}

// merge appends round's samples to acc (nil: round becomes acc).
func merge(acc, round *Result) *Result {
	if round.Notes == nil {
		round.Notes = map[string]string{}
	}
	if acc == nil {
		return round
	}
	acc.Samples = append(acc.Samples, round.Samples...)
	acc.Calls = AddCalls(acc.Calls, round.Calls)
	for _, m := range round.Missing {
		dup := false
		for _, have := range acc.Missing {
			dup = dup || have.Workload == m.Workload && have.Metric == m.Metric
		}
		if !dup {
			acc.Missing = append(acc.Missing, m)
		}
	}
	for k, v := range round.Notes {
		if _, ok := acc.Notes[k]; !ok {
			acc.Notes[k] = v
		}
	}
	for k, v := range round.Phases {
		if acc.Phases == nil {
			acc.Phases = map[string]float64{}
		}
		acc.Phases[k] += v
	}
	acc.Finished = round.Finished
	return acc
}

// Merge combines the Results of successive rounds on one kernel, as RunAB
// does; --local uses it.
func Merge(rounds []*Result) *Result {
	var acc *Result
	for _, r := range rounds {
		acc = merge(acc, r)
	}
	return acc
}

// BusyRepeats is how many busy rounds the pipeline runs again in a run:
// twice at most, then a busy round is kept, flagged and the run marked
// noisy, so that a busy host costs at most two rounds' time more.
const BusyRepeats = 2

// CalibrationRepeats is how often Calibrate runs its workload; the best
// time counts (the one least disturbed by whatever else ran).
const CalibrationRepeats = 3

// calibrationBytes is the size of the stream Calibrate decompresses.
const calibrationBytes = 8 << 20

// Calibrate times a short fixed workload on this host, the kind of work a
// round's guest does most (decompressing gzip): CalibrationRepeats times
// inflating the same 8 MiB of words from a fixed seed, best time. It takes
// a fraction of a second, and says how fast the host runs now: a run's
// time as a multiple of it can be compared between hosts and hours.
func Calibrate() (Calibration, error) {
	var raw bytes.Buffer
	rng := rand.New(rand.NewPCG(1, 2))
	words := []string{"squashfs", "cache", "entry", "block", "wake", "queue", "fragment", "metadata", "read", "page"}
	for raw.Len() < calibrationBytes {
		raw.WriteString(words[rng.IntN(len(words))])
		raw.WriteByte(' ')
	}
	var z bytes.Buffer
	w, _ := gzip.NewWriterLevel(&z, gzip.DefaultCompression)
	if _, err := w.Write(raw.Bytes()); err != nil {
		return Calibration{}, err
	}
	if err := w.Close(); err != nil {
		return Calibration{}, err
	}
	best := math.Inf(1)
	for i := 0; i < CalibrationRepeats; i++ {
		start := time.Now()
		r, err := gzip.NewReader(bytes.NewReader(z.Bytes()))
		if err != nil {
			return Calibration{}, err
		}
		n, err := io.Copy(io.Discard, r)
		if err != nil || n != int64(raw.Len()) {
			return Calibration{}, fmt.Errorf("calibration: inflated %d bytes of %d: %v", n, raw.Len(), err)
		}
		best = math.Min(best, time.Since(start).Seconds())
	}
	return Calibration{What: "gunzip of 8 MiB on the host", Seconds: best, Repeats: CalibrationRepeats}, nil
}

// ReadHostLoad returns a Quiet.Host for this machine: /proc/loadavg, and the
// CPU time /proc/stat counts as busy over window (a quarter of a second is
// enough to see a build or a git gc).
func ReadHostLoad(window time.Duration) func() (HostLoad, error) {
	return func() (HostLoad, error) { return readHostLoad("/proc", window) }
}

func readHostLoad(proc string, window time.Duration) (HostLoad, error) {
	l := HostLoad{Time: time.Now().UTC(), Window: window.Seconds()}
	b, err := os.ReadFile(proc + "/loadavg")
	if err != nil {
		return l, err
	}
	if l.Load1, l.Runnable, err = parseLoadavg(string(b)); err != nil {
		return l, err
	}
	busy0, total0, err := readCPUTimes(proc + "/stat")
	if err != nil {
		return l, err
	}
	time.Sleep(window)
	busy1, total1, err := readCPUTimes(proc + "/stat")
	if err != nil {
		return l, err
	}
	if total1 > total0 {
		l.Busy = float64(busy1-busy0) / float64(total1-total0)
	}
	return l, nil
}

// parseLoadavg reads "0.52 0.58 0.59 3/611 12345": the 1-minute average
// and the runnable tasks less the reader.
func parseLoadavg(s string) (load1 float64, runnable int, err error) {
	f := strings.Fields(s)
	if len(f) < 4 {
		return 0, 0, fmt.Errorf("loadavg %q: want 5 fields", strings.TrimSpace(s))
	}
	if load1, err = strconv.ParseFloat(f[0], 64); err != nil {
		return 0, 0, fmt.Errorf("loadavg %q: %w", strings.TrimSpace(s), err)
	}
	r, _, ok := strings.Cut(f[3], "/")
	if runnable, err = strconv.Atoi(r); !ok || err != nil {
		return 0, 0, fmt.Errorf("loadavg %q: bad runnable field %q", strings.TrimSpace(s), f[3])
	}
	return load1, max(0, runnable-1), nil
}

// readCPUTimes sums the "cpu" line of /proc/stat: ticks outside idle and
// iowait, and all ticks.
func readCPUTimes(path string) (busy, total uint64, err error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, 0, err
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line)
	if len(f) < 6 || f[0] != "cpu" {
		return 0, 0, fmt.Errorf("%s: no cpu line", path)
	}
	// user nice system idle iowait irq softirq steal (guest time is
	// already counted in user).
	for i, v := range f[1:min(len(f), 9)] {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			return 0, 0, fmt.Errorf("%s: cpu field %d: %w", path, i+1, err)
		}
		total += n
		if i != 3 && i != 4 {
			busy += n
		}
	}
	return busy, total, nil
}

// plural says "1 guest", "2 guests".
func plural(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return strconv.Itoa(n) + " " + noun + "s"
}

// Continue appends the rounds of later, a second run of the same suite,
// profile and kernel, to those of earlier, numbered on from earlier's last
// round: a run of a fixed number of rounds that did not settle goes on as
// if it had been asked for more (`patchbot suite run --continue`). Each
// run interleaves its sides, so turn n of the two runs together still
// pairs a base round with a patched one. The calibration is earlier's (the
// run's start); later's note says where its rounds began.
func Continue(earlier, later *Result) (*Result, error) {
	if earlier.Suite != later.Suite || earlier.Profile != later.Profile || earlier.Kernel != later.Kernel ||
		earlier.KernelRelease != later.KernelRelease || earlier.Accel != later.Accel || earlier.Clock != later.Clock ||
		earlier.CPUs != later.CPUs || earlier.MemMiB != later.MemMiB {
		return nil, fmt.Errorf("continuing %s with %s: not the same run", runShape(earlier), runShape(later))
	}
	if earlier.Reused > 0 || later.Reused > 0 {
		return nil, errors.New("continuing a run that reused base rounds: its rounds were not interleaved")
	}
	offset := 0
	for _, s := range earlier.Samples {
		offset = max(offset, s.Round)
	}
	for _, r := range earlier.Rounds {
		offset = max(offset, r.N)
	}
	out := *earlier
	out.Samples = append([]Sample(nil), earlier.Samples...)
	out.Rounds = append([]Round(nil), earlier.Rounds...)
	out.Missing = append([]Missing(nil), earlier.Missing...)
	out.Notes = map[string]string{}
	for k, v := range earlier.Notes {
		out.Notes[k] = v
	}
	out.Phases = map[string]float64{}
	for k, v := range earlier.Phases {
		out.Phases[k] = v
	}
	more := *later
	more.Samples = make([]Sample, len(later.Samples))
	for i, s := range later.Samples {
		s.Round += offset
		more.Samples[i] = s
	}
	for _, r := range later.Rounds {
		r.N += offset
		out.Rounds = append(out.Rounds, r)
	}
	more.Notes = map[string]string{"continued": fmt.Sprintf("rounds %d on were a second run, started %s", offset+1, later.Started.UTC().Format(time.RFC3339))}
	for k, v := range later.Notes {
		more.Notes[k] = v
	}
	merge(&out, &more)
	out.Noisy = earlier.Noisy || later.Noisy
	out.Plan, out.Stop = later.Plan, later.Stop
	return &out, nil
}

// runShape names what a run must share with the one it continues.
func runShape(r *Result) string {
	return fmt.Sprintf("%s on %s (%s, profile %s, %s, %d CPUs, %d MiB)", r.Suite, r.Kernel, r.KernelRelease, r.Profile, r.Accel, r.CPUs, r.MemMiB)
}
