package service

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/patchbot/patchbot/images"
	"github.com/patchbot/patchbot/mailbox"
	"github.com/patchbot/patchbot/reports"
	"github.com/patchbot/patchbot/reports/stats"
	"github.com/patchbot/patchbot/suites"
	"github.com/patchbot/patchbot/vmrunner"
)

// Request is what one job tests: a series (its patch mails, in order), the
// thread to answer, and what to measure. It is stored with the job as JSON,
// so a restarted daemon can run the job again from it alone.
type Request struct {
	Title   string         `json:"title"`
	Patches [][]byte       `json:"patches"` // raw mails, one patch each, for git am
	Files   []string       `json:"files"`   // files the series touches
	Base    string         `json:"base,omitempty"`
	Thread  reports.Thread `json:"thread"`
	// Suites to run; empty means those the touched files select.
	Suites  []string `json:"suites,omitempty"`
	Profile string   `json:"profile"`
	Runs    int      `json:"runs"`
	// Command is the email command line this job answers, quoted in the
	// reply; empty for a series seen on a list or a run from the CLI.
	Command string `json:"command,omitempty"`
	// ReplyID is the reply's Message-ID; empty lets reports derive one
	// from the run. The daemon gives one per job, so that a job re-run
	// after a crash finds its reply already in the outbox.
	ReplyID string `json:"reply_id,omitempty"`
	// Incomplete marks a job that only checks, once its wait is over,
	// whether the series of this thread and version is still missing parts,
	// and if so answers why it was not tested.
	Incomplete *IncompleteCheck `json:"incomplete,omitempty"`
}

// IncompleteCheck names the series an incomplete-series job looks at.
type IncompleteCheck struct {
	ThreadID string `json:"thread_id"`
	Author   string `json:"author"`
	Title    string `json:"title"`
	Version  int    `json:"version"`
}

// Builder builds the base and patched kernels (images.Builder). Base gets
// the series' base-commit, if it gave one, to use when the tree has it.
type Builder interface {
	Base(ctx context.Context, baseCommit string) (*images.Build, error)
	Patched(ctx context.Context, base *images.Build, patches [][]byte) (*images.Build, error)
}

// Tester measures one suite on both kernels, rounds interleaved.
type Tester interface {
	Test(ctx context.Context, t TestSpec) (*TestOutcome, error)
}

// TestSpec is one suite's A/B measurement.
type TestSpec struct {
	Suite   string
	Profile string
	Runs    int
	Base    *images.Build
	Patched *images.Build
	// Progress gets a line per boot and round.
	Progress io.Writer
	// ConsoleDir keeps the VMs' console logs.
	ConsoleDir string
}

// TestOutcome is what a Tester measured, and the VM it measured in.
type TestOutcome struct {
	Base, Patched *suites.Result
	Info          vmrunner.Info
	CPUs, MemMiB  int
}

// Pipeline runs a Request through build, test and report.
type Pipeline struct {
	Builder Builder
	Tester  Tester
	// Model predicts wake-ups per cache release for cache-contention runs;
	// nil leaves the model out of the reply.
	Model    func(res *suites.Result) *reports.Model
	Reply    reports.ReplyOptions
	Progress io.Writer
	// Commands are the shell lines that reproduce a run, given its run
	// directory; printed in the reply.
	Commands func(req *Request, runDir string) []string
}

// Blame says whose fault a failed job was.
type Blame string

const (
	BlamePatch Blame = "patch" // answered in the thread with the evidence
	BlameInfra Blame = "infra" // retried with backoff, never mailed as the patch's fault
)

// Outcome is a finished job: the run (with a Failure when the patch is to
// blame) and its rendered reply.
type Outcome struct {
	Run   *reports.Run
	Reply *reports.Reply
	Raw   []byte // the reply as a mail
}

// Execute tests req and writes everything into runDir (run.json, results,
// logs, reply.eml). An error is the infrastructure's: the caller retries.
// A patch that does not apply, build or boot is not an error: the outcome
// carries the failure and the reply says so.
func (p *Pipeline) Execute(ctx context.Context, req *Request, runDir string) (*Outcome, error) {
	if err := os.MkdirAll(runDir, 0o755); err != nil {
		return nil, fmt.Errorf("creating run directory: %w", err)
	}
	// Counters and times are positive with multiplicative noise: judge
	// them on the log scale (see reports/stats.LogWelch).
	run := &reports.Run{Thread: req.Thread, Runs: req.Runs, Options: reports.Options{Test: stats.LogWelch}}
	if err := writeSeries(filepath.Join(runDir, "series.mbox"), req.Patches); err != nil {
		return nil, err
	}
	if p.Commands != nil {
		run.Commands = p.Commands(req, runDir)
	}
	stage := p.stage

	stage("build base")
	base, err := p.Builder.Base(ctx, req.Base)
	if err != nil {
		return nil, fmt.Errorf("building the base kernel: %w", err)
	}
	run.BaseCommit, run.ConfigHash, run.ConfigPath, run.Compiler = base.Commit, base.ConfigHash, base.Config, base.Compiler
	copyFile(base.Config, filepath.Join(runDir, "config"))

	stage("apply and build patched")
	patched, err := p.Builder.Patched(ctx, base, req.Patches)
	var applyErr *images.ApplyError
	var buildErr *images.BuildError
	switch {
	case errors.As(err, &applyErr):
		run.Failure = &reports.Failure{Stage: reports.StageApply, Patch: applyErr.Subject,
			Detail:  firstLine(applyErr.Hunk, fmt.Sprintf("patch %d does not apply", applyErr.Index)),
			Excerpt: excerpt(string(applyErr.Output), 40)}
		return p.finish(req, run, runDir)
	case errors.As(err, &buildErr):
		run.Failure = &reports.Failure{Stage: reports.StageBuild, Detail: firstLine(strings.Join(buildErr.Lines, "\n"), "the kernel does not build"),
			Excerpt: strings.Join(buildErr.Lines, "\n")}
		copyFile(buildErr.Log, filepath.Join(runDir, "build-patched.log"))
		return p.finish(req, run, runDir)
	case err != nil:
		return nil, fmt.Errorf("building the patched kernel: %w", err)
	}
	run.PatchedCommit = patched.Head
	if run.PatchedCommit == "" { // built before builds recorded their head
		run.PatchedCommit = fmt.Sprintf("%s+%d", short(patched.Commit), patched.Series)
	}
	for _, w := range patched.NewWarnings {
		run.NewWarnings = append(run.NewWarnings, w.String())
	}
	copyFile(patched.Log, filepath.Join(runDir, "build-patched.log"))

	names := req.Suites
	if len(names) == 0 {
		sel, err := suites.Select(req.Files)
		if err != nil {
			return nil, fmt.Errorf("choosing suites: %w", err)
		}
		for _, s := range sel {
			names = append(names, s.Name)
		}
	}
	if len(names) == 0 {
		return nil, fmt.Errorf("no suite covers the files %v", req.Files)
	}
	for _, name := range names {
		stage("run " + name)
		out, err := p.Tester.Test(ctx, TestSpec{Suite: name, Profile: req.Profile, Runs: req.Runs,
			Base: base, Patched: patched, Progress: p.Progress, ConsoleDir: runDir})
		var bootErr *vmrunner.BootError
		var guestErr *vmrunner.GuestError
		switch {
		case errors.As(err, &bootErr):
			run.Failure = &reports.Failure{Stage: reports.StageBoot, Kernel: "patched",
				Detail: bootErr.Reason, Excerpt: string(bootErr.Excerpt)}
			return p.finish(req, run, runDir)
		case errors.As(err, &guestErr):
			run.Failure = &reports.Failure{Stage: reports.StageSuite, Kernel: "patched",
				Detail: fmt.Sprintf("suite %s failed in the guest: %s", name, guestErr.Msg)}
			return p.finish(req, run, runDir)
		case err != nil:
			return nil, fmt.Errorf("running suite %s: %w", name, err)
		}
		run.Base = append(run.Base, *out.Base)
		run.Patched = append(run.Patched, *out.Patched)
		run.Accel, run.CPUs, run.MemMiB = out.Info.Accel, out.CPUs, out.MemMiB
		if p.Model != nil && run.Model == nil {
			run.Model = p.Model(out.Base)
		}
	}
	return p.finish(req, run, runDir)
}

func (p *Pipeline) finish(req *Request, run *reports.Run, runDir string) (*Outcome, error) {
	p.stage("report")
	run.Finished = time.Now().UTC()
	if err := reports.SaveRun(runDir, run); err != nil {
		return nil, err
	}
	reply, err := reports.Render(run, p.Reply)
	if err != nil {
		return nil, fmt.Errorf("rendering the reply: %w", err)
	}
	if req.Command != "" {
		reply.Body = "> " + req.Command + "\n\n" + reply.Body
	}
	if req.ReplyID != "" {
		reply.Header.MessageID = req.ReplyID
	}
	raw, err := reply.Bytes()
	if err != nil {
		return nil, fmt.Errorf("rendering the reply: %w", err)
	}
	if err := os.WriteFile(filepath.Join(runDir, reports.ReplyFile), raw, 0o644); err != nil {
		return nil, fmt.Errorf("writing the reply: %w", err)
	}
	return &Outcome{Run: run, Reply: reply, Raw: raw}, nil
}

func (p *Pipeline) stage(name string) {
	if p.Progress != nil {
		fmt.Fprintf(p.Progress, "== %s\n", name)
	}
}

// writeSeries keeps the patch mails as an mbox that git am (and patchbot
// run --mbox) accepts.
func writeSeries(path string, patches [][]byte) error {
	var b bytes.Buffer
	for _, p := range patches {
		if err := mailbox.WriteMboxEntry(&b, p); err != nil {
			return err
		}
	}
	if err := os.WriteFile(path, b.Bytes(), 0o644); err != nil {
		return fmt.Errorf("writing the series into the run directory: %w", err)
	}
	return nil
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

// copyFile keeps an artifact in the run directory; a missing source is
// skipped (the artifact is a convenience, the run does not depend on it).
func copyFile(src, dst string) {
	if src == "" {
		return
	}
	data, err := os.ReadFile(src)
	if err != nil {
		return
	}
	os.WriteFile(dst, data, 0o644)
}
