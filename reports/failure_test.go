package reports

import (
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/patchbot/patchbot/blame"
	"github.com/patchbot/patchbot/images"
	"github.com/patchbot/patchbot/suites"
	"github.com/patchbot/patchbot/vmrunner"
)

// Each stage's error becomes its evidence in one place: the stage, one
// line, the excerpt to quote, and the kernel it happened on.
func TestFailureOf(t *testing.T) {
	am := strings.Repeat("Applying: something\n", 50) + "error: patch failed: fs/squashfs/cache.c:15\n"
	for _, tc := range []struct {
		name    string
		err     error
		stage   Stage
		detail  string
		excerpt string
		kernel  string
	}{
		{"apply", blame.On(blame.Patched, &images.ApplyError{Index: 2, Subject: "squashfs: b", Hunk: "\n  @@ -10 +10 @@\nctx", Output: []byte(am)}),
			StageApply, "@@ -10 +10 @@", "error: patch failed: fs/squashfs/cache.c:15", "patched"},
		{"build", blame.On(blame.Patched, &images.BuildError{Lines: []string{"a.c:1: error: x", "make: *** [a.o] Error 1"}}),
			StageBuild, "a.c:1: error: x", "a.c:1: error: x\nmake: *** [a.o] Error 1", "patched"},
		{"boot", blame.On(blame.Patched, &vmrunner.BootError{Reason: "kernel panic", Excerpt: []byte("Kernel panic - not syncing")}),
			StageBoot, "kernel panic", "Kernel panic - not syncing", "patched"},
		{"guest", blame.On(blame.Patched, &vmrunner.GuestError{Op: "run", Msg: "mount: no such device"}),
			StageSuite, "the suite failed in the guest: mount: no such device", "", "patched"},
		{"no base", &images.NoBaseError{}, StageApply, "the series applies to none of the trees tried", "", ""},
		{"unknown base", &images.UnknownBaseError{Ref: "nosuch", Trees: []string{"default"}}, StageBase,
			`base "nosuch" is neither a tree (default) nor a commit in one`, "", ""},
		{"config", &images.ConfigError{Dropped: []images.Dropped{{Option: "CONFIG_X", Want: "y"}}}, StageConfig,
			"config options did not survive olddefconfig: CONFIG_X=y (got absent)", "", ""},
		{"infra", fmt.Errorf("creating the VM: %w", errors.New("no qemu")), "", "creating the VM: no qemu", "", ""},
	} {
		f := FailureOf(tc.err)
		if f.Stage != tc.stage || f.Detail != tc.detail || f.Kernel != tc.kernel || !strings.HasSuffix(f.Excerpt, tc.excerpt) {
			t.Errorf("%s: %+v", tc.name, f)
		}
	}
	f := FailureOf(&images.ApplyError{Index: 2, Subject: "s", Output: []byte(am)})
	if n := strings.Count(f.Excerpt, "\n") + 1; n != 40 || f.Index != 2 || f.Patch != "s" {
		t.Errorf("apply: %d lines of git am's output, index %d, patch %q; want the last 40", n, f.Index, f.Patch)
	}
}

// A prefix that does not build lists its errors; one that adds a warning
// says so; a patch without a title is named by its number.
func TestBuildsOf(t *testing.T) {
	steps := []images.Step{
		{Index: 1, Added: []images.Warning{{File: "a.c", Line: 3, Message: "unused variable 'n'", Flag: "-Wunused-variable"}}},
		{Index: 2, Err: blame.On(blame.Patched, &images.BuildError{Lines: []string{"a.c:1: error: x"}})},
		{Index: 3, Err: blame.On(blame.Patched, &images.ApplyError{Index: 3, Hunk: "@@ -1 +1 @@"})},
	}
	got := BuildsOf(steps, []string{"squashfs: one", "squashfs: two", ""})
	want := []PatchBuild{
		{Index: 1, Subject: "squashfs: one", NewWarnings: []string{steps[0].Added[0].String()}},
		{Index: 2, Subject: "squashfs: two", Stage: StageBuild, Errors: []string{"a.c:1: error: x"}},
		{Index: 3, Subject: "patch 3", Stage: StageApply, Errors: []string{"@@ -1 +1 @@"}},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("BuildsOf:\n got %+v\nwant %+v", got, want)
	}
}

// The quick look's means are per metric and kernel, 0 where a kernel did
// not measure the metric.
func TestMeans(t *testing.T) {
	s := func(metric string, v float64) suites.Sample {
		return suites.Sample{Workload: "w", Params: map[string]string{"b": "2", "a": "1"}, Metric: metric, Unit: "u", Value: v}
	}
	rows := Means([]*suites.Result{
		{Samples: []suites.Sample{s("x", 1), s("x", 3), s("y", 5)}},
		{Samples: []suites.Sample{s("x", 6)}},
	})
	want := []MeanRow{{Workload: "w", Params: "a=1,b=2", Metric: "x", Unit: "u", Means: []float64{2, 6}},
		{Workload: "w", Params: "a=1,b=2", Metric: "y", Unit: "u", Means: []float64{5, 0}}}
	if !reflect.DeepEqual(rows, want) {
		t.Errorf("Means = %+v, want %+v", rows, want)
	}
}
