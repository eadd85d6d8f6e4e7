package reports

import (
	"errors"
	"fmt"
	"strings"

	"github.com/patchbot/patchbot/blame"
	"github.com/patchbot/patchbot/images"
	"github.com/patchbot/patchbot/vmrunner"
)

// FailureOf is the evidence of a failure, from the stage error that
// carries it: the one place where a stage's error becomes what a reply
// quotes, `patchbot build` prints and a per-patch list shows. Each stage's
// error type holds its evidence (images.ApplyError its hunk and git am's
// output, images.BuildError the compiler's lines, vmrunner.BootError the
// console); no stage's wording is read. An error that says nothing is the
// suite's when it is the patch's, else nobody's stage.
func FailureOf(err error) *Failure {
	var (
		ub *images.UnknownBaseError
		nb *images.NoBaseError
		tm *images.TooManyPatchesError
		ae *images.ApplyError
		be *images.BuildError
		ce *images.ConfigError
		bo *vmrunner.BootError
		ge *vmrunner.GuestError
	)
	f := &Failure{Kernel: string(blame.KernelOf(err))}
	switch {
	case errors.As(err, &ub):
		f.Stage, f.Detail = StageBase, ub.Error()
	case errors.As(err, &tm):
		f.Stage, f.Detail = StageSeries, tm.Error()
	case errors.As(err, &nb):
		f.Stage, f.Detail = StageApply, "the series applies to none of the trees tried"
	case errors.As(err, &ae):
		f.Stage, f.Patch, f.Index, f.Hunk = StageApply, ae.Subject, ae.Index, ae.Hunk
		f.Detail = firstLine(ae.Hunk, fmt.Sprintf("patch %d does not apply", ae.Index))
		f.Excerpt = lastLines(string(ae.Output), 40)
	case errors.As(err, &be):
		f.Stage, f.Lines, f.Log = StageBuild, be.Lines, be.Log
		f.Detail = firstLine(strings.Join(be.Lines, "\n"), "the kernel does not build")
		f.Excerpt = strings.Join(be.Lines, "\n")
	case errors.As(err, &ce):
		f.Stage, f.Detail = StageConfig, err.Error()
	case errors.As(err, &bo):
		f.Stage, f.Detail, f.Excerpt = StageBoot, bo.Reason, string(bo.Excerpt)
	case errors.As(err, &ge):
		f.Stage, f.Detail = StageSuite, "the suite failed in the guest: "+ge.Msg
	case blame.IsPatch(err):
		f.Stage, f.Detail = StageSuite, err.Error()
	default:
		f.Detail = err.Error()
	}
	return f
}

// BaseChoiceOf is the run's account of its base: the choice, or the trees
// tried when the series applies to none. titles are the patches' titles,
// to name the one that did not apply.
func BaseChoiceOf(c *images.Choice, err error, titles []string) *BaseChoice {
	var out *BaseChoice
	var tried []images.Attempt
	var nb *images.NoBaseError
	switch {
	case c != nil:
		out = &BaseChoice{Tree: c.Tree, How: string(c.How), Detail: c.Detail, Notes: c.Notes}
		tried = c.Tried
	case errors.As(err, &nb):
		out = &BaseChoice{How: ByApplying}
		tried = nb.Tried
	default:
		return nil
	}
	for _, a := range tried {
		t := TriedBase{Tree: a.Tree, Commit: a.Commit, Title: a.Title, Unavailable: a.Unavailable}
		if a.Err != nil {
			t.Patch = fmt.Sprintf("%d/%d (%q)", a.Err.Index, len(titles), Title(titles, a.Err.Index, a.Err.Subject))
			t.Hunk = a.Err.Hunk
		}
		out.Tried = append(out.Tried, t)
	}
	return out
}

// BuildsOf are a series' prefix builds as the reply lists them, with the
// patches' titles.
func BuildsOf(steps []images.Step, titles []string) []PatchBuild {
	var out []PatchBuild
	for _, s := range steps {
		pb := PatchBuild{Index: s.Index, Subject: Title(titles, s.Index, fmt.Sprintf("patch %d", s.Index))}
		if s.Err != nil {
			f := FailureOf(s.Err)
			pb.Stage = f.Stage
			switch f.Stage {
			case StageApply:
				pb.Errors = headLines(f.Hunk, 12)
			case StageBuild:
				pb.Errors = f.Lines[:min(len(f.Lines), 20)]
			}
		}
		for _, w := range s.Added {
			pb.NewWarnings = append(pb.NewWarnings, w.String())
		}
		out = append(out, pb)
	}
	return out
}

// Title is patch i's (1-based) title, or fallback when it has none.
func Title(titles []string, i int, fallback string) string {
	if i >= 1 && i <= len(titles) && titles[i-1] != "" {
		return titles[i-1]
	}
	return fallback
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

// lastLines keeps the last n lines of s: git am and the console put the
// decisive lines at the end.
func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// headLines keeps the first n lines of s, and says when there were more.
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
