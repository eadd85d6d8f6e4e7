package images

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/patchbot/patchbot/blame"
)

// Maker is what a test's kernels are made with: Kernels, or a fake in
// tests. Choose picks the tree and commit, Base builds it, Patched builds
// a series (or a prefix of one) on it incrementally.
type Maker interface {
	Choose(ctx context.Context, w Want) (*Choice, error)
	Base(ctx context.Context, base Base) (*Build, error)
	Patched(ctx context.Context, base *Build, patches [][]byte) (*Build, error)
}

var _ Maker = (*Kernels)(nil)

// SeriesJob is what one test builds.
type SeriesJob struct {
	// Want chooses the base; Want.Patches is the whole series, one mail a
	// patch, in order.
	Want Want
	// First and Last are the patches measured (1-based, both included), on
	// top of patches 1..First-1; the caller checked them.
	First, Last int
	// AA builds no series: the base is both kernels (an A/A run).
	AA bool
	// Whole builds patches 1..Last once (patchbot build), not prefix by
	// prefix.
	Whole bool
	// RunDir, when set, keeps the evidence: the base's config, the build
	// logs, git am's output of a patch that does not apply.
	RunDir string
	// OnStep is told each step as it starts ("choose the base", "build
	// base", "build 2/3"); nil for none.
	OnStep func(name string)
}

// SeriesBuild is what BuildSeries made of a job.
type SeriesBuild struct {
	Choice *Choice // nil when no base was had: Err says why
	Base   *Build
	// Prefixes[k] is the build of patches 1..k, Prefixes[0] the base; nil
	// where it failed or was not built.
	Prefixes []*Build
	// Steps are the prefixes built one by one, for a series of more than
	// one patch: which patch breaks the build, which adds warnings.
	Steps []Step
	// A and B are the kernels to measure: the base (or patches
	// 1..First-1) and patches 1..Last; the base on both sides of an A/A
	// run.
	A, B *Build
	// NewWarnings are the warnings B has that A does not.
	NewWarnings []Warning
	// Err is the patch's failure that leaves nothing to measure: the
	// series applies to none of the trees (NoBaseError), the base asked
	// for is unknown (UnknownBaseError), or the prefix measured, or the
	// one below the range, does not apply or build (blamed on the patched
	// kernel). Failed is the 1-based patch at fault, when one is.
	Err    error
	Failed int
}

// Releaser is a Maker that holds a run's kernels against eviction until
// the run ends (Kernels does: see Kernels.Done).
type Releaser interface {
	Done(base *Build, builds ...*Build)
}

// Done ends the run's hold on what BuildSeries made, when m holds its
// kernels: the base and the whole series stay cached, the shorter
// prefixes' builds go. Call it once the run no longer reads them.
func (s *SeriesBuild) Done(m Maker) {
	r, ok := m.(Releaser)
	if !ok || s.Base == nil {
		return
	}
	builds := s.Prefixes
	if len(builds) == 0 && s.B != nil && s.B != s.Base {
		builds = []*Build{s.B}
	}
	r.Done(s.Base, builds...)
}

// Step is one prefix of a series built: patches 1..Index.
type Step struct {
	Index int
	// Err is why it did not apply or build (blamed on the patched
	// kernel); nil when it built.
	Err error
	// Added are the warnings its last patch added to the prefix before.
	Added []Warning
}

// BuildSeries chooses the base (Maker.Choose: the one base choice of
// run, build and the daemon), builds it, and builds the series on it. A
// series of one patch is one patched build. A longer one is built prefix
// by prefix (1, 1..2, ..., 1..Last), each incrementally from the base's
// objects, so that the first patch that breaks the build is named and
// each patch's new warnings are its own. The error is the
// infrastructure's; a failure that is the patch's is SeriesBuild.Err.
func BuildSeries(ctx context.Context, m Maker, j SeriesJob) (*SeriesBuild, error) {
	step := func(name string) {
		if j.OnStep != nil {
			j.OnStep(name)
		}
	}
	patches := j.Want.Patches
	first, last := j.First, j.Last
	want := j.Want
	want.Patches = patches[:last]
	step("choose the base")
	choice, err := m.Choose(ctx, want)
	if err != nil {
		if !blame.IsPatch(err) {
			return nil, fmt.Errorf("choosing the base: %w", err)
		}
		return &SeriesBuild{Err: err}, nil
	}
	step("build base")
	base, err := m.Base(ctx, choice.Base)
	if err != nil {
		return nil, fmt.Errorf("building the base kernel: %w", blame.On(blame.Base, err))
	}
	sb := &SeriesBuild{Choice: choice, Base: base, A: base, B: base}
	keep(j.RunDir, base.Config, "config")
	keep(j.RunDir, base.Log, "build-base.log")
	if j.AA {
		step("A/A: the base kernel on both sides")
		return sb, nil
	}
	step("apply and build patched")
	sb.Prefixes = make([]*Build, last+1)
	sb.Prefixes[0] = base
	n := len(patches)
	var firstErr error
	prev := base
	for k := 1; k <= last; k++ {
		if j.Whole && k < last {
			continue
		}
		if last > 1 && !j.Whole {
			step(fmt.Sprintf("build %d/%d", k, n))
		}
		bd, err := m.Patched(ctx, base, patches[:k])
		st := Step{Index: k}
		if err != nil {
			err = blame.On(blame.Patched, err)
			if !blame.IsPatch(err) {
				return nil, fmt.Errorf("building the patched kernel (patches 1-%d): %w", k, err)
			}
			st.Err = err
			sb.Steps = append(sb.Steps, st)
			if firstErr == nil {
				firstErr, sb.Failed = err, k
			}
			var ae *ApplyError
			if errors.As(err, &ae) {
				break // every longer prefix holds the patch that does not apply
			}
			continue
		}
		st.Added = AddedWarnings(prev.NewWarnings, bd.NewWarnings)
		prev, sb.Prefixes[k] = bd, bd
		sb.Steps = append(sb.Steps, st)
	}
	if last == 1 || j.Whole {
		sb.Steps = nil // one build: nothing to say per patch
	}
	if sb.Prefixes[last] != nil && sb.Prefixes[first-1] != nil {
		sb.Failed = 0
		sb.A, sb.B = sb.Prefixes[first-1], sb.Prefixes[last]
		sb.NewWarnings = AddedWarnings(sb.A.NewWarnings, sb.B.NewWarnings)
		keep(j.RunDir, sb.B.Log, "build-patched.log")
		return sb, nil
	}
	sb.Err, sb.A, sb.B = firstErr, nil, nil
	var ae *ApplyError
	if errors.As(firstErr, &ae) {
		sb.Failed = ae.Index
		if j.RunDir != "" {
			os.WriteFile(filepath.Join(j.RunDir, "git-am.log"), ae.Output, 0o600)
		}
	}
	var be *BuildError
	if errors.As(firstErr, &be) {
		keep(j.RunDir, be.Log, "build-patched.log")
	}
	return sb, nil
}

// keep copies a build's file into the run directory, readable by patchbot
// alone (the dashboard serves it); a missing source is skipped: the
// artifact is a convenience, the run does not depend on it.
func keep(runDir, src, name string) {
	if runDir == "" || src == "" {
		return
	}
	if data, err := os.ReadFile(src); err == nil {
		os.WriteFile(filepath.Join(runDir, name), data, 0o600)
	}
}
