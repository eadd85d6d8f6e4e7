package judge

// The sequential rule on the rounds: Plan, what the pipeline runs the
// rounds by (when to look, when to stop), and Replay, the same rule on
// rounds already recorded, look by look (the panel, the known answers).
// Compare, one look, is in compare.go.

import (
	"errors"

	"github.com/patchbot/patchbot/judge/stats"
	"github.com/patchbot/patchbot/suites"
)

// Plan is the suites.Plan of a sequential A/B run judged with opt under
// rule: at least rule.Min rounds a side, then one more at a time until
// every primary metric is settled (Comparison.Settled), at most rule.Max.
// The rule is recorded in the results, so that judging them again (Compare,
// `patchbot compare`) applies it. The caller sets Host (for example
// suites.ReadHostLoad) to record and guard the host's load.
func Plan(rule stats.Rule, opt Options) suites.Plan {
	opt.Rule = &rule
	return suites.Plan{
		Min: rule.Min, Max: rule.Max, Rule: rule.String(),
		Settled: func(sides []*suites.Result) bool {
			c := planCompare(sides, opt)
			return c != nil && c.Settled()
		},
		Futile: func(sides []*suites.Result) bool {
			c := planCompare(sides, opt)
			return c != nil && c.Futile()
		},
	}
}

func planCompare(sides []*suites.Result, opt Options) *Comparison {
	if len(sides) != 2 || sides[0] == nil || sides[1] == nil {
		return nil
	}
	c, err := Compare([]suites.Result{*sides[0]}, []suites.Result{*sides[1]}, opt)
	if err != nil {
		return nil
	}
	return c
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
