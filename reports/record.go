package reports

import (
	"context"
	"fmt"
	"io"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/patchbot/patchbot/images"
	"github.com/patchbot/patchbot/judge"
)

// Findings are what the stages before the report made of one test: the
// kernels built, the suites' failure when it is the patch's, the
// bisection, and where the series' earlier versions' runs are.
type Findings struct {
	// Kernels are the base chosen and built, and the series built on it.
	Kernels *images.SeriesBuild
	// Subjects and Titles are the patches' subjects as posted and their
	// titles (tags aside), in order.
	Subjects, Titles []string
	// Failed is the suites' failure that is the patch's (a kernel that
	// does not boot, a suite that fails in its guest); nil for none.
	Failed error
	// Repro reproduces the run; Record sets the base it was tested on.
	Repro Repro
	// Earlier are the series' earlier versions' runs, the latest first;
	// Version is this one's.
	Earlier []Earlier
	Version int
	// OnStep, if set, is told when the report starts (Finish).
	OnStep func(string)
}

// Earlier is a run of an earlier version of the series.
type Earlier struct {
	Version int
	RunDir  string
}

// Record completes run from what the stages found: which base and why,
// the builds patch by patch and their new warnings, the failure with its
// evidence, the commands that reproduce it, the model's prediction, what
// the earlier version measured.
func (run *Run) Record(f Findings) {
	sb := f.Kernels
	n := len(f.Titles)
	if sb != nil {
		run.BaseChoice = BaseChoiceOf(sb.Choice, sb.Err, f.Titles)
		if sb.Err != nil {
			run.Failure = judge.FailureOf(sb.Err)
			if n > 1 && sb.Failed > 0 && sb.Failed <= len(f.Subjects) {
				run.Failure.Patch = f.Subjects[sb.Failed-1]
			}
		}
		if sb.Base != nil {
			b := sb.Base
			run.BaseCommit, run.BaseTitle, run.ConfigHash, run.Compiler = b.Commit, b.Title, b.ConfigHash, b.Compiler
			if kc, err := os.ReadFile(b.Config); err == nil {
				run.Layout = LayoutNote(kc)
			}
			run.Builds = BuildsOf(sb.Steps, f.Titles)
		}
		if sb.B != nil {
			for _, w := range sb.NewWarnings {
				run.NewWarnings = append(run.NewWarnings, w.String())
			}
			run.PatchedCommit = sb.B.Head
			if run.PatchedCommit == "" {
				run.PatchedCommit = sb.Base.Commit // A/A, or a base build
			}
		}
		if f.Repro.Base == "" && sb.Choice != nil && sb.Choice.How != images.ByDefault {
			f.Repro.Base = run.BaseCommit
		}
	}
	if f.Failed != nil && run.Failure == nil {
		run.Failure = judge.FailureOf(f.Failed)
	}
	run.KernelWarnings = judge.Warnings(run.Base, run.Patched)
	run.Exercised = judge.ExercisedOf(run.Base, run.Patched)
	run.Commands = f.Repro.Commands()
	for i := range run.Base {
		if run.Model = ModelOf(&run.Base[i]); run.Model != nil {
			break
		}
	}
	if f.Version >= 2 && run.Failure == nil {
		run.Previous = previousOf(run, f.Earlier)
	}
	run.Finished = time.Now().UTC()
}

// Publisher copies a run directory somewhere public and returns its URL
// (reports/publish: a GitHub repository).
type Publisher interface {
	Publish(ctx context.Context, runDir, name, message string) (string, error)
}

// PublishRun copies the run directory through pub and links it from the
// run (run.json is written again), unless the run has a link already (the
// dashboard's) or pub is nil.
func PublishRun(ctx context.Context, runDir string, run *Run, pub Publisher) error {
	if run.ResultsURL != "" || pub == nil {
		return nil
	}
	name := filepath.Base(filepath.Clean(runDir))
	u, err := pub.Publish(ctx, runDir, name, "run "+name+": "+run.Thread.Subject)
	if err != nil {
		return err
	}
	run.ResultsURL = u
	return SaveRun(runDir, run)
}

// RunURL is the address of a run's page on the dashboard at base, for the
// reply's "results:" line: runName is the run directory's name.
func RunURL(base, runName string) string {
	return strings.TrimRight(base, "/") + "/runs/" + url.PathEscape(runName) + "/"
}

// WriteReply renders the run's reply and keeps it in the run directory.
func WriteReply(runDir string, run *Run, opt ReplyOptions) (*Reply, []byte, error) {
	reply, err := Render(run, opt)
	if err != nil {
		return nil, nil, fmt.Errorf("rendering the reply: %w", err)
	}
	raw, err := reply.Bytes()
	if err != nil {
		return nil, nil, fmt.Errorf("rendering the reply: %w", err)
	}
	if err := SaveReply(runDir, raw); err != nil {
		return nil, nil, err
	}
	if reply.Full != "" { // the mail was cut at MaxBody; it names this file
		if err := os.WriteFile(filepath.Join(runDir, FullReplyFile), []byte(reply.Full), 0o600); err != nil {
			return nil, nil, fmt.Errorf("writing %s into the run directory: %w", FullReplyFile, err)
		}
	}
	return reply, raw, nil
}

// Finish records what the stages found in run, writes the run directory,
// publishes it (a failure to publish loses the link, not the reply: it is
// told to progress), and renders the reply.
func Finish(ctx context.Context, runDir string, run *Run, f Findings, opt ReplyOptions, pub Publisher,
	progress io.Writer) (*Reply, []byte, error) {
	if f.OnStep != nil {
		f.OnStep("report")
	}
	run.Record(f)
	if err := SaveRun(runDir, run); err != nil {
		return nil, nil, err
	}
	if err := PublishRun(ctx, runDir, run, pub); err != nil && progress != nil {
		fmt.Fprintf(progress, "publishing the run directory failed: %v\n", err)
	}
	return WriteReply(runDir, run, opt)
}

// previousOf is what the series' latest earlier version that was measured
// found on the metric this version changed most significantly, else the
// one the earlier version did; nil when there is none to set beside this
// run.
func previousOf(run *Run, earlier []Earlier) *Previous {
	cur, err := judge.Compare(run.Base, run.Patched, run.Options.Options)
	if err != nil {
		return nil
	}
	for _, e := range earlier {
		prev, err := LoadRun(e.RunDir)
		if err != nil || prev.Failure != nil || len(prev.Base) == 0 {
			continue
		}
		pc, err := judge.Compare(prev.Base, prev.Patched, prev.Options.Options)
		if err != nil {
			continue
		}
		key, ok := judge.KeyChange(cur)
		if !ok {
			if key, ok = judge.KeyChange(pc); !ok {
				continue // neither version changed anything: nothing to set side by side
			}
		}
		then, ok := pc.Find(key.MetricID)
		if !ok {
			continue
		}
		pv := &Previous{Version: e.Version, Tested: prev.Finished, MetricID: key.MetricID,
			Change: then.Change, Significant: then.Changed()}
		if now, ok := cur.Find(key.MetricID); ok {
			pv.Now, pv.NowSignificant, pv.NowMeasured = now.Change, now.Changed(), true
		}
		return pv
	}
	return nil
}
