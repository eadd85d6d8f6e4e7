package bisect

import (
	"context"
	"fmt"
	"io"

	"github.com/patchbot/patchbot/blame"
	"github.com/patchbot/patchbot/images"
	"github.com/patchbot/patchbot/judge"
	"github.com/patchbot/patchbot/suites/invm"
)

// A series whose patched kernel got into trouble (an oops, a BUG, a
// lockup, a hung task, an RCU stall, a panic, a hang) is traced to the
// patch that brought it as a bisection of builds is: prefixes of the
// series are tested against the same A side, in a binary search, each
// with the suite the trouble came in and as many rounds as it took (the
// trouble came in round n: n rounds). A prefix carries the trouble when
// its kernel gets into trouble of the same kind; one that runs the same
// rounds clean does not, which is evidence, not proof: trouble that comes
// under load may need more rounds than it had.

// TroubleConfig is one bisection of kernel trouble.
type TroubleConfig struct {
	Tester   invm.ABTester
	A        *images.Build
	Prefixes []*images.Build
	// First and Last are the patches measured (1-based); the trouble is
	// the whole series' (prefix Last).
	First, Last int
	Titles      []string
	// Trouble is the series' own, and Profile the suites' profile.
	Trouble *judge.Trouble
	Profile string
	// Progress gets the steps' boots and rounds; OnStep each step as it
	// starts.
	Progress io.Writer
	OnStep   func(name string)
}

// TroubleResult is which patch brought the trouble.
type TroubleResult struct {
	// Kind and Title are the series' trouble.
	Kind  string `json:"kind"`
	Title string `json:"title"`
	// Steps are the prefixes tested, ascending; the last is the whole
	// series' own run.
	Steps []TroubleStep `json:"steps"`
	// Cause is the patch that brought it (1-based); 0 when the search
	// stopped.
	Cause   int    `json:"cause,omitempty"`
	Stopped string `json:"stopped,omitempty"`
	// Measurements is the number of prefixes tested.
	Measurements int `json:"measurements"`
}

// TroubleStep is one prefix (patches 1..Prefix) tested against the A side.
type TroubleStep struct {
	Prefix  int    `json:"prefix"`
	Subject string `json:"subject"`
	// Trouble is the prefix's kernel's trouble (its title), "" when it ran
	// Rounds rounds clean.
	Trouble string `json:"trouble,omitempty"`
	Rounds  int    `json:"rounds"`
	Whole   bool   `json:"whole,omitempty"`
}

// Carries says whether the prefix brought trouble.
func (s TroubleStep) Carries() bool { return s.Trouble != "" }

// Trouble searches the series' prefixes for the patch that brought the
// trouble: at most ceil(log2 n) tests for n patches. A prefix that fails
// otherwise (it does not build, the infrastructure failed) ends the search
// (Stopped says why); the error is the context's alone.
func Trouble(ctx context.Context, cfg TroubleConfig) (*TroubleResult, error) {
	t := cfg.Trouble
	if t == nil || cfg.Last-cfg.First < 1 {
		return nil, nil
	}
	rounds := max(t.Round, 1)
	out := &TroubleResult{Kind: t.Kind, Title: t.Title,
		Steps: []TroubleStep{{Prefix: cfg.Last, Subject: title(cfg.Titles, cfg.Last), Trouble: t.Title, Rounds: rounds, Whole: true}}}
	plan := invm.FixedPlan(cfg.Profile, rounds, cfg.Progress)
	n := len(cfg.Titles)
	_, hi, stopped, err := search(cfg.Prefixes, n, cfg.First-1, cfg.Last, func(m int) (bool, string, error) {
		if cfg.OnStep != nil {
			cfg.OnStep(fmt.Sprintf("bisect the kernel trouble: %s with patches 1-%d", t.Suite, m))
		}
		_, err := cfg.Tester.Test(ctx, invm.Spec{Suite: t.Suite, Plan: plan, Base: cfg.A, Patched: cfg.Prefixes[m]})
		out.Measurements++
		step := TroubleStep{Prefix: m, Subject: title(cfg.Titles, m), Rounds: rounds}
		if err != nil {
			if ctx.Err() != nil {
				return false, "", ctx.Err()
			}
			err = invm.Reblame(err, cfg.A.Series > 0)
			if !blame.IsPatch(err) {
				return false, fmt.Sprintf("%d/%d: an infrastructure failure (kept in the log)", m, n), nil
			}
			got := judge.TroubleOf(err)
			if got == nil {
				return false, fmt.Sprintf("%d/%d failed otherwise: %s", m, n, judge.FailureOf(err).Detail), nil
			}
			step.Trouble = got.Title
		}
		out.add(step)
		return step.Carries(), "", nil
	})
	if err != nil {
		return nil, err
	}
	if out.Stopped = stopped; stopped == "" {
		out.Cause = hi
	}
	return out, nil
}

func (r *TroubleResult) add(s TroubleStep) {
	r.Steps = append(r.Steps, s)
	for i := len(r.Steps) - 1; i > 0 && r.Steps[i].Prefix < r.Steps[i-1].Prefix; i-- {
		r.Steps[i], r.Steps[i-1] = r.Steps[i-1], r.Steps[i]
	}
}
