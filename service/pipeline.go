package service

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/patchbot/patchbot/bisect"
	"github.com/patchbot/patchbot/blame"
	"github.com/patchbot/patchbot/images"
	"github.com/patchbot/patchbot/intake"
	"github.com/patchbot/patchbot/judge"
	"github.com/patchbot/patchbot/judge/stats"
	"github.com/patchbot/patchbot/mailbox"
	"github.com/patchbot/patchbot/reports"
	"github.com/patchbot/patchbot/suites"
	"github.com/patchbot/patchbot/suites/invm"
)

// Pipeline runs a Request through the stages: the series' mail, the
// kernels, the suites, the bisection, the report.
type Pipeline struct {
	// Builder chooses the base and builds the kernels (images.Kernels).
	Builder images.Maker
	// Tester measures one suite on both kernels, rounds interleaved
	// (invm.Tester).
	Tester   invm.ABTester
	Reply    reports.ReplyOptions
	Progress io.Writer
	// VM is the shape the Tester measures in, for the reproduce commands.
	VM invm.VMConfig
	// Tree is the configured base tree, for the reproduce commands.
	Tree images.TreeConfig
	// Trees are the configured trees, fetched on a schedule by the daemon.
	Trees *images.Trees
	// History finds the earlier versions' runs (the store); nil for none.
	History intake.History
	// ResultsURL gives the link to a run's results (the dashboard), from
	// its directory; nil gives none.
	ResultsURL func(runDir string) string
	// Publish, if set and ResultsURL gave no link, copies the finished run
	// directory somewhere public (a GitHub repository) for the reply's
	// link.
	Publish reports.Publisher
	// OnStage, if set, is told each stage as it starts: its name, and how
	// many of the job's stages are done of how many.
	OnStage func(name string, done, total int)
}

// Outcome is a finished job: the run (with a Failure when the patch is to
// blame) and its rendered reply.
type Outcome struct {
	Run   *reports.Run
	Reply *reports.Reply
	Raw   []byte // the reply as a mail
}

// Execute tests req and writes everything into runDir (run.json, results,
// logs, reply.eml). A returned error is never the patch's (blame.Of says
// Infra): the caller retries. A patch that does not apply, build, boot or
// survive its suites is not an error: the outcome carries the failure and
// the reply says so.
//
// It only sequences the stages, each entered once, in the order of the
// data path: the series' mail (mailbox), the base chosen and built and the
// series built on it, prefix by prefix when it has more than one patch
// (images.BuildSeries), each suite measured A against B (invm.Measure),
// the change (bisect.Run) or the kernel's trouble (bisect.Trouble) traced
// to its patch in a series of more than one, and the run recorded, set
// beside the earlier version's and answered (reports.Finish). A stage that
// finds the patch at fault leaves the later ones nothing to do but the
// report.
func (p *Pipeline) Execute(ctx context.Context, req *intake.Request, runDir string) (*Outcome, error) {
	// A failure to read the history leaves the reply without the earlier
	// version's figures, and is said on progress.
	earlier, err := req.Earlier(ctx, p.History)
	if err != nil && p.Progress != nil {
		fmt.Fprintf(p.Progress, "reroll: %v\n", err)
	}
	first, last, err := req.Span()
	if err != nil {
		return nil, err
	}
	series := req.Series
	// The mail: the series as git am applies it, its patches' titles
	// and subjects.
	mails, titles, subjects := series.Mails(), series.Titles(), series.Subjects()
	if err := os.MkdirAll(runDir, 0o700); err != nil {
		return nil, fmt.Errorf("creating run directory: %w", err)
	}
	// Counters and times are positive with multiplicative noise: judge
	// them on the log scale (see judge/stats.LogWelch).
	opts := judge.Options{Test: stats.LogWelch}
	run := &reports.Run{Runs: req.Runs, Options: reports.Options{Options: opts}}
	repro, err := req.Describe(run, reports.Repro{CPUs: p.VM.CPUs, MemMiB: p.VM.MemMiB, Boot: p.VM.Boot, Tree: p.Tree.Tree})
	if err != nil {
		return nil, err
	}
	if p.ResultsURL != nil {
		run.ResultsURL = p.ResultsURL(runDir)
	}
	// Runs 0: as many rounds as the evidence needs, by the sequential rule
	// (judge/stats.DefaultRule), on a host checked to be quiet around
	// each round; otherwise the number asked for.
	plan := invm.FixedPlan(req.Profile, req.Runs, p.Progress)
	if req.Runs == 0 {
		plan.Stop, plan.Quiet = judge.Rounds{Rule: stats.DefaultRule, Options: opts}, suites.HostQuiet()
	}
	// choose, build base, apply and build (one build a patch when there
	// are several), the suites, report; a bisection adds its steps.
	st := &stages{p: p, total: 4 + len(req.Suites), suites: len(req.Suites)}
	if last > 1 {
		st.total += last
	}

	if err := mailbox.SaveMbox(filepath.Join(runDir, "series.mbox"), mails); err != nil {
		return nil, err
	}

	// The kernels: the base, and the series built on it.
	kernels, err := images.BuildSeries(ctx, p.Builder, images.SeriesJob{
		Want:  images.Want{Override: req.BaseOverride, BaseCommit: series.Base, Tags: series.Tags, Patches: mails},
		First: first, Last: last, AA: req.AA, RunDir: runDir, OnStep: st.stage})
	if err != nil {
		return nil, err
	}
	// The run holds its kernels against eviction until it ends; then the
	// prefix builds go.
	defer kernels.Done(p.Builder)

	// The suites, A against B.
	var failed error
	if kernels.Err == nil {
		m, err := invm.Measure(ctx, p.Tester, invm.Job{Suites: req.Suites, Files: series.Files, Plan: plan,
			Base: kernels.A, Patched: kernels.B, BaseIsPrefix: first > 1, OnSuite: st.suite})
		if err != nil && !blame.IsPatch(err) {
			return nil, err
		}
		failed = err
		run.Base, run.Patched = m.Base, m.Patched
		run.Accel, run.Clock, run.CPUs, run.MemMiB = m.Accel, m.Clock, m.CPUs, m.MemMiB
	}

	// The patch the change, or the kernel's trouble, comes from.
	if kernels.Err == nil && !req.AA && last-first >= 1 {
		if failed == nil {
			run.Bisection, err = bisect.Run(ctx, bisect.Config{Tester: p.Tester, Base: run.Base, Patched: run.Patched,
				Options: opts, A: kernels.A, Prefixes: kernels.Prefixes, First: first, Last: last, Titles: titles,
				Profile: req.Profile, Runs: req.Runs, RunDir: runDir, Progress: p.Progress, OnStep: st.extra})
		} else if t := judge.TroubleOf(failed); t != nil && blame.KernelOf(failed) == blame.Patched {
			run.TroubleBisection, err = bisect.Trouble(ctx, bisect.TroubleConfig{Tester: p.Tester, A: kernels.A,
				Prefixes: kernels.Prefixes, First: first, Last: last, Titles: titles, Trouble: t, Profile: req.Profile,
				Progress: p.Progress, OnStep: st.extra})
		}
		if err != nil {
			return nil, err
		}
	}

	// The report: the run recorded beside the earlier version's, its reply.
	reply, raw, err := reports.Finish(ctx, runDir, run, reports.Findings{Kernels: kernels, Subjects: subjects,
		Titles: titles, Failed: failed, Repro: repro, Earlier: earlier, Version: series.Version, OnStep: st.stage},
		p.Reply, p.Publish, p.Progress)
	if err != nil {
		return nil, err
	}
	return &Outcome{Run: run, Reply: reply, Raw: raw}, nil
}

// stages tells the terminal and OnStage each stage of one Execute as it
// starts, with how many are done of how many.
type stages struct {
	p           *Pipeline
	done, total int
	suites      int // the suites counted in total until they are known
}

func (s *stages) stage(name string) {
	if s.p.Progress != nil {
		fmt.Fprintf(s.p.Progress, "== %s\n", name)
	}
	s.total = max(s.total, s.done+1)
	if s.p.OnStage != nil {
		s.p.OnStage(name, s.done, s.total)
	}
	s.done++
}

// suite is a suite's stage; the first one corrects the count of suites.
func (s *stages) suite(name string, n int) {
	if s.suites >= 0 {
		s.total += n - s.suites
		s.suites = -1
	}
	s.stage("run " + name)
}

// extra is a stage beyond those counted at the start (a bisection's step).
func (s *stages) extra(name string) {
	s.total++
	s.stage(name)
}
