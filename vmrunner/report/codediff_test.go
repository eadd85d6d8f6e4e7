package report

import (
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/patchbot/patchbot/internal/testenv"
)

// compile builds testdata/codediff/name.c into a program with debugging
// information, as the kernel is built: the same compiler, flags and file
// name (prog.c) for both sides.
func compile(t *testing.T, name string) *Symbolizer {
	t.Helper()
	gcc := testenv.Tool(t, "gcc")
	src, err := os.ReadFile(filepath.Join("testdata", "codediff", name+".c"))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "prog.c"), src, 0o644); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "prog")
	cmd := exec.Command(gcc, "-O2", "-g", "-fno-pie", "-no-pie", "-o", out, "prog.c")
	cmd.Dir = dir
	if msg, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("gcc: %v\n%s", err, msg)
	}
	s, err := Open(out)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// Two builds of one program, the second with a function that grew (a new
// string and a new variable besides), a #define changed and a function
// removed: every function after the one that grew moved, with its calls,
// its jumps into a switch's table, its strings and its variables, and
// only the two that the change reached are named, and the one removed. A program compared with itself has no
// changed function.
func TestCodeChangedSeesThroughMovedCode(t *testing.T) {
	base, patched := compile(t, "base"), compile(t, "patched")
	if a, b := base.funcs["dispatch"], patched.funcs["dispatch"]; len(a) != 1 || len(b) != 1 || a[0].Value == b[0].Value {
		t.Fatalf("dispatch did not move (%v, %v): the test shows nothing", a, b)
	}
	got, err := CodeChanged(base, patched)
	if err != nil {
		t.Fatal(err)
	}
	if want := (CodeDiff{Differs: []string{"grows", "uses_limit"}, Gone: []string{"only_in_base"}}); !reflect.DeepEqual(got, want) {
		t.Errorf("changed functions %+v, want %+v", got, want)
	}
	if same, err := CodeChanged(base, base); err != nil || len(same.Differs)+len(same.Gone)+same.More != 0 {
		t.Errorf("a program against itself: %+v, %v", same, err)
	}
}

// The lines' functions are marked with what the code said of them, and
// the functions found by their code alone follow.
func TestWithCode(t *testing.T) {
	lines := []Changed{{Func: "squashfs_cache_get", Lines: []string{"fs/squashfs/cache.c:70"}},
		{Func: "squashfs_cache_put", Lines: []string{"fs/squashfs/cache.c:180"}}}
	got, more := WithCode(lines, 0, CodeDiff{Differs: []string{"squashfs_fill_super", "squashfs_cache_get"}, Gone: []string{"squashfs_readahead"}})
	want := []Changed{
		{Func: "squashfs_cache_get", Lines: []string{"fs/squashfs/cache.c:70"}, Code: CodeDiffers},
		{Func: "squashfs_cache_put", Lines: []string{"fs/squashfs/cache.c:180"}, Code: CodeSame},
		{Func: "squashfs_fill_super", Code: CodeDiffers},
		{Func: "squashfs_readahead", Code: CodeGone},
	}
	if more != 0 || !reflect.DeepEqual(got, want) {
		t.Errorf("WithCode: %+v (more %d)", got, more)
	}
	// Past the comparison's bound, a function not named may differ:
	// it is not said to be the same.
	got, more = WithCode(lines[1:], 0, CodeDiff{More: 3})
	if more != 3 || got[0].Code != "" {
		t.Errorf("past the bound: %+v (more %d)", got, more)
	}
}
