package images

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/patchbot/patchbot/blame"
)

// fakeMaker builds nothing: the build of patches 1..k is a Build with
// Series k. Prefixes from breakAt on do not build, until mendAt; applyAt
// does not apply; warnAt adds a warning.
type fakeMaker struct {
	chooseErr                        error
	baseErr, patchErr                error
	breakAt, mendAt, applyAt, warnAt int
	built                            []int
}

func (f *fakeMaker) Choose(ctx context.Context, w Want) (*Choice, error) {
	if f.chooseErr != nil {
		return nil, f.chooseErr
	}
	return &Choice{Tree: DefaultTree, How: ByDefault}, nil
}

func (f *fakeMaker) Base(ctx context.Context, b Base) (*Build, error) {
	if f.baseErr != nil {
		return nil, f.baseErr
	}
	return &Build{Commit: "1111111111111111111111111111111111111111"}, nil
}

func (f *fakeMaker) Patched(ctx context.Context, base *Build, patches [][]byte) (*Build, error) {
	k := len(patches)
	f.built = append(f.built, k)
	switch {
	case f.patchErr != nil:
		return nil, f.patchErr
	case f.applyAt > 0 && k >= f.applyAt:
		return nil, &ApplyError{Index: f.applyAt, Subject: fmt.Sprintf("step %d", f.applyAt), Hunk: "@@ -1 +1 @@", Output: []byte("git am says no")}
	case f.breakAt > 0 && k >= f.breakAt && (f.mendAt == 0 || k < f.mendAt):
		return nil, &BuildError{Lines: []string{"fs/squashfs/cache.c:40:2: error: 'x' undeclared"}}
	}
	b := &Build{Commit: base.Commit, Head: fmt.Sprintf("%040d", k), Series: k}
	if f.warnAt > 0 && k >= f.warnAt {
		b.NewWarnings = []Warning{{File: "fs/squashfs/cache.c", Line: 12, Message: "unused variable 'n'", Flag: "-Wunused-variable"}}
	}
	return b, nil
}

func job(n, first, last int) SeriesJob {
	mails := make([][]byte, n)
	return SeriesJob{Want: Want{Patches: mails}, First: first, Last: last}
}

// A series of several patches is built prefix by prefix: the kernels to
// measure are prefix First-1 and prefix Last, each step says what its
// last patch added, and the steps are announced.
func TestBuildSeriesPrefixByPrefix(t *testing.T) {
	m := &fakeMaker{warnAt: 2}
	j := job(3, 1, 3)
	var steps []string
	j.OnStep = func(s string) { steps = append(steps, s) }
	sb, err := BuildSeries(context.Background(), m, j)
	if err != nil || sb.Err != nil {
		t.Fatalf("BuildSeries = %+v, %v", sb, err)
	}
	if !reflect.DeepEqual(m.built, []int{1, 2, 3}) || sb.A != sb.Base || sb.B.Series != 3 {
		t.Errorf("built %v, A %+v, B %+v", m.built, sb.A, sb.B)
	}
	if len(sb.Steps) != 3 || len(sb.Steps[1].Added) != 1 || len(sb.Steps[2].Added) != 0 || len(sb.NewWarnings) != 1 {
		t.Errorf("steps %+v, new warnings %v: want 2/3's warning alone", sb.Steps, sb.NewWarnings)
	}
	want := []string{"choose the base", "build base", "apply and build patched", "build 1/3", "build 2/3", "build 3/3"}
	if !reflect.DeepEqual(steps, want) {
		t.Errorf("steps %q, want %q", steps, want)
	}

	// patches=2-3: A is the build of patch 1.
	sb, _ = BuildSeries(context.Background(), &fakeMaker{}, job(3, 2, 3))
	if sb.A.Series != 1 || sb.B.Series != 3 {
		t.Errorf("patches 2-3: A %d, B %d patches; want 1 and 3", sb.A.Series, sb.B.Series)
	}
}

// The first patch that breaks the build is the patch's fault, named; a
// later patch that mends it leaves the series measurable; a patch that
// does not apply ends the builds, and git am's output is kept.
func TestBuildSeriesFailures(t *testing.T) {
	sb, err := BuildSeries(context.Background(), &fakeMaker{breakAt: 2}, job(3, 1, 3))
	if err != nil || sb.Failed != 2 || !blame.IsPatch(sb.Err) || blame.KernelOf(sb.Err) != blame.Patched || sb.B != nil {
		t.Errorf("broken at 2: %+v, %v", sb, err)
	}
	sb, _ = BuildSeries(context.Background(), &fakeMaker{breakAt: 2, mendAt: 3}, job(3, 1, 3))
	if sb.Err != nil || sb.Steps[1].Err == nil || sb.B.Series != 3 {
		t.Errorf("mended at 3: %+v", sb)
	}
	dir := t.TempDir()
	m := &fakeMaker{applyAt: 2}
	j := job(3, 1, 3)
	j.RunDir = dir
	sb, _ = BuildSeries(context.Background(), m, j)
	var ae *ApplyError
	if !errors.As(sb.Err, &ae) || sb.Failed != 2 || !reflect.DeepEqual(m.built, []int{1, 2}) {
		t.Errorf("does not apply at 2: %+v, built %v", sb, m.built)
	}
	if out, err := os.ReadFile(filepath.Join(dir, "git-am.log")); err != nil || string(out) != "git am says no" {
		t.Errorf("git-am.log: %q, %v", out, err)
	}
}

// No base for the series is the patch's answer, not an error; a base
// that does not build, or a tool that fails, is the infrastructure's.
func TestBuildSeriesBlame(t *testing.T) {
	sb, err := BuildSeries(context.Background(), &fakeMaker{chooseErr: &NoBaseError{}}, job(1, 1, 1))
	if err != nil || sb.Choice != nil || sb.Base != nil || sb.Err == nil {
		t.Errorf("no base: %+v, %v", sb, err)
	}
	for name, m := range map[string]*fakeMaker{
		"choose":  {chooseErr: errors.New("git fetch failed")},
		"base":    {baseErr: &BuildError{Lines: []string{"the base does not build"}}},
		"patched": {patchErr: &InfraError{Op: "make", Err: ErrNoSpace}},
	} {
		if sb, err := BuildSeries(context.Background(), m, job(1, 1, 1)); err == nil || blame.Of(err) != blame.Infra {
			t.Errorf("%s: %+v, %v; want the infrastructure's error", name, sb, err)
		}
	}
}

// patchbot build builds the whole series once; an A/A run builds no
// series at all.
func TestBuildSeriesWholeAndAA(t *testing.T) {
	m := &fakeMaker{}
	j := job(3, 1, 3)
	j.Whole = true
	sb, err := BuildSeries(context.Background(), m, j)
	if err != nil || !reflect.DeepEqual(m.built, []int{3}) || sb.B.Series != 3 || sb.Steps != nil {
		t.Errorf("whole: built %v, %+v, %v", m.built, sb, err)
	}
	m = &fakeMaker{}
	j = job(3, 1, 3)
	j.AA = true
	sb, err = BuildSeries(context.Background(), m, j)
	if err != nil || len(m.built) != 0 || sb.A != sb.Base || sb.B != sb.Base {
		t.Errorf("A/A: built %v, %+v, %v", m.built, sb, err)
	}
}
