package judge

// The sequential rule on the rounds: Rounds, what the pipeline runs the
// rounds by (when to look, when to stop, when a base's kept rounds may
// stand in), and Replay, the same rule on rounds already recorded, look by
// look (the panel, the known answers). Compare, one look, is in
// compare.go.

import (
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/patchbot/patchbot/judge/stats"
	"github.com/patchbot/patchbot/suites"
)

// Rounds is when the rounds of an A/B run stop, the one owner of that
// policy: the sequential rule (Rule, judged with Options: its looks, its
// levels and futility), and the reuse of a base's rounds kept from an
// earlier run on the same base (ReuseControls fresh control rounds, kept
// rounds at most ReuseMaxAge old, checked for drift by Drifted). It is a
// suites.Stopping, built once by the pipeline and passed whole; the rule
// is recorded in the results (Result.Plan), so that judging them again
// (Compare, `patchbot compare`) applies it.
type Rounds struct {
	Rule    stats.Rule
	Options Options
}

// Base rounds kept from an earlier run on the same base, config, suite,
// profile, VM shape and host stand in for fresh ones when ReuseControls
// fresh base rounds, interleaved with the patched kernel's first, agree
// with them (Drifted), and they are at most ReuseMaxAge old: a host
// changes over a day (other tenants, updates) more than a run can check.
const (
	ReuseControls = 1
	ReuseMaxAge   = 12 * time.Hour
)

var _ suites.Stopping = Rounds{}

// Bounds are the rule's: at least Rule.Min rounds a side, at most Rule.Max.
func (r Rounds) Bounds() (min, max int) { return r.Rule.Min, r.Rule.Max }

// Plan is the rule's text (stats.ParseRule reads it), as the results
// record it.
func (r Rounds) Plan() string { return r.Rule.String() }

// Stop judges the rounds so far (base and patched, in that order) as
// Compare does under the rule: StopSettled once every suite's primary
// metrics are settled (Comparison.Settled), StopFutile when more rounds
// could not settle them (Comparison.Futile), "" to go on.
func (r Rounds) Stop(sides []*suites.Result) string {
	if len(sides) != 2 || sides[0] == nil || sides[1] == nil {
		return ""
	}
	opt := r.Options
	opt.Rule = &r.Rule
	c, err := Compare([]suites.Result{*sides[0]}, []suites.Result{*sides[1]}, opt)
	switch {
	case err != nil:
		return ""
	case c.Settled():
		return suites.StopSettled
	case c.Futile():
		return suites.StopFutile
	}
	return ""
}

// Reuse is how many fresh control rounds a run that reuses kept base
// rounds measures on each kernel, and how old kept rounds may be.
func (r Rounds) Reuse() (controls int, maxAge time.Duration) { return ReuseControls, ReuseMaxAge }

// Drifted says why a base's control rounds do not agree with its kept
// rounds, "" when they do: for each of the suite's primary metrics, the
// geometric mean of the controls must lie within the kept rounds' range
// widened by the suite's noise floor. A host that got slower or faster
// since (other tenants, a thermal limit, an update) moves every round out
// of that range; one unlucky round of a noisy metric stays inside it.
func (r Rounds) Drifted(suite string, kept, controls *suites.Result) string {
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
				k := key{s.Workload, CellName(s.Params), s.Metric}
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

// geomean is the geometric mean of vs, or the mean when a value is not
// positive.
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

// Replay judges results measured with a fixed number of rounds as a
// sequential run under rule would have been judged: round by round from
// rule.Min, it returns the comparison of the first rounds at the first look
// where the primary metrics were settled, else at rule.Max (or the last
// round measured). Rounds are interleaved the same way in both designs, so
// the answer is the one the sequential run would have given.
func Replay(base, patched []suites.Result, rule stats.Rule, opt Options) (*Comparison, error) {
	if err := rule.Validate(); err != nil {
		return nil, err
	}
	opt.Rule = &rule
	last := min(maxRound(base), maxRound(patched))
	var c *Comparison
	for n := min(rule.Min, last); n <= min(rule.Max, last); n++ {
		var err error
		c, err = Compare(firstRounds(base, n), firstRounds(patched, n), opt)
		if err != nil {
			return nil, err
		}
		if c.Settled() || c.Futile() {
			break
		}
	}
	if c == nil {
		return nil, errors.New("replaying results: no rounds")
	}
	return c, nil
}

func maxRound(rs []suites.Result) int {
	n := 0
	for _, r := range rs {
		for _, s := range r.Samples {
			n = max(n, s.Round)
		}
	}
	return n
}

// firstRounds keeps the samples of rounds 1 to n.
func firstRounds(rs []suites.Result, n int) []suites.Result {
	out := make([]suites.Result, len(rs))
	for i, r := range rs {
		r.Samples = nil
		for _, s := range rs[i].Samples {
			if s.Round <= n {
				r.Samples = append(r.Samples, s)
			}
		}
		r.Rounds = nil
		for _, rd := range rs[i].Rounds {
			if rd.N <= n {
				r.Rounds = append(r.Rounds, rd)
			}
		}
		r.Plan, r.Stop = "", ""
		out[i] = r
	}
	return out
}
