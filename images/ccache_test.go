package images

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/patchbot/patchbot/internal/testenv"
)

// A base build's ccache runs in depend mode: a miss compiles once and takes
// the headers from the dependency file Kbuild asks gcc for
// (-Wp,-MMD,FILE), instead of running the preprocessor a second time. This
// compiles a file as Kbuild does, in the builder's environment, with the
// real ccache: the first compile runs no preprocessor, the second is a hit
// that gives back the dependency file (fixdep reads it), and a changed
// header is a miss, not a stale object.
func TestCcacheDependModeWithKbuildDependencyFiles(t *testing.T) {
	testenv.Tools(t, "gcc", "ccache")
	b := &Builder{Cache: t.TempDir()}
	src := filepath.Join(b.Cache, "kernels", "k", "tree") // below CCACHE_BASEDIR, as a real tree
	if err := os.MkdirAll(src, 0o755); err != nil {
		t.Fatal(err)
	}
	write := func(name, text string) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(src, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	run := func(args ...string) string {
		t.Helper()
		cmd := exec.Command(args[0], args[1:]...)
		cmd.Dir, cmd.Env = src, b.env(false)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("%s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	compile := func() {
		t.Helper()
		os.Remove(filepath.Join(src, ".a.o.d"))
		run("ccache", "gcc", "-Wp,-MMD,.a.o.d", "-O2", "-c", "-o", "a.o", "a.c")
		deps, err := os.ReadFile(filepath.Join(src, ".a.o.d"))
		if err != nil || !strings.Contains(string(deps), "h.h") {
			t.Fatalf("no dependency file naming h.h after the compile (%v): %q", err, deps)
		}
	}
	stats := func() map[string]int {
		t.Helper()
		m := map[string]int{}
		for _, line := range strings.Split(run("ccache", "--print-stats"), "\n") {
			k, v, ok := strings.Cut(line, "\t")
			if n, err := strconv.Atoi(v); ok && err == nil {
				m[k] = n
			}
		}
		return m
	}

	write("h.h", "#define N 1\n")
	write("a.c", "#include \"h.h\"\nint f(void) { return N; }\n")
	compile()
	s := stats()
	if s["cache_miss"] != 1 || s["preprocessed_cache_miss"] != 0 {
		t.Fatalf("first compile: want a miss with no preprocessor run (depend mode), got %v", s)
	}
	compile()
	if s = stats(); s["direct_cache_hit"] != 1 {
		t.Fatalf("second compile of the same file: want a hit, got %v", s)
	}
	write("h.h", "#define N 2\n")
	compile()
	if s = stats(); s["cache_miss"] != 2 || s["direct_cache_hit"] != 1 {
		t.Fatalf("after the header changed: want a second miss, not a hit, got %v", s)
	}
}
