package service

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/patchbot/patchbot/blame"
	"github.com/patchbot/patchbot/images"
	"github.com/patchbot/patchbot/mailbox"
	"github.com/patchbot/patchbot/reports"
	"github.com/patchbot/patchbot/reports/stats"
	"github.com/patchbot/patchbot/suites"
	"github.com/patchbot/patchbot/suites/invm"
	"github.com/patchbot/patchbot/vmrunner"
)

// Request is what one job tests: a series (its patch mails, in order), the
// thread to answer, and what to measure. It is stored with the job as JSON,
// so a restarted daemon can run the job again from it alone.
type Request struct {
	Title   string         `json:"title"`
	Patches [][]byte       `json:"patches"` // one am-ready mail per patch (mailbox.Series.Mails)
	Files   []string       `json:"files"`   // files the series touches
	Base    string         `json:"base,omitempty"`
	Thread  reports.Thread `json:"thread"`
	// Suites to run; empty means those the touched files select.
	Suites  []string `json:"suites,omitempty"`
	Profile string   `json:"profile"`
	Runs    int      `json:"runs"`
	// AA tests the base against itself (an A/A run): the series is not
	// applied, and a sound comparison must find no change.
	AA bool `json:"aa,omitempty"`
	// Command is the email command line this job answers, quoted in the
	// reply; empty for a series seen on a list or a run from the CLI.
	Command string `json:"command,omitempty"`
	// NoMail keeps the reply with the run (and on the dashboard) and mails
	// nobody: a run asked for on the dashboard.
	NoMail bool `json:"no_mail,omitempty"`
	// ReplyID is the reply's Message-ID; empty lets reports derive one
	// from the run. The daemon gives one per job, so that a job re-run
	// after a crash finds its reply already in the outbox.
	ReplyID string `json:"reply_id,omitempty"`
	// Incomplete marks a job that only checks, once its wait is over,
	// whether the series of this thread and version is still missing parts,
	// and if so answers why it was not tested.
	Incomplete *IncompleteCheck `json:"incomplete,omitempty"`

	// Tags are the subject's tags that may name a tree ("net-next").
	Tags []string `json:"tags,omitempty"`
	// BaseOverride is the base asked for (--base, base=): a tree's name,
	// "default", or a commit; it wins over Base and Tags.
	BaseOverride string `json:"base_override,omitempty"`
	// First and Last measure patches First..Last only (patches=M-N), on
	// top of patches 1..First-1; 0 measures the whole series.
	First int `json:"first,omitempty"`
	Last  int `json:"last,omitempty"`
	// Subjects are the patches' subjects, in order, for the per-patch
	// parts of the reply.
	Subjects []string `json:"subjects,omitempty"`
	// Series names the series across its versions, so that the reply to
	// v2 can say what v1 measured.
	Series SeriesKey `json:"series"`
}

// SeriesKey is a series across its versions: the same author and title.
type SeriesKey struct {
	Author  string `json:"author,omitempty"` // address only
	Title   string `json:"title,omitempty"`
	Version int    `json:"version,omitempty"`
}

// IncompleteCheck names the series an incomplete-series job looks at.
type IncompleteCheck struct {
	ThreadID string `json:"thread_id"`
	Author   string `json:"author"`
	Title    string `json:"title"`
	Version  int    `json:"version"`
}

// NewRequest describes the test of a complete series, answering the mail
// replyTo (the patch, the cover letter, or an email command).
func NewRequest(s *mailbox.Series, defaults SuitesConfig, replyTo string) *Request {
	req := &Request{Title: s.Subject, Patches: s.Mails(), Files: s.Files(), Base: s.Base,
		Profile: defaults.Profile, Runs: defaults.Runs,
		Series: SeriesKey{Author: mailbox.AddrOf(s.Author), Title: s.Title, Version: s.Version}}
	for _, p := range s.Patches {
		req.Subjects = append(req.Subjects, p.Subject)
	}
	req.Tags = subjectTags(s)
	p0 := s.Patches[0]
	req.Thread = reports.Thread{Subject: p0.Subject, MessageID: replyTo, References: p0.Message.References,
		Author: s.Author, Lists: append(append([]string{}, s.To...), s.Cc...)}
	if s.Cover != nil && replyTo == s.Cover.MessageID {
		req.Thread.Subject, req.Thread.References = s.Cover.Subject, s.Cover.References
	}
	return req
}

// ReplyTarget is the mail a series' reply answers: its cover letter, else
// its first patch.
func ReplyTarget(s *mailbox.Series) string {
	if s.Cover != nil {
		return s.Cover.MessageID
	}
	return s.Patches[0].MessageID
}

// CheckSuites says whether every suite named exists and has the profile,
// so that a bad name is refused before any kernel is built.
func CheckSuites(names []string, profile string) error {
	var errs []error
	for _, n := range names {
		s, err := suites.Lookup(n)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if _, err := s.Resolve(profile); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// SuiteNames are the suites the request runs: those it names, or those
// the touched files select; each is checked to exist with the request's
// profile, so that a bad name is refused before any kernel is built.
func (r *Request) SuiteNames() ([]string, error) {
	names := r.Suites
	if len(names) == 0 {
		sel, err := suites.Select(r.Files)
		if err != nil {
			return nil, fmt.Errorf("choosing suites: %w", err)
		}
		for _, s := range sel {
			names = append(names, s.Name)
		}
	}
	if len(names) == 0 {
		return nil, fmt.Errorf("no suite covers the files %v", r.Files)
	}
	if err := CheckSuites(names, r.Profile); err != nil {
		return nil, err
	}
	return names, nil
}

// CheckProfile says whether some suite has the profile: a profile no suite
// knows is refused at once, before the series is even read.
func CheckProfile(profile string) error {
	all, err := suites.All()
	if err != nil {
		return err
	}
	var names []string
	for _, s := range all {
		if _, ok := s.Profiles[profile]; ok || profile == "" {
			return nil
		}
		names = append(names, s.ProfileNames()...)
	}
	return fmt.Errorf("no suite has a profile %q (profiles: %s)", profile, strings.Join(slices.Compact(slices.Sorted(slices.Values(names))), ", "))
}

// Builder chooses the base and builds the kernels (images.Kernels):
// Choose picks the tree and commit, Base builds it, Patched builds a
// series (or a prefix of one) on it incrementally.
type Builder interface {
	Choose(ctx context.Context, w images.Want) (*images.Choice, error)
	Base(ctx context.Context, base images.Base) (*images.Build, error)
	Patched(ctx context.Context, base *images.Build, patches [][]byte) (*images.Build, error)
}

// Tester measures one suite on both kernels, rounds interleaved
// (invm.Tester).
type Tester interface {
	Test(ctx context.Context, s invm.Spec) (*invm.Outcome, error)
}

var (
	_ Builder = (*images.Kernels)(nil)
	_ Tester  = (*invm.Tester)(nil)
)

// Pipeline runs a Request through build, test and report.
type Pipeline struct {
	Builder  Builder
	Tester   Tester
	Reply    reports.ReplyOptions
	Progress io.Writer
	// VM is the shape the Tester measures in, for the reproduce commands.
	VM invm.VMConfig
	// Tree is the configured base tree, for the reproduce commands.
	Tree images.TreeConfig
	// Trees are the configured trees, fetched on a schedule by the daemon.
	Trees *images.Trees
	// History finds the earlier versions' runs (the store); nil for none.
	History History
	// ResultsURL gives the link to a run's results (the dashboard), from
	// its directory; nil gives none.
	ResultsURL func(runDir string) string
	// Publish, if set and ResultsURL gave no link, copies the finished run
	// directory somewhere public (a GitHub repository) and returns its URL
	// for the reply.
	Publish func(ctx context.Context, runDir, title string) (string, error)
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
// The stages: choose the base (images.Kernels.Choose), build it, build the
// series, each prefix of it one after the other when it has more than one
// patch; measure each suite A against B; when the series changed a
// primary metric and has more than one patch, bisect over the prefixes;
// set the earlier version's measurement beside this one; report.
func (p *Pipeline) Execute(ctx context.Context, req *Request, runDir string) (*Outcome, error) {
	names, err := req.SuiteNames()
	if err != nil {
		return nil, err
	}
	first, last, err := req.span()
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(runDir, 0o700); err != nil {
		return nil, fmt.Errorf("creating run directory: %w", err)
	}
	// Counters and times are positive with multiplicative noise: judge
	// them on the log scale (see reports/stats.LogWelch).
	run := &reports.Run{Thread: req.Thread, Runs: req.Runs, Options: reports.Options{Test: stats.LogWelch},
		ReplyID: req.ReplyID, Command: req.Command, Series: len(req.Patches)}
	if req.First > 0 {
		run.Range = &reports.PatchRange{First: first, Last: last, Total: len(req.Patches)}
	}
	var mbox bytes.Buffer
	if err := mailbox.WriteMbox(&mbox, req.Patches); err != nil {
		return nil, err
	}
	if err := writeArtifact(runDir, "series.mbox", mbox.Bytes()); err != nil {
		return nil, err
	}
	if p.ResultsURL != nil {
		run.ResultsURL = p.ResultsURL(runDir)
	}
	// choose, build base, apply and build, one build a patch when there
	// are several, the suites, report; a bisection adds its steps.
	st := &stages{p: p, total: 4 + len(names)}
	if last > 1 {
		st.total += last
	}
	stage := st.stage

	stage("choose the base")
	choice, err := p.Builder.Choose(ctx, images.Want{Override: req.BaseOverride, BaseCommit: req.Base,
		Tags: req.Tags, Patches: req.Patches[:last]})
	run.BaseChoice = baseChoiceOf(choice, err, req)
	if err != nil {
		if !blame.IsPatch(err) {
			return nil, fmt.Errorf("choosing the base: %w", err)
		}
		run.Failure = baseFailure(err)
		return p.finish(ctx, req, run, runDir, choice, st)
	}

	stage("build base")
	base, err := p.Builder.Base(ctx, choice.Base)
	if err != nil {
		return nil, fmt.Errorf("building the base kernel: %w", blame.On(blame.Base, err))
	}
	run.BaseCommit, run.BaseTitle, run.ConfigHash, run.Compiler = base.Commit, base.Title, base.ConfigHash, base.Compiler
	copyArtifact(base.Config, runDir, "config")
	if kc, err := os.ReadFile(base.Config); err == nil {
		run.Layout = reports.LayoutNote(kc)
	}
	copyArtifact(base.Log, runDir, "build-base.log")

	a, b := base, base
	var prefixes []*images.Build
	if req.AA {
		stage("A/A: the base kernel on both sides")
	} else {
		stage("apply and build patched")
		var failed bool
		prefixes, failed, err = p.buildSeries(ctx, req, run, base, last, runDir, st)
		if err != nil {
			return nil, err
		}
		if failed {
			return p.finish(ctx, req, run, runDir, choice, st)
		}
		b = prefixes[last]
		if first > 1 {
			a = prefixes[first-1]
		}
		for _, w := range images.AddedWarnings(a.NewWarnings, b.NewWarnings) {
			run.NewWarnings = append(run.NewWarnings, w.String())
		}
		copyArtifact(b.Log, runDir, "build-patched.log")
	}
	run.PatchedCommit = b.Head
	if run.PatchedCommit == "" {
		run.PatchedCommit = base.Commit // A/A, or a base build
	}
	run.Commands = p.repro(req, choice, base.Commit).Commands()

	// Runs 0: as many rounds as the evidence needs, by the sequential rule
	// (reports/stats.DefaultRule), on a host checked to be quiet around
	// each round; otherwise the number asked for.
	var plan *suites.Plan
	if req.Runs == 0 {
		pl := reports.Plan(stats.DefaultRule, run.Options)
		pl.Host = suites.ReadHostLoad(250 * time.Millisecond)
		pl.QuietWait = time.Minute
		pl.Repeats, pl.Calibrate = suites.BusyRepeats, suites.Calibrate
		plan = &pl
	}
	for _, name := range names {
		stage("run " + name)
		out, err := p.Tester.Test(ctx, invm.Spec{Suite: name, Profile: req.Profile, Runs: req.Runs, Plan: plan,
			Base: a, Patched: b, Progress: p.Progress})
		err = reblame(err, a != base)
		if blame.IsPatch(err) {
			run.Failure = failureOf(err)
			return p.finish(ctx, req, run, runDir, choice, st)
		}
		if err != nil {
			return nil, fmt.Errorf("running suite %s: %w", name, err)
		}
		run.Base = append(run.Base, *out.Base)
		run.Patched = append(run.Patched, *out.Patched)
		run.Accel, run.CPUs, run.MemMiB = out.Accel, out.CPUs, out.MemMiB
		if run.Model == nil {
			run.Model = reports.ModelOf(out.Base)
		}
	}
	if !req.AA && last-first >= 1 {
		if err := p.bisect(ctx, req, run, a, prefixes, first, last, runDir, st); err != nil {
			return nil, err
		}
	}
	p.previous(ctx, req, run)
	return p.finish(ctx, req, run, runDir, choice, st)
}

// span is the part of the series measured: First..Last, or all of it.
func (r *Request) span() (first, last int, err error) {
	n := len(r.Patches)
	if n == 0 {
		return 0, 0, errors.New("the request has no patches")
	}
	if r.First == 0 && r.Last == 0 {
		return 1, n, nil
	}
	if r.First < 1 || r.Last < r.First || r.Last > n {
		return 0, 0, fmt.Errorf("patches=%d-%d: the series has %d patches", r.First, r.Last, n)
	}
	return r.First, r.Last, nil
}

// reblame puts a failure of the A side on the patch when the A side is a
// prefix of the series (patches=M-N with M > 1), not the base.
func reblame(err error, aPatched bool) error {
	var ke *blame.KernelError
	if err == nil || !aPatched || !errors.As(err, &ke) || ke.Kernel != blame.Base {
		return err
	}
	return blame.On(blame.Patched, ke.Err)
}

// repro is the reproduce command of the run: the base it was tested on
// unless it was the default, and the patches measured.
func (p *Pipeline) repro(req *Request, c *images.Choice, commit string) reports.Repro {
	r := reports.Repro{MessageID: req.Thread.MessageID, Suites: req.Suites, Profile: req.Profile,
		Runs: req.Runs, CPUs: p.VM.CPUs, MemMiB: p.VM.MemMiB, Boot: p.VM.Boot, Tree: p.Tree.Tree, AA: req.AA}
	switch {
	case req.BaseOverride != "":
		r.Base = req.BaseOverride
	case c != nil && c.How != images.ByDefault:
		r.Base = commit
	}
	if req.First > 0 {
		r.Patches = fmt.Sprintf("%d-%d", req.First, req.Last)
	}
	return r
}

// failureOf is the evidence of a patch's failure, from the stage error
// that carries it.
func failureOf(err error) *reports.Failure {
	var (
		ae *images.ApplyError
		be *images.BuildError
		bo *vmrunner.BootError
		ge *vmrunner.GuestError
	)
	f := &reports.Failure{Kernel: string(blame.KernelOf(err))}
	switch {
	case errors.As(err, &ae):
		f.Stage, f.Patch = reports.StageApply, ae.Subject
		f.Detail = firstLine(ae.Hunk, fmt.Sprintf("patch %d does not apply", ae.Index))
		f.Excerpt = excerpt(string(ae.Output), 40)
	case errors.As(err, &be):
		f.Stage = reports.StageBuild
		f.Detail = firstLine(strings.Join(be.Lines, "\n"), "the kernel does not build")
		f.Excerpt = strings.Join(be.Lines, "\n")
	case errors.As(err, &bo):
		f.Stage, f.Detail, f.Excerpt = reports.StageBoot, bo.Reason, string(bo.Excerpt)
	case errors.As(err, &ge):
		f.Stage, f.Detail = reports.StageSuite, "the suite failed in the guest: "+ge.Msg
	default:
		f.Stage, f.Detail = reports.StageSuite, err.Error()
	}
	return f
}

func (p *Pipeline) finish(ctx context.Context, req *Request, run *reports.Run, runDir string, c *images.Choice, st *stages) (*Outcome, error) {
	st.stage("report")
	run.Finished = time.Now().UTC()
	if run.Commands == nil {
		run.Commands = p.repro(req, c, run.BaseCommit).Commands()
	}
	if err := reports.SaveRun(runDir, run); err != nil {
		return nil, err
	}
	if run.ResultsURL == "" && p.Publish != nil {
		// A failure to publish loses the link, not the reply.
		if u, err := p.Publish(ctx, runDir, run.Thread.Subject); err == nil {
			run.ResultsURL = u
			if err := reports.SaveRun(runDir, run); err != nil {
				return nil, err
			}
		} else if p.Progress != nil {
			fmt.Fprintf(p.Progress, "publishing the run directory failed: %v\n", err)
		}
	}
	reply, err := reports.Render(run, p.Reply)
	if err != nil {
		return nil, fmt.Errorf("rendering the reply: %w", err)
	}
	raw, err := reply.Bytes()
	if err != nil {
		return nil, fmt.Errorf("rendering the reply: %w", err)
	}
	if err := reports.SaveReply(runDir, raw); err != nil {
		return nil, err
	}
	return &Outcome{Run: run, Reply: reply, Raw: raw}, nil
}

// stages tells the terminal and OnStage each stage of one Execute as it
// starts, with how many are done of how many.
type stages struct {
	p           *Pipeline
	done, total int
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

// firstLine is the first non-empty line of s, or def.
func firstLine(s, def string) string {
	for _, l := range strings.Split(s, "\n") {
		if l = strings.TrimSpace(l); l != "" {
			return l
		}
	}
	return def
}

// excerpt keeps the last n lines of s: git am and the console put the
// decisive lines at the end.
func excerpt(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// writeArtifact keeps a file in the run directory, readable by patchbot
// alone (the dashboard serves it).
func writeArtifact(runDir, name string, data []byte) error {
	if err := os.WriteFile(filepath.Join(runDir, name), data, 0o600); err != nil {
		return fmt.Errorf("writing %s into the run directory: %w", name, err)
	}
	return nil
}

// copyArtifact keeps a build's file in the run directory; a missing source
// is skipped (the artifact is a convenience, the run does not depend on it).
func copyArtifact(src, runDir, name string) {
	if src == "" {
		return
	}
	if data, err := os.ReadFile(src); err == nil {
		writeArtifact(runDir, name, data)
	}
}
