package suites

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/patchbot/patchbot/blame"
	"github.com/patchbot/patchbot/vmrunner/proto"
)

// fakeGuest answers run-suite with one sample and logs the order of
// rounds; it answers prepare-suite as if it took 2 s, with the shape of
// the profile it was asked for, as a real agent built from the same
// definitions does.
type fakeGuest struct {
	label string
	log   *[]string
	fail  int     // round to fail at; -1: fail the prepare; -2: prepare another shape
	cfg   *Config // the profile as its agent resolves it
}

func (g fakeGuest) Do(ctx context.Context, req proto.Request, _ func(proto.Event)) (json.RawMessage, error) {
	if req.Op == proto.OpPrepare {
		if g.fail == -1 {
			return nil, errors.New("no kprobes here")
		}
		if req.Params[ParamImage] != "/dev/vda" || req.Profile != "quick" || req.Suite != "cache-contention" {
			return nil, errors.New("prepare request lost its parameters")
		}
		cfg := *g.cfg
		if g.fail == -2 {
			cfg.Params.Windows++ // the agent of a tree whose profile was edited
		}
		return json.Marshal(Prepared{Phases: map[string]float64{PhasePrepare: 2}, Shape: cfg.Sum()})
	}
	*g.log = append(*g.log, g.label+req.Params[ParamKernel])
	if req.Round == g.fail {
		return nil, errors.New("guest died")
	}
	if req.Params[ParamImage] != "/dev/vda" || req.Profile != "quick" {
		return nil, errors.New("request lost its parameters")
	}
	return json.Marshal(&Result{Suite: req.Suite, Kernel: req.Params[ParamKernel], Accel: req.Params[ParamAccel],
		Samples: []Sample{{Workload: "w", Metric: "m", Round: req.Round, Value: float64(req.Round)}},
		Missing: []Missing{{Workload: "w", Metric: "ttwu", Reason: "no schedstats"}}})
}

func abFixture(t *testing.T) (*Config, []Side, *[]string) {
	s, _ := Lookup("cache-contention")
	cfg, _ := s.Resolve("quick")
	var log []string
	params := map[string]string{ParamImage: "/dev/vda"}
	return cfg, []Side{
		{Label: "base", Guest: fakeGuest{"A:", &log, 0, cfg}, Accel: "tcg", Params: params},
		{Label: "patched", Guest: fakeGuest{"B:", &log, 0, cfg}, Accel: "tcg", Params: params},
	}, &log
}

func TestRunABInterleaves(t *testing.T) {
	cfg, sides, log := abFixture(t)
	var progress strings.Builder
	res, err := RunAB(context.Background(), cfg, sides, Fixed(3), Quiet{}, &progress)
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(*log, " "); got != "A:base B:patched A:base B:patched A:base B:patched" {
		t.Errorf("order = %s, want A B A B A B", got)
	}
	for i, r := range res {
		if len(r.Samples) != 3 || len(r.Missing) != 1 || r.Kernel != sides[i].Label || r.Notes["rounds"] != "3" ||
			r.Stop != StopFixed || len(r.Rounds) != 3 || r.Rounds[2].N != 3 || r.Phases[PhasePrepare] != 2 {
			t.Errorf("%s: %d samples, %d missing, kernel %q, notes %v, stop %q, %d round records, phases %v",
				sides[i].Label, len(r.Samples), len(r.Missing), r.Kernel, r.Notes, r.Stop, len(r.Rounds), r.Phases)
		}
	}
	if n := strings.Count(progress.String(), "\n"); n != 7 || !strings.HasPrefix(progress.String(), "cache-contention prepared 2 guests in ") {
		t.Errorf("%d progress lines, want 7, the preparing first:\n%s", n, progress.String())
	}
	// A guest that cannot prepare fails the run before any round, blamed
	// on its kernel.
	*log = nil
	fails := append([]Side(nil), sides...)
	fails[1].Guest, fails[1].Kernel = fakeGuest{"B:", log, -1, cfg}, blame.Patched
	_, err = RunAB(context.Background(), cfg, fails, Fixed(3), Quiet{}, nil)
	if err == nil || !strings.Contains(err.Error(), "preparing patched") || !strings.Contains(err.Error(), "no kprobes here") || blame.KernelOf(err) != blame.Patched || len(*log) != 0 {
		t.Errorf("failing prepare: %v (blamed on %q), %d rounds run; want the patch blamed before any round", err, blame.KernelOf(err), len(*log))
	}
	// A guest whose agent resolves the profile to another shape is
	// refused before any round, and blamed on nobody's kernel: its agent
	// was built from a changed source tree.
	fails[1].Guest = fakeGuest{"B:", log, -2, cfg}
	_, err = RunAB(context.Background(), cfg, fails, Fixed(3), Quiet{}, nil)
	if err == nil || !strings.Contains(err.Error(), "another shape") || blame.KernelOf(err) != "" || len(*log) != 0 {
		t.Errorf("another shape: %v (blamed on %q), %d rounds run; want the infrastructure blamed before any round", err, blame.KernelOf(err), len(*log))
	}
	sides[1].Guest = fakeGuest{"B:", log, 2, cfg}
	if _, err := RunAB(context.Background(), cfg, sides, Fixed(3), Quiet{}, nil); err == nil || !strings.Contains(err.Error(), "round 2 on patched") {
		t.Errorf("failing guest: %v, want an error naming round 2 on patched", err)
	}
	if _, err := RunAB(context.Background(), cfg, sides, bounds{4, 3}, Quiet{}, nil); err == nil {
		t.Error("a plan with max below min was accepted")
	}
}

// logReboots has every side log its reboots, as prefix and its label (no
// label with an empty prefix: "reboot"); the sides reboot at once.
func logReboots(sides []Side, log *[]string, prefix string) {
	var mu sync.Mutex
	for i := range sides {
		entry := "reboot"
		if prefix != "" {
			entry = prefix + sides[i].Label
		}
		sides[i].Reboot = func(context.Context) error {
			mu.Lock()
			defer mu.Unlock()
			*log = append(*log, entry)
			return nil
		}
	}
}

// A profile that boots each round afresh reboots every side before every
// round but the first and prepares it again; the reboots' and the
// prepares' times are the result's phases. A side that cannot reboot
// refuses the profile, and a reboot that fails is its kernel's.
func TestRunABRebootsEachRound(t *testing.T) {
	cfg, sides, log := abFixture(t)
	cfg.Params.Reboot = true // the guests' agents resolve it so too
	logReboots(sides, log, "reboot-")
	var progress strings.Builder
	res, err := RunAB(context.Background(), cfg, sides, Fixed(3), Quiet{}, &progress)
	if err != nil {
		t.Fatal(err)
	}
	rounds := "A:base B:patched "
	boots := "reboot-base reboot-patched "
	if got := strings.Join(*log, " ") + " "; strings.ReplaceAll(got, "reboot-patched reboot-base", "reboot-base reboot-patched") != rounds+boots+rounds+boots+rounds {
		t.Errorf("order = %s, want each side rebooted before rounds 2 and 3", got)
	}
	for _, r := range res {
		if r.Phases[PhasePrepare] != 6 || r.Phases[PhaseReboot] < 0 || len(r.Samples) != 3 {
			t.Errorf("%s: phases %v, %d samples; want 3 prepares of 2 s", r.Kernel, r.Phases, len(r.Samples))
		}
	}
	if n := strings.Count(progress.String(), "cache-contention rebooted base in "); n != 2 {
		t.Errorf("%d reboot lines, want 2:\n%s", n, progress.String())
	}

	*log = nil
	fails := append([]Side(nil), sides...)
	fails[1].Kernel = blame.Patched
	fails[1].Reboot = func(context.Context) error { return errors.New("no ready") }
	_, err = RunAB(context.Background(), cfg, fails, Fixed(3), Quiet{}, nil)
	if err == nil || !strings.Contains(err.Error(), "rebooting patched") || !strings.Contains(err.Error(), "no ready") || blame.KernelOf(err) != blame.Patched || len(*log) != 3 {
		t.Errorf("a failed reboot: %v (blamed on %q), log %v; want the patch blamed after round 1", err, blame.KernelOf(err), *log)
	}
	fails[1].Reboot = nil
	if _, err := RunAB(context.Background(), cfg, fails, Fixed(3), Quiet{}, nil); err == nil || !strings.Contains(err.Error(), "cannot reboot") {
		t.Errorf("a side that cannot reboot: %v", err)
	}
}

// A profile that spreads a round's windows over boots (Params.Boots) runs
// each round in parts, every part but the very first on a fresh boot, and
// folds the parts into one sample a metric and one record a round, the
// parts' values its windows; in turn and, with instruction-counted time,
// with the sides at once.
func TestRunABSpreadsRoundsOverBoots(t *testing.T) {
	for _, clock := range []string{"", "icount"} {
		cfg, sides, log := abFixture(t)
		cfg.Params.Reboot, cfg.Params.Windows, cfg.Params.Boots = true, 2, 2
		for i := range sides {
			sides[i].Clock = clock
			sides[i].Guest = fakeGuest{sides[i].Label[:1] + ":", log, 0, cfg}
		}
		logReboots(sides, log, "")
		var progress strings.Builder
		res, err := RunAB(context.Background(), cfg, sides, Fixed(2), Quiet{}, &progress)
		if err != nil {
			t.Fatal(err)
		}
		got := strings.Join(*log, " ")
		got = strings.NewReplacer("p:patched b:base", "b:base p:patched").Replace(got)
		if want := "b:base p:patched reboot reboot b:base p:patched reboot reboot b:base p:patched reboot reboot b:base p:patched"; got != want {
			t.Errorf("clock %q: order = %s\nwant %s", clock, got, want)
		}
		for _, r := range res {
			if len(r.Samples) != 2 || len(r.Rounds) != 2 || r.Rounds[1].N != 2 || r.Phases[PhasePrepare] != 8 {
				t.Fatalf("clock %q, %s: %d samples, %d records, phases %v; want 2 rounds, 4 prepares", clock, r.Kernel, len(r.Samples), len(r.Rounds), r.Phases)
			}
			for _, smp := range r.Samples {
				if smp.Value != float64(smp.Round) || len(smp.Windows) != 2 || smp.Windows[0] != smp.Windows[1] {
					t.Errorf("clock %q, %s: round %d sample %v %v, want its two boots' values as windows", clock, r.Kernel, smp.Round, smp.Value, smp.Windows)
				}
			}
		}
		if n := strings.Count(progress.String(), " boot 2/2 base "); n != 2 {
			t.Errorf("clock %q: %d lines of a second boot on base, want 2:\n%s", clock, n, progress.String())
		}
	}
}

// The plan's rule is asked after every round from Min on, sees every
// side's results so far, and stops the rounds; without an answer of yes
// they stop at Max.
// bounds are a rule's fewest and most rounds; stopping a rule that asks
// stop after each look.
type bounds [2]int

func (b bounds) Bounds() (int, int)  { return b[0], b[1] }
func (bounds) Stop([]*Result) string { return "" }
func (bounds) Plan() string          { return "" }

type stopping struct {
	bounds
	rule string
	stop func([]*Result) string
}

func (s stopping) Stop(rs []*Result) string { return s.stop(rs) }
func (s stopping) Plan() string             { return s.rule }

func TestRunABStopsWhenSettled(t *testing.T) {
	tests := []struct {
		name     string
		settleAt int // rounds after which Settled says yes; 0 never
		want     int
		stop     string
		asked    []int
	}{
		{"settled at the first look", 3, 3, StopSettled, []int{3}},
		{"settled later", 5, 5, StopSettled, []int{3, 4, 5}},
		{"never settled", 0, 6, StopMax, []int{3, 4, 5, 6}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg, sides, log := abFixture(t)
			var asked []int
			plan := stopping{bounds{3, 6}, "min=3 max=6 alpha=0.05 interim=0.001", func(rs []*Result) string {
				if len(rs) != 2 || len(rs[0].Samples) != len(rs[1].Samples) {
					t.Fatalf("Stop saw %d sides, unequal rounds", len(rs))
				}
				asked = append(asked, len(rs[0].Samples))
				if len(rs[0].Samples) == tt.settleAt {
					return StopSettled
				}
				return ""
			}}
			res, err := RunAB(context.Background(), cfg, sides, plan, Quiet{}, nil)
			if err != nil {
				t.Fatal(err)
			}
			if len(*log) != 2*tt.want || len(res[0].Samples) != tt.want || res[0].Stop != tt.stop || res[1].Plan != plan.rule {
				t.Errorf("%d calls, %d samples, stop %q, plan %q; want %d rounds a side, stop %q",
					len(*log), len(res[0].Samples), res[0].Stop, res[1].Plan, tt.want, tt.stop)
			}
			if fmt.Sprint(asked) != fmt.Sprint(tt.asked) {
				t.Errorf("asked after rounds %v, want %v", asked, tt.asked)
			}
		})
	}
}

// A round with the host busy before or after it is run again (its samples
// dropped) on a host read afresh, up to Repeats; one beyond that is kept
// and flagged.
func TestRunABRepeatsBusyRounds(t *testing.T) {
	tests := []struct {
		name    string
		busyAt  int // the reading (1-based) that shows a busy host
		repeats int
		order   string
		side    int      // whose rounds records lists
		records []string // rounds: n, b(usy), r(epeated)
	}{
		// Readings: 1 before A1, 2 after A1, 3 after B1 (busy), then 4
		// afresh before B1 again, 5 after it, 6 after A2, 7 after B2.
		{"busy after a round: repeated", 3, 0, "A:base B:patched B:patched A:base B:patched", 1, []string{"1br", "1", "2"}},
		{"busy between two rounds: the first repeated", 2, 0, "A:base A:base B:patched A:base B:patched", 0, []string{"1br", "1", "2"}},
		{"no repeats allowed: flagged", 3, -1, "A:base B:patched A:base B:patched", 1, []string{"1b", "2"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg, sides, log := abFixture(t)
			readings := 0
			host := func() (HostLoad, error) {
				readings++
				l := HostLoad{Load1: 0.1, Busy: 0.02, Window: 0.25}
				if readings == tt.busyAt {
					l.Busy, l.Load1 = 0.9, 1.8
				}
				return l, nil
			}
			var progress strings.Builder
			res, err := RunAB(context.Background(), cfg, sides, Fixed(2), Quiet{Host: host, Repeats: tt.repeats}, &progress)
			if err != nil {
				t.Fatal(err)
			}
			if got := strings.Join(*log, " "); got != tt.order {
				t.Errorf("order = %s, want %s", got, tt.order)
			}
			var recs []string
			for _, r := range res[tt.side].Rounds {
				s := strconv.Itoa(r.N)
				if r.Busy {
					s += "b"
				}
				if r.Repeated {
					s += "r"
				}
				if r.Before == nil || r.After == nil {
					t.Errorf("round %d has no host reading", r.N)
				}
				recs = append(recs, s)
			}
			if strings.Join(recs, " ") != strings.Join(tt.records, " ") || len(res[tt.side].Samples) != 2 {
				t.Errorf("%s rounds %v with %d samples, want %v with 2", sides[tt.side].Label, recs, len(res[tt.side].Samples), tt.records)
			}
			if !strings.Contains(progress.String(), "host busy (CPU") {
				t.Errorf("progress does not say the host was busy:\n%s", progress.String())
			}
		})
	}
}

// With Quiet.Wait, a round waits for a busy host to calm down instead of
// running beside the other job.
func TestRunABWaitsForQuiet(t *testing.T) {
	defer func(p time.Duration) { quietPoll = p }(quietPoll)
	quietPoll = time.Millisecond
	cfg, sides, log := abFixture(t)
	readings := 0
	host := func() (HostLoad, error) {
		readings++
		if readings <= 3 { // busy for the first three readings
			return HostLoad{Busy: 0.8}, nil
		}
		return HostLoad{Busy: 0.01}, nil
	}
	res, err := RunAB(context.Background(), cfg, sides, Fixed(1), Quiet{Host: host, Wait: time.Second}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(*log) != 2 || res[0].Rounds[0].Busy || res[0].Rounds[0].Before.Busy != 0.01 {
		t.Errorf("calls %v, base rounds %+v: want one quiet round a side after waiting", *log, res[0].Rounds)
	}
}

func TestParseHostLoad(t *testing.T) {
	dir := t.TempDir()
	write := func(name, s string) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("loadavg", "1.52 0.58 0.59 3/611 12345\n")
	write("stat", "cpu  100 0 50 800 50 0 0 0 0 0\ncpu0 50 0 25 400 25 0 0 0 0 0\n")
	l, err := readHostLoad(dir, time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	if l.Load1 != 1.52 || l.Runnable != 2 || l.Busy != 0 || l.Window != 0.001 {
		t.Errorf("load = %+v, want load1 1.52, 2 runnable, busy 0 (the counters did not move)", l)
	}
	busy, total, err := readCPUTimes(filepath.Join(dir, "stat"))
	if err != nil || busy != 150 || total != 1000 {
		t.Errorf("cpu times = %d busy of %d, %v; want 150 of 1000", busy, total, err)
	}
	write("loadavg", "garbage\n")
	if _, err := readHostLoad(dir, 0); err == nil {
		t.Error("a bad loadavg was accepted")
	}
	if l, err := ReadHostLoad(10 * time.Millisecond)(); err != nil || l.Busy < 0 || l.Busy > 1 || l.Time.IsZero() {
		t.Errorf("this host's load: %+v, %v", l, err)
	}
}

// The pipeline's bound: at most BusyRepeats rounds are run again; a busy
// round after that is kept, flagged, and the results are marked noisy.
// The host's calibration, taken before the first round, is in every
// result.
func TestRunABBoundsRepeatsAndCalibrates(t *testing.T) {
	cfg, sides, log := abFixture(t)
	busy := func() (HostLoad, error) { return HostLoad{Busy: 0.9}, nil } // always busy
	calls := 0
	calibrate := func() (Calibration, error) {
		calls++
		return Calibration{What: "test", Seconds: 0.05, Repeats: 3}, nil
	}
	res, err := RunAB(context.Background(), cfg, sides,
		Fixed(2), Quiet{Host: busy, Repeats: BusyRepeats, Calibrate: calibrate}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	// 4 rounds kept and BusyRepeats more run: 6 in all.
	if len(*log) != 4+BusyRepeats {
		t.Errorf("%d rounds run, want %d: %v", len(*log), 4+BusyRepeats, *log)
	}
	for _, r := range res {
		if !r.Noisy || r.Calibration == nil || r.Calibration.Seconds != 0.05 {
			t.Errorf("%s: noisy %v, calibration %+v", r.Kernel, r.Noisy, r.Calibration)
		}
	}
	if calls != 1 {
		t.Errorf("calibrated %d times, want once", calls)
	}
	k, err := Calibrate()
	if err != nil || k.Seconds <= 0 || k.Repeats != CalibrationRepeats {
		t.Errorf("Calibrate() = %+v, %v", k, err)
	}
}

// A second run continues the first: its rounds are numbered on from the
// first's last, the samples of both are kept, and a run of another shape
// is refused.
func TestContinue(t *testing.T) {
	cfg, sides, _ := abFixture(t)
	first, err := RunAB(context.Background(), cfg, sides, Fixed(3), Quiet{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	second, err := RunAB(context.Background(), cfg, sides, Fixed(2), Quiet{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := range first {
		first[i].Calibration = &Calibration{What: "test", Seconds: 0.01, Repeats: 3}
		c, err := Continue(first[i], second[i])
		if err != nil {
			t.Fatal(err)
		}
		var rounds []int
		for _, s := range c.Samples {
			rounds = append(rounds, s.Round)
		}
		if got := fmt.Sprint(rounds); got != "[1 2 3 4 5]" {
			t.Errorf("%s: sample rounds %s, want [1 2 3 4 5]", c.Kernel, got)
		}
		if len(c.Rounds) != 5 || c.Rounds[4].N != 5 || c.Phases[PhasePrepare] != 4 || c.Calibration == nil ||
			!strings.HasPrefix(c.Notes["continued"], "rounds 4 on were a second run") || len(c.Missing) != 1 {
			t.Errorf("%s: %d round records (last %d), phases %v, calibration %v, notes %v, missing %v",
				c.Kernel, len(c.Rounds), c.Rounds[len(c.Rounds)-1].N, c.Phases, c.Calibration, c.Notes, c.Missing)
		}
		// The first run is left as it was.
		if len(first[i].Samples) != 3 || first[i].Notes["continued"] != "" {
			t.Errorf("%s: the first run was changed: %d samples, notes %v", c.Kernel, len(first[i].Samples), first[i].Notes)
		}
	}
	if _, err := Continue(first[0], second[1]); err == nil || !strings.Contains(err.Error(), "not the same run") {
		t.Errorf("base continued with patched: %v", err)
	}
	other := *second[0]
	other.Profile = "full"
	if _, err := Continue(first[0], &other); err == nil {
		t.Error("a quick run continued with a full one")
	}
}

// A run goes on from rounds done before: the new rounds are numbered on,
// no guest is prepared again, each look sees the rounds before and after
// together, and a side without a guest is not run, its rounds standing
// for it.
func TestRunABGoesOnFromDone(t *testing.T) {
	cfg, sides, log := abFixture(t)
	first, err := RunAB(context.Background(), cfg, sides, Fixed(2), Quiet{}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	*log = nil
	rest := []Side{sides[0], sides[1]}
	rest[0].Done, rest[0].Guest = first[0], nil // held: not run
	rest[1].Done = first[1]
	var seen []string
	stop := stopping{bounds{3, 5}, "rule", func(rs []*Result) string {
		seen = append(seen, fmt.Sprintf("%d/%d", len(rs[0].Samples), len(rs[1].Samples)))
		if len(rs[1].Samples) == 4 {
			return StopSettled
		}
		return ""
	}}
	out, err := RunAB(context.Background(), cfg, rest, stop, Quiet{}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(*log, " "); got != "B:patched B:patched" {
		t.Errorf("rounds run %q, want the patched kernel's rounds 3 and 4 alone", got)
	}
	if got := strings.Join(seen, " "); got != "2/3 2/4" {
		t.Errorf("looks saw %q, want the held base's 2 rounds beside 3, then 4, patched rounds", got)
	}
	if n := len(out[1].Samples); n != 4 || out[1].Samples[3].Round != 4 || len(out[1].Rounds) != 4 {
		t.Errorf("patched: %d samples, last round %d, %d round records; want 4 numbered on", n, out[1].Samples[n-1].Round, len(out[1].Rounds))
	}
	if len(out[0].Samples) != 2 || out[0].Plan != "rule" || out[0].Stop != StopSettled || out[1].Stop != StopSettled {
		t.Errorf("base %d samples, plan %q, stop %q/%q: want its 2 rounds, recorded under the rule, settled",
			len(out[0].Samples), out[0].Plan, out[0].Stop, out[1].Stop)
	}
	if first[0].Plan != "" || first[0].Stop != StopFixed {
		t.Error("going on changed the results it went on from")
	}
}

// togetherGuest answers a round only once every side's guest is in the
// same round: sides run one at a time would never meet.
type togetherGuest struct {
	meet *meeting
	fail int // round to fail at
}

type meeting struct {
	mu    sync.Mutex
	in    map[int]int // round → sides arrived
	sides int
}

func (g togetherGuest) Do(ctx context.Context, req proto.Request, _ func(proto.Event)) (json.RawMessage, error) {
	if req.Op == proto.OpPrepare {
		return json.Marshal(Prepared{})
	}
	if req.Params[ParamClock] != "icount" {
		return nil, errors.New("the round's request does not say the clock")
	}
	if req.Round == g.fail {
		return nil, errors.New("kernel BUG in the patched guest")
	}
	m := g.meet
	m.mu.Lock()
	m.in[req.Round]++
	deadline := time.Now().Add(5 * time.Second)
	for m.in[req.Round] < m.sides && time.Now().Before(deadline) && ctx.Err() == nil {
		m.mu.Unlock()
		time.Sleep(5 * time.Millisecond)
		m.mu.Lock()
	}
	met := m.in[req.Round] >= m.sides
	m.mu.Unlock()
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if !met {
		return nil, fmt.Errorf("round %d: the other side never came", req.Round)
	}
	return json.Marshal(&Result{Suite: req.Suite, Kernel: req.Params[ParamKernel], Accel: req.Params[ParamAccel], Clock: req.Params[ParamClock],
		Samples: []Sample{{Workload: "w", Metric: "m", Round: req.Round, Value: float64(req.Round)}}})
}

// Guests with instruction-counted time run each round at once, and a busy
// host repeats nothing: their figures count instructions, not the host's
// seconds. The first side to fail ends the round with its error.
func TestRunABCountedRoundsRunTogether(t *testing.T) {
	s, _ := Lookup("cache-contention")
	cfg, _ := s.Resolve("quick")
	busy := func() (HostLoad, error) { return HostLoad{Load1: 3, Busy: 0.95, Window: 0.25}, nil }
	sides := func(fail int) []Side {
		m := &meeting{in: map[int]int{}, sides: 2}
		return []Side{
			{Label: "base", Kernel: blame.Base, Guest: togetherGuest{m, 0}, Accel: "tcg", Clock: "icount"},
			{Label: "patched", Kernel: blame.Patched, Guest: togetherGuest{m, fail}, Accel: "tcg", Clock: "icount"},
		}
	}
	var progress strings.Builder
	res, err := RunAB(context.Background(), cfg, sides(0), Fixed(3), Quiet{Host: busy, Repeats: 2}, &progress)
	if err != nil {
		t.Fatalf("%v\n%s", err, progress.String())
	}
	for _, r := range res {
		if len(r.Rounds) != 3 || len(r.Samples) != 3 || r.Noisy || r.Clock != "icount" {
			t.Errorf("%s: %d rounds, %d samples, noisy %v, clock %q; want 3, 3, false, icount", r.Kernel, len(r.Rounds), len(r.Samples), r.Noisy, r.Clock)
		}
		for _, rd := range r.Rounds {
			if rd.Busy || rd.Repeated || rd.Before == nil || rd.After == nil {
				t.Errorf("%s round %d: busy %v, repeated %v, readings %v %v", r.Kernel, rd.N, rd.Busy, rd.Repeated, rd.Before, rd.After)
			}
		}
	}
	if !strings.Contains(progress.String(), "instruction-counted time") {
		t.Errorf("progress does not say why the rounds run at once:\n%s", progress.String())
	}
	_, err = RunAB(context.Background(), cfg, sides(2), Fixed(3), Quiet{}, io.Discard)
	var ke *blame.KernelError
	if err == nil || !strings.Contains(err.Error(), "kernel BUG") || !errors.As(err, &ke) || ke.Kernel != blame.Patched {
		t.Errorf("a patched guest failing in round 2: %v, want its error, on the patched kernel", err)
	}
	// The base's round 2 was stopped with it, unfinished (it waits for
	// the patched side to meet it): the error says so, for the reply's
	// account of what the base did.
	var te *TogetherError
	if !errors.As(err, &te) || te.Round != 2 || te.OthersDone {
		t.Errorf("a patched guest failing in round 2: %#v, want a TogetherError of round 2 with the base's round unfinished", te)
	}
}
