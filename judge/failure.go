package judge

import (
	"errors"
	"fmt"
	"strings"

	"github.com/patchbot/patchbot/blame"
	"github.com/patchbot/patchbot/images"
	"github.com/patchbot/patchbot/vmrunner"
)

// A run that measured nothing to compare has for its outcome the stage
// where it stopped and the evidence (Failure), read from the stage's
// error once, here.

// Failure says why a run produced no comparison. Every failure described
// here is the patch's: infrastructure failures are retried, never mailed.
type Failure struct {
	Stage Stage  `json:"stage"`
	Patch string `json:"patch,omitempty"` // which patch, e.g. "[PATCH 2/3] fuse: ..."
	// Detail is one line: the failing hunk, the first compiler error, the
	// panic message.
	Detail string `json:"detail"`
	// Excerpt is the evidence quoted verbatim: the rejected hunk, the
	// compiler's error lines, the console around the panic.
	Excerpt string `json:"excerpt,omitempty"`
	// Kernel is the kernel that failed ("patched" unless said otherwise).
	Kernel string `json:"kernel,omitempty"`
	// Trouble is the patched kernel's own report of its trouble (an
	// oops, a BUG, a lockup, a hung task, an RCU stall, a panic) or its
	// hang, with the decoded trace and where it came (trouble.go); nil for
	// any other failure.
	Trouble *Trouble `json:"trouble,omitempty"`

	// The evidence in the stage's own terms, for a caller that shows more
	// than the reply (patchbot build --json, the per-patch list); the run
	// directory keeps the rest.
	Index int      `json:"-"` // the patch that does not apply, 1-based
	Hunk  string   `json:"-"` // the hunk git could not place
	Lines []string `json:"-"` // the compiler's error lines
	Log   string   `json:"-"` // the build log
}

// Stage is where a run stopped.
type Stage string

const (
	StageApply Stage = "apply"
	StageBuild Stage = "build"
	StageBoot  Stage = "boot"
	StageSuite Stage = "suite"
	// StageBase: the base asked for (base=, --base) is no tree and no
	// commit any tree has.
	StageBase Stage = "base"
	// StageConfig: the kernel config did not survive olddefconfig (the
	// infrastructure's: never a reply's).
	StageConfig Stage = "config"
	// StageSeries: the series itself is refused before any build (longer
	// than the configured number of patches).
	StageSeries Stage = "series"
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
		if f.Trouble = TroubleOf(err); f.Trouble != nil {
			f.Detail = f.Trouble.Headline()
			if bo.Op != "" {
				f.Stage = StageKernel
			}
		}
	case errors.As(err, &ge):
		f.Stage, f.Detail = StageSuite, "the suite failed in the guest: "+ge.Msg
	case blame.IsPatch(err):
		f.Stage, f.Detail = StageSuite, err.Error()
	default:
		f.Detail = err.Error()
	}
	return f
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
