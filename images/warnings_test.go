package images

import (
	"reflect"
	"testing"
)

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
	base := parseWarnings([]byte(baseLog))
	if len(base) != 2 || base[0].File != "fs/squashfs/file.c" || base[0].Line != 100 || base[0].Flag != "-Wunused-variable" {
		t.Fatalf("parseWarnings(base) = %v", base)
	}
	patched := parseWarnings([]byte(patchedLog))
	got := newWarnings(base, patched)
	want := []Warning{{File: "fs/squashfs/file.c", Line: 600,
		Message: "'squashfs_readahead' defined but not used", Flag: "-Wunused-function"}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("newWarnings = %v, want %v (a moved warning is not new)", got, want)
	}
}

func TestErrorLines(t *testing.T) {
	got := errorLines([]byte(patchedLog))
	want := []string{
		"fs/fuse/dev.c:1225:9: error: 'expires' undeclared (first use in this function)",
		"make[3]: *** [../scripts/Makefile.build:250: fs/fuse/dev.o] Error 1",
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("errorLines = %q, want %q", got, want)
	}
}
