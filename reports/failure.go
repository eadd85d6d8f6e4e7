package reports

import (
	"errors"
	"fmt"
	"strings"

	"github.com/patchbot/patchbot/images"
	"github.com/patchbot/patchbot/judge"
)

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
			f := judge.FailureOf(s.Err)
			pb.Stage = f.Stage
			switch f.Stage {
			case judge.StageApply:
				pb.Errors = headLines(f.Hunk, 12)
			case judge.StageBuild:
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
