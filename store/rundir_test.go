package store

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A collected run replaces an earlier attempt's in one rename.
func TestWriteRunDirReplaces(t *testing.T) {
	runs := t.TempDir()
	if _, err := WriteRunDir(runs, "job-1", []RunFile{{Name: "old.log", Data: []byte("old")}}); err != nil {
		t.Fatal(err)
	}
	if _, err := WriteRunDir(runs, "job-1", []RunFile{{Name: "run.json", Data: []byte("{}")}}); err != nil {
		t.Fatal(err)
	}
	ents, _ := os.ReadDir(runs)
	if len(ents) != 1 || ents[0].Name() != "job-1" {
		t.Errorf("runs/ holds %v, want job-1 alone", ents)
	}
	if _, err := os.Stat(filepath.Join(runs, "job-1", "old.log")); err == nil {
		t.Error("the earlier attempt's file is still there")
	}
}

// What a worker stores of its run directory is bounded: links are not
// followed, a huge log keeps its end.
func TestReadRunDirIsBounded(t *testing.T) {
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "run.json"), []byte("{}"), 0o600)
	os.MkdirAll(filepath.Join(dir, "logs"), 0o700)
	big := bytes.Repeat([]byte("x"), MaxRunFile+10)
	copy(big[len(big)-4:], "LAST")
	os.WriteFile(filepath.Join(dir, "logs", "build.log"), big, 0o600)
	os.Symlink("/etc/passwd", filepath.Join(dir, "passwd"))
	files, err := ReadRunDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string][]byte{}
	for _, f := range files {
		got[f.Name] = f.Data
	}
	if len(got) != 2 || got["run.json"] == nil {
		t.Fatalf("read %d files: %v", len(got), len(files))
	}
	log := got["logs/build.log"]
	if len(log) > MaxRunFile || !strings.HasPrefix(string(log), "[patchbot: the first 74 bytes were cut]") ||
		!strings.HasSuffix(string(log), "LAST") {
		t.Errorf("the big log was kept as %d bytes starting %q", len(log), log[:min(60, len(log))])
	}
}
