package service

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"sort"
	"strings"

	"github.com/patchbot/patchbot/blame"
	"github.com/patchbot/patchbot/images"
	"github.com/patchbot/patchbot/mailbox"
	"github.com/patchbot/patchbot/reports"
	"github.com/patchbot/patchbot/reports/stats"
	"github.com/patchbot/patchbot/suites"
	"github.com/patchbot/patchbot/suites/invm"
)

// subjectTags are the tags of the cover letter's and the first patch's
// subjects that are neither PATCH, RFC, vN nor m/n: "net-next",
// "vfs.fixes".
func subjectTags(s *mailbox.Series) []string {
	subjects := []string{s.Subject}
	if len(s.Patches) > 0 {
		subjects = append(subjects, s.Patches[0].Subject)
	}
	var out []string
	seen := map[string]bool{}
	for _, subj := range subjects {
		for _, t := range mailbox.ParseSubject(subj).Prefixes {
			if k := strings.ToLower(t); !seen[k] {
				seen[k] = true
				out = append(out, t)
			}
		}
	}
	return out
}

// patchTitle is patch i's (1-based) subject without its tags.
func (r *Request) patchTitle(i int, fallback string) string {
	if i >= 1 && i <= len(r.Subjects) {
		if t := mailbox.ParseSubject(r.Subjects[i-1]).Title; t != "" {
			return t
		}
	}
	return fallback
}

// patchSubject is patch i's subject as posted, for a failure's Patch.
func (r *Request) patchSubject(i int, fallback string) string {
	if i >= 1 && i <= len(r.Subjects) {
		return r.Subjects[i-1]
	}
	return fallback
}

// baseChoiceOf is the run's account of the base: the choice, or the
// trees tried when the series applies to none.
func baseChoiceOf(c *images.Choice, err error, req *Request) *reports.BaseChoice {
	var out *reports.BaseChoice
	var tried []images.Attempt
	var nb *images.NoBaseError
	switch {
	case c != nil:
		out = &reports.BaseChoice{Tree: c.Tree, How: string(c.How), Detail: c.Detail, Notes: c.Notes}
		tried = c.Tried
	case errors.As(err, &nb):
		out = &reports.BaseChoice{How: reports.ByApplying}
		tried = nb.Tried
	default:
		return nil
	}
	n := len(req.Patches)
	for _, a := range tried {
		t := reports.TriedBase{Tree: a.Tree, Commit: a.Commit, Title: a.Title, Unavailable: a.Unavailable}
		if a.Err != nil {
			t.Patch = fmt.Sprintf("%d/%d (%q)", a.Err.Index, n, req.patchTitle(a.Err.Index, a.Err.Subject))
			t.Hunk = a.Err.Hunk
		}
		out.Tried = append(out.Tried, t)
	}
	return out
}

// baseFailure is the reply's failure when no base could be had for a
// reason that is the series' or the asker's.
func baseFailure(err error) *reports.Failure {
	var ub *images.UnknownBaseError
	if errors.As(err, &ub) {
		return &reports.Failure{Stage: reports.StageBase, Detail: ub.Error()}
	}
	var tm *images.TooManyPatchesError
	if errors.As(err, &tm) {
		return &reports.Failure{Stage: reports.StageSeries, Detail: tm.Error()}
	}
	return &reports.Failure{Stage: reports.StageApply, Detail: "the series applies to none of the trees tried"}
}

// buildSeries builds the series on base. A series of one patch is one
// patched build. A longer one is built prefix by prefix (1, 1..2, ...,
// 1..last), each incrementally from the base's objects, so that the first
// patch that breaks the build is named and each patch's new warnings are
// its own. prefixes[k] is the build of patches 1..k (prefixes[0] the
// base), nil where it failed. failed says that the run ends here: the
// prefix measured, or the one below the range, does not apply or build;
// run.Failure says why, naming the first patch at fault.
func (p *Pipeline) buildSeries(ctx context.Context, req *Request, run *reports.Run, base *images.Build,
	last int, runDir string, st *stages) (prefixes []*images.Build, failed bool, err error) {
	prefixes = make([]*images.Build, last+1)
	prefixes[0] = base
	n := len(req.Patches)
	var firstErr error
	firstIdx := 0
	prev := base
	for k := 1; k <= last; k++ {
		if last > 1 {
			st.stage(fmt.Sprintf("build %d/%d", k, n))
		}
		bd, err := p.Builder.Patched(ctx, base, req.Patches[:k])
		pb := reports.PatchBuild{Index: k, Subject: req.patchTitle(k, fmt.Sprintf("patch %d", k))}
		if err != nil {
			err = blame.On(blame.Patched, err)
			if !blame.IsPatch(err) {
				return nil, false, fmt.Errorf("building the patched kernel (patches 1-%d): %w", k, err)
			}
			var ae *images.ApplyError
			var be *images.BuildError
			switch {
			case errors.As(err, &ae):
				pb.Stage, pb.Errors = reports.StageApply, headLines(ae.Hunk, 12)
			case errors.As(err, &be):
				pb.Stage, pb.Errors = reports.StageBuild, be.Lines[:min(len(be.Lines), 20)]
			}
			run.Builds = append(run.Builds, pb)
			if firstErr == nil {
				firstErr, firstIdx = err, k
			}
			if ae != nil {
				break // every longer prefix holds the patch that does not apply
			}
			continue
		}
		for _, w := range images.AddedWarnings(prev.NewWarnings, bd.NewWarnings) {
			pb.NewWarnings = append(pb.NewWarnings, w.String())
		}
		prev, prefixes[k] = bd, bd
		run.Builds = append(run.Builds, pb)
	}
	if last == 1 {
		run.Builds = nil // one build: nothing to say per patch
	}
	first := 1
	if req.First > 0 {
		first = req.First
	}
	if prefixes[last] != nil && prefixes[first-1] != nil {
		return prefixes, false, nil
	}
	run.Failure = failureOf(firstErr)
	var ae *images.ApplyError
	if errors.As(firstErr, &ae) {
		firstIdx = ae.Index
		writeArtifact(runDir, "git-am.log", ae.Output)
	}
	if n > 1 {
		run.Failure.Patch = req.patchSubject(firstIdx, run.Failure.Patch)
	}
	var be *images.BuildError
	if errors.As(firstErr, &be) {
		copyArtifact(be.Log, runDir, "build-patched.log")
	}
	return prefixes, true, nil
}

func headLines(s string, n int) []string {
	var out []string
	for _, l := range strings.Split(strings.TrimRight(s, "\n"), "\n") {
		if len(out) == n {
			out = append(out, "[...]")
			break
		}
		out = append(out, l)
	}
	return out
}

// changed is the rule for "the series changed this metric": the
// comparison's own judgement (significant within its family, after the
// correction for the family's size), with a change to speak of.
func changed(r reports.Row) bool { return r.Significant && r.HasChange() }

// keyChange is the metric a bisection follows: of the rows the series
// changed, the most significant, then the largest change.
func keyChange(c *reports.Comparison) (reports.Row, bool) {
	var best reports.Row
	found := false
	for _, r := range c.Rows {
		if !changed(r) {
			continue
		}
		if !found || r.AdjustedP < best.AdjustedP ||
			(r.AdjustedP == best.AdjustedP && math.Abs(logRatio(r)) > math.Abs(logRatio(best))) {
			best, found = r, true
		}
	}
	return best, found
}

// logRatio is the size of a row's change on the log scale (the scale the
// suites' counters and times are judged on), or the relative change of a
// metric that is not positive.
func logRatio(r reports.Row) float64 {
	if r.Base.Mean > 0 && r.Patched.Mean > 0 {
		return math.Log(r.Patched.Mean / r.Base.Mean)
	}
	return r.Change
}

func sameRow(a, b reports.Row) bool {
	return a.Suite == b.Suite && a.Workload == b.Workload && a.Cell() == b.Cell() && a.Metric == b.Metric
}

// stepRuns is the runs a side at each bisection step: half the series'
// own, at least the fewest a test can judge.
func stepRuns(runs int) int {
	return min(max(stats.MinSamples, (runs+1)/2), max(runs, stats.MinSamples))
}

// bisect traces the series' change to its patches. When the whole series
// (or range) changed a primary metric, prefixes are measured against the
// A side with the same suite and fewer runs, in a binary search for the
// first prefix that carries at least half of the change (on the log
// scale): at most ceil(log2 n) measurements for n patches. The change
// comes from that patch when the prefix before it has almost none of the
// change (at most a quarter) and it almost all (at least three quarters);
// otherwise it is spread over the series. A failure of a step ends the
// bisection, not the run: the series' own result stands.
func (p *Pipeline) bisect(ctx context.Context, req *Request, run *reports.Run, a *images.Build,
	prefixes []*images.Build, first, last int, runDir string, st *stages) error {
	c, err := reports.Compare(run.Base, run.Patched, run.Options)
	if err != nil {
		return nil // the reply reports it
	}
	key, ok := keyChange(c)
	if !ok {
		return nil
	}
	whole := logRatio(key)
	if whole == 0 || math.IsNaN(whole) {
		return nil
	}
	n := len(req.Patches)
	bi := &reports.Bisection{Suite: key.Suite, Workload: key.Workload, Params: key.Params, Metric: key.Metric,
		Unit: key.Unit, HigherIsBetter: key.HigherIsBetter}
	steps := map[int]reports.BisectStep{}
	steps[last] = reports.BisectStep{Prefix: last, Subject: req.patchTitle(last, ""), Change: key.Change,
		Fraction: 1, Significant: true, Runs: key.Patched.N, Whole: true}
	runs := stepRuns(req.Runs)
	lo, hi := first-1, last
	for hi-lo > 1 {
		m := (lo + hi) / 2
		if prefixes[m] == nil {
			bi.Stopped = fmt.Sprintf("%d/%d does not build", m, n)
			break
		}
		st.total++
		st.stage(fmt.Sprintf("bisect: %s with patches 1-%d", key.Suite, m))
		out, err := p.Tester.Test(ctx, invm.Spec{Suite: key.Suite, Profile: req.Profile, Runs: runs,
			Base: a, Patched: prefixes[m], Progress: p.Progress})
		bi.Measurements++
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			if err = reblame(err, a.Series > 0); blame.IsPatch(err) {
				bi.Stopped = fmt.Sprintf("%d/%d fails: %s", m, n, failureOf(err).Detail)
			} else {
				bi.Stopped = "an infrastructure failure (kept in the log)"
				if p.Progress != nil {
					fmt.Fprintf(p.Progress, "bisect: %v\n", err)
				}
			}
			break
		}
		for side, r := range map[string]*suites.Result{"base": out.Base, "patched": out.Patched} {
			if data, err := json.MarshalIndent(r, "", "  "); err == nil {
				writeArtifact(runDir, fmt.Sprintf("bisect-%d-%s.json", m, side), data)
			}
		}
		st := reports.BisectStep{Prefix: m, Subject: req.patchTitle(m, ""), Runs: runs}
		sc, err := reports.Compare([]suites.Result{*out.Base}, []suites.Result{*out.Patched}, run.Options)
		found := false
		if err == nil {
			for _, r := range sc.Rows {
				if sameRow(r, key) {
					st.Change, st.Fraction = r.Change, logRatio(r)/whole
					st.Significant = changed(r) && math.Signbit(logRatio(r)) == math.Signbit(whole)
					found = true
				}
			}
		}
		if !found {
			bi.Stopped = fmt.Sprintf("%d/%d did not measure %s", m, n, key.Metric)
			break
		}
		steps[m] = st
		if st.Fraction >= 0.5 {
			hi = m
		} else {
			lo = m
		}
	}
	if bi.Stopped == "" {
		fLo := 0.0
		if lo >= first {
			fLo = steps[lo].Fraction
		}
		if fLo <= 0.25 && steps[hi].Fraction >= 0.75 {
			bi.Cause = hi
		} else {
			bi.Spread = true
		}
	}
	for _, s := range steps {
		bi.Steps = append(bi.Steps, s)
	}
	sort.Slice(bi.Steps, func(i, j int) bool { return bi.Steps[i].Prefix < bi.Steps[j].Prefix })
	run.Bisection = bi
	return nil
}
