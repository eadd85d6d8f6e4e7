package reports

import (
	"reflect"
	"testing"

	"github.com/patchbot/patchbot/blame"
	"github.com/patchbot/patchbot/images"
	"github.com/patchbot/patchbot/judge"
)

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
		{Index: 2, Subject: "squashfs: two", Stage: judge.StageBuild, Errors: []string{"a.c:1: error: x"}},
		{Index: 3, Subject: "patch 3", Stage: judge.StageApply, Errors: []string{"@@ -1 +1 @@"}},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("BuildsOf:\n got %+v\nwant %+v", got, want)
	}
}
