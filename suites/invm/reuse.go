package invm

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"math"
	"os"
	"strings"
	"time"

	"github.com/patchbot/patchbot/images"
	"github.com/patchbot/patchbot/suites"
)

// Bases keeps a base kernel's measured rounds, so that the next series
// tested on the same base, config, suite, profile, VM shape and host need
// not measure them again, as the kernel test robot keeps its base
// results. store.Store is one.
type Bases interface {
	BaseRounds(ctx context.Context, key string) (result []byte, saved time.Time, ok bool, err error)
	PutBaseRounds(ctx context.Context, key string, result []byte, saved time.Time) error
}

// Reuse of base rounds: how many control rounds a reusing run measures on
// the base, interleaved with the patched kernel's first rounds, and when
// kept rounds are too old to trust.
const (
	// Controls is the number of fresh base rounds a run that reuses
	// kept ones measures: the check that the host has not drifted, and
	// fresh base samples beside the kept ones.
	Controls = 1
	// KeepRounds is the most base rounds kept for a key: the latest.
	KeepRounds = 10
	// MaxAge is how old kept rounds may be: a host changes over a day
	// (other tenants, updates) more than a run can check.
	MaxAge = 12 * time.Hour
)

// BaseKey names what a base's rounds are valid for: the base commit (or
// head of the build measured as the base), its config, the suite and
// profile, the VM shape and backend, and this host.
func BaseKey(suite, profile string, base *images.Build, vm VMConfig) string {
	host, _ := os.Hostname()
	commit := base.Commit
	if base.Head != "" {
		commit = base.Head
	}
	if profile == "" {
		profile = "quick"
	}
	parts := []string{commit, base.ConfigHash, suite, profile, vm.Backend, vm.Boot,
		fmt.Sprintf("%dx%d", vm.CPUs, vm.MemMiB), host}
	sum := sha256.Sum256([]byte(strings.Join(parts, "\x00")))
	return hex.EncodeToString(sum[:12])
}

// Reuse takes a base's rounds from Bases when they are kept for Key.
type Reuse struct {
	Bases Bases
	Key   string
	Log   *slog.Logger
	// Now is the clock (tests); nil is time.Now.
	Now func() time.Time
}

func (r *Reuse) now() time.Time {
	if r.Now != nil {
		return r.Now()
	}
	return time.Now()
}

func (r *Reuse) log() *slog.Logger {
	if r.Log != nil {
		return r.Log
	}
	return slog.Default()
}

// run measures sides[0] (the base) against sides[1] (the patched kernel)
// under plan, reusing kept base rounds when it can:
//
//   - without kept rounds (or with rounds older than MaxAge, or fewer than
//     plan.Min) it measures both afresh, interleaved, and keeps the base's
//     rounds;
//   - with them, it runs Controls rounds of each kernel, interleaved, and
//     checks the base's control rounds against the kept ones (Drifted).
//     Past that check it goes on with the patched kernel alone, judging it
//     against the kept rounds and the controls, and keeps the controls
//     with the rounds. A host that drifted is measured afresh, both
//     kernels, from where the controls left off, and its rounds replace
//     the kept ones.
func (r *Reuse) run(ctx context.Context, cfg *suites.Config, sides []suites.Side, plan suites.Plan, progress io.Writer) ([]*suites.Result, error) {
	kept := r.load(ctx, plan)
	if kept == nil {
		out, err := suites.RunAB(ctx, cfg, sides, plan, progress)
		if err == nil {
			r.keep(ctx, out[0], nil)
		}
		return out, err
	}
	controls := suites.FixedPlan(Controls)
	controls.Host, controls.Busy, controls.Repeats, controls.Calibrate = plan.Host, plan.Busy, plan.Repeats, plan.Calibrate
	controls.QuietWait = plan.QuietWait
	first, err := suites.RunAB(ctx, cfg, sides, controls, progress)
	if err != nil {
		return nil, err
	}
	if why := Drifted(cfg.Suite, kept, first[0]); why != "" {
		fmt.Fprintf(progress, "%s: kept base rounds not reused: %s; measuring afresh\n", cfg.Suite, why)
		r.log().Info("base rounds not reused", "suite", cfg.Suite, "key", r.Key, "reason", why)
		rest := plan
		rest.First = Controls + 1
		rest.Settled, rest.Futile = continued(plan.Settled, first), continued(plan.Futile, first)
		more, err := suites.RunAB(ctx, cfg, sides, rest, progress)
		if err != nil {
			return nil, err
		}
		out := []*suites.Result{join(first[0], more[0]), join(first[1], more[1])}
		r.keep(ctx, out[0], nil)
		return out, nil
	}
	fmt.Fprintf(progress, "%s: reusing %d kept base rounds (saved %s), %d fresh control round(s) agree\n",
		cfg.Suite, len(kept.Rounds), kept.Finished.Format(time.RFC3339), Controls)
	base := reused(kept, first[0])
	rest := plan
	rest.First = Controls + 1
	// The base's rounds are the kept ones and the controls; the patched
	// kernel goes on alone.
	pick := func(f func([]*suites.Result) bool) func([]*suites.Result) bool {
		if f == nil {
			return nil
		}
		return func(s []*suites.Result) bool {
			return f([]*suites.Result{base, join(first[1], s[0])})
		}
	}
	rest.Settled, rest.Futile = pick(plan.Settled), pick(plan.Futile)
	// The first look comes when the patched kernel has Min rounds in all.
	more, err := suites.RunAB(ctx, cfg, sides[1:], rest, progress)
	if err != nil {
		return nil, err
	}
	patched := join(first[1], more[0])
	base.Plan, base.Stop = patched.Plan, patched.Stop
	r.keep(ctx, kept, first[0])
	return []*suites.Result{base, patched}, nil
}

// load returns the kept base rounds for the key, if there are enough of
// them and they are recent.
func (r *Reuse) load(ctx context.Context, plan suites.Plan) *suites.Result {
	raw, saved, ok, err := r.Bases.BaseRounds(ctx, r.Key)
	if err != nil {
		r.log().Warn("reading kept base rounds", "key", r.Key, "err", err)
		return nil
	}
	if !ok || r.now().Sub(saved) > MaxAge {
		return nil
	}
	var res suites.Result
	if err := json.Unmarshal(raw, &res); err != nil || len(res.Rounds) < plan.Min {
		return nil
	}
	return &res
}

// keep stores the base's rounds for the next series: kept and fresh
// together (the latest KeepRounds of them), or fresh alone.
func (r *Reuse) keep(ctx context.Context, kept, fresh *suites.Result) {
	all := kept
	if fresh != nil {
		all = reused(kept, fresh)
	}
	all = latest(all, KeepRounds)
	raw, err := json.Marshal(all)
	if err == nil {
		err = r.Bases.PutBaseRounds(ctx, r.Key, raw, r.now())
	}
	if err != nil {
		r.log().Warn("keeping base rounds", "key", r.Key, "err", err)
	}
}

// Drifted says why a base's control rounds do not agree with its kept
// rounds, "" when they do: for each of the suite's primary metrics, the
// geometric mean of the controls must lie within the kept rounds' range
// widened by the suite's noise floor. A host that got slower or faster
// since (other tenants, a thermal limit, an update) moves every round out
// of that range; one unlucky round of a noisy metric stays inside it.
func Drifted(suite string, kept, controls *suites.Result) string {
	def, err := suites.Lookup(suite)
	if err != nil {
		return err.Error()
	}
	floor := def.Verdict.NoiseFloor
	type key struct{ workload, cell, metric string }
	values := func(r *suites.Result) map[key][]float64 {
		m := map[key][]float64{}
		for _, s := range r.Samples {
			if _, ok := def.Verdict.Rank(s.Workload, s.Metric, s.Params); ok {
				k := key{s.Workload, cellOf(s.Params), s.Metric}
				m[k] = append(m[k], s.Value)
			}
		}
		return m
	}
	was, now := values(kept), values(controls)
	for k, vs := range now {
		old := was[k]
		if len(old) == 0 {
			return fmt.Sprintf("%s %s was not kept", k.workload, k.metric)
		}
		lo, hi := math.Inf(1), math.Inf(-1)
		for _, v := range old {
			lo, hi = math.Min(lo, v), math.Max(hi, v)
		}
		g := geomean(vs)
		if g < lo/(1+floor) || g > hi*(1+floor) {
			return fmt.Sprintf("%s %s is %.4g now, the kept rounds %.4g to %.4g", k.workload, k.metric, g, lo, hi)
		}
	}
	return ""
}

func cellOf(params map[string]string) string {
	b, _ := json.Marshal(params) // sorted keys
	return string(b)
}

func geomean(vs []float64) float64 {
	var s float64
	for _, v := range vs {
		if v <= 0 {
			var m float64
			for _, x := range vs {
				m += x
			}
			return m / float64(len(vs))
		}
		s += math.Log(v)
	}
	return math.Exp(s / float64(len(vs)))
}

// reused is the base's result made of kept rounds and fresh ones: the
// kept samples are renumbered below 1 (0, -1, ...), so that they are never
// taken for a turn of this run, and counted in Reused.
func reused(kept, fresh *suites.Result) *suites.Result {
	out := *fresh
	out.Samples = nil
	out.Rounds = nil
	n := 0
	for _, rd := range kept.Rounds {
		if !rd.Repeated {
			n++
		}
	}
	renum := map[int]int{}
	next := 0
	for _, rd := range kept.Rounds {
		if _, ok := renum[rd.N]; !ok {
			renum[rd.N] = next
			next--
		}
		rd.N = renum[rd.N]
		out.Rounds = append(out.Rounds, rd)
	}
	for _, s := range kept.Samples {
		if m, ok := renum[s.Round]; ok {
			s.Round = m
		} else {
			s.Round = next
		}
		out.Samples = append(out.Samples, s)
	}
	out.Samples = append(out.Samples, fresh.Samples...)
	out.Rounds = append(out.Rounds, fresh.Rounds...)
	out.Reused = kept.Reused + n
	return &out
}

// latest keeps the last n rounds (by the order they ran) of r, numbered
// 1..n again.
func latest(r *suites.Result, n int) *suites.Result {
	out := *r
	var order []int
	seen := map[int]bool{}
	for _, rd := range r.Rounds {
		if !rd.Repeated && !seen[rd.N] {
			seen[rd.N] = true
			order = append(order, rd.N)
		}
	}
	if len(order) > n {
		order = order[len(order)-n:]
	}
	renum := map[int]int{}
	for i, k := range order {
		renum[k] = i + 1
	}
	out.Rounds, out.Samples = nil, nil
	for _, rd := range r.Rounds {
		if m, ok := renum[rd.N]; ok && !rd.Repeated {
			rd.N = m
			out.Rounds = append(out.Rounds, rd)
		}
	}
	for _, s := range r.Samples {
		if m, ok := renum[s.Round]; ok {
			s.Round = m
			out.Samples = append(out.Samples, s)
		}
	}
	out.Reused = 0
	return &out
}

// join appends the rounds of b (a continuation of the same run) to a.
func join(a, b *suites.Result) *suites.Result {
	out := *a
	out.Samples = append(append([]suites.Sample{}, a.Samples...), b.Samples...)
	out.Rounds = append(append([]suites.Round{}, a.Rounds...), b.Rounds...)
	out.Finished, out.Plan, out.Stop = b.Finished, b.Plan, b.Stop
	out.Noisy = a.Noisy || b.Noisy
	out.Phases = map[string]float64{}
	for _, m := range []map[string]float64{a.Phases, b.Phases} {
		for k, v := range m {
			out.Phases[k] += v
		}
	}
	out.Notes = map[string]string{}
	for k, v := range a.Notes {
		out.Notes[k] = v
	}
	for k, v := range b.Notes {
		out.Notes[k] = v
	}
	return &out
}

// continued wraps a plan's question for rounds that go on from first: it
// is asked of the whole run so far.
func continued(f func([]*suites.Result) bool, first []*suites.Result) func([]*suites.Result) bool {
	if f == nil {
		return nil
	}
	return func(s []*suites.Result) bool {
		all := make([]*suites.Result, len(s))
		for i := range s {
			all[i] = join(first[i], s[i])
		}
		return f(all)
	}
}
