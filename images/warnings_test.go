package images

import (
	"os"
	"reflect"
	"strings"
	"testing"
)

// scanLog streams text through a buildLog, as a build's output is.
func scanLog(t *testing.T, text string, limit int64) (*buildLog, *scan) {
	t.Helper()
	f, err := os.CreateTemp(t.TempDir(), "log")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	l := newBuildLog(f, limit)
	sc := l.begin()
	// In small, odd pieces: lines arrive split across writes.
	for b := []byte(text); len(b) > 0; {
		n := min(len(b), 7)
		l.Write(b[:n])
		b = b[n:]
	}
	l.flushLine()
	if err := l.finish(); err != nil {
		t.Fatal(err)
	}
	return l, sc
}

const baseLog = `  CC      fs/squashfs/file.o
../fs/squashfs/file.c:100:5: warning: unused variable 'x' [-Wunused-variable]
  100 |  int x;
      |      ^
../kernel/sched/core.c:7:1: warning: no previous prototype for 'f' [-Wmissing-prototypes]
`

const patchedLog = `  CC      fs/squashfs/file.o
../fs/squashfs/file.c:104:5: warning: unused variable 'x' [-Wunused-variable]
` + "\x1b[01m\x1b[K../fs/squashfs/file.c:600:13:\x1b[m\x1b[K warning: 'squashfs_readahead' defined but not used [-Wunused-function]" + `
../fs/fuse/dev.c:1225:9: error: 'expires' undeclared (first use in this function)
make[3]: *** [../scripts/Makefile.build:250: fs/fuse/dev.o] Error 1
`

func TestWarnings(t *testing.T) {
	bl, _ := scanLog(t, baseLog, 1<<20)
	base := bl.warnings
	if len(base) != 2 || base[0].File != "fs/squashfs/file.c" || base[0].Line != 100 || base[0].Flag != "-Wunused-variable" {
		t.Fatalf("parseWarnings(base) = %v", base)
	}
	pl, _ := scanLog(t, patchedLog, 1<<20)
	patched := pl.warnings
	got := newWarnings(base, patched)
	want := []Warning{{File: "fs/squashfs/file.c", Line: 600,
		Message: "'squashfs_readahead' defined but not used", Flag: "-Wunused-function"}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("newWarnings = %v, want %v (a moved warning is not new)", got, want)
	}
}

func TestErrorLines(t *testing.T) {
	_, sc := scanLog(t, patchedLog, 1<<20)
	got := sc.excerpt()
	want := []string{
		"fs/fuse/dev.c:1225:9: error: 'expires' undeclared (first use in this function)",
		"make[3]: *** [../scripts/Makefile.build:250: fs/fuse/dev.o] Error 1",
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("errorLines = %q, want %q", got, want)
	}
}

// A flood of error lines costs a bounded log and a bounded excerpt that
// says how much it left out.
func TestBuildLogCaps(t *testing.T) {
	var flood strings.Builder
	for i := 0; i < 100000; i++ {
		flood.WriteString("fs/squashfs/cache.c:1:1: error: flood\n")
	}
	flood.WriteString(strings.Repeat("x", 100<<10) + "\n") // one very long line
	l, sc := scanLog(t, flood.String(), 1<<20)
	fi, _ := l.f.Stat()
	if fi.Size() > 1<<20+200 {
		t.Errorf("log is %d bytes, want about 1 MiB", fi.Size())
	}
	lines := sc.excerpt()
	if len(lines) > maxQuotedLines+1 || len(strings.Join(lines, "\n")) > maxQuotedBytes+200 {
		t.Errorf("excerpt: %d lines, %d bytes", len(lines), len(strings.Join(lines, "\n")))
	}
	last := lines[len(lines)-1]
	if sc.more+sc.beyond+len(sc.errors) != 100000 || !strings.Contains(last, "more lines in the build log") {
		t.Errorf("counted %d+%d+%d error lines; last line %q", len(sc.errors), sc.more, sc.beyond, last)
	}
	data, _ := os.ReadFile(l.f.Name())
	if !strings.Contains(string(data), "the build log was cut at") {
		t.Error("the log does not say it was cut")
	}
}
