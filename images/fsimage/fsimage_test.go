package fsimage

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/patchbot/patchbot/internal/testenv"
)

func needMksquashfs(t *testing.T) {
	t.Helper()
	testenv.Tools(t, "mksquashfs")
}

func testSpec() Spec {
	return Spec{Seed: 7, Compressor: "gzip", BlockSize: 4096, Groups: []Group{
		{Name: "small", Count: 40, MinBytes: 0, MaxBytes: 3000, Dirs: 4},
		{Name: "big", Count: 3, MinBytes: 20000, MaxBytes: 50000},
	}}
}

// Two builds of one spec in different cache dirs must give identical bytes;
// a different seed must not.
func TestBuildReproducible(t *testing.T) {
	needMksquashfs(t)
	ctx := context.Background()
	a, cached, err := Build(ctx, testSpec(), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if cached {
		t.Fatal("first build in an empty cache reported a cache hit")
	}
	b, _, err := Build(ctx, testSpec(), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	ab, _ := os.ReadFile(a)
	bb, _ := os.ReadFile(b)
	if len(ab) == 0 || !bytes.Equal(ab, bb) {
		t.Fatalf("two builds of one spec differ (%d vs %d bytes)", len(ab), len(bb))
	}
	other := testSpec()
	other.Seed = 8
	c, _, err := Build(ctx, other, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	cb, _ := os.ReadFile(c)
	if bytes.Equal(ab, cb) {
		t.Fatal("a different seed gave the same image")
	}
}

func TestBuildCached(t *testing.T) {
	needMksquashfs(t)
	dir := t.TempDir()
	p1, _, err := Build(context.Background(), testSpec(), dir)
	if err != nil {
		t.Fatal(err)
	}
	p2, cached, err := Build(context.Background(), testSpec(), dir)
	if err != nil {
		t.Fatal(err)
	}
	if !cached || p1 != p2 {
		t.Fatalf("second build: cached=%v path %s vs %s", cached, p2, p1)
	}
	left, _ := filepath.Glob(filepath.Join(dir, "build-*"))
	if len(left) != 0 {
		t.Fatalf("work dirs left behind: %v", left)
	}
}

// The generated tree matches Files(): same paths, same sizes.
func TestGenerateMatchesFiles(t *testing.T) {
	dir := t.TempDir()
	s := testSpec()
	if err := s.Generate(dir); err != nil {
		t.Fatal(err)
	}
	files := s.Files()
	if len(files) != 43 {
		t.Fatalf("Files() = %d files, want 43", len(files))
	}
	var total int64
	for _, f := range files {
		st, err := os.Stat(filepath.Join(dir, f.Path))
		if err != nil {
			t.Fatal(err)
		}
		if st.Size() != f.Size {
			t.Errorf("%s: size %d, Files() says %d", f.Path, st.Size(), f.Size)
		}
		total += f.Size
	}
	dirs, _ := os.ReadDir(filepath.Join(dir, "small"))
	if len(dirs) != 4 {
		t.Errorf("small has %d dirs, want fan-out 4", len(dirs))
	}
	if total == 0 {
		t.Error("all files empty")
	}
}

func TestValidate(t *testing.T) {
	tests := []struct {
		name string
		edit func(*Spec)
		want string
	}{
		{"ok", func(*Spec) {}, ""},
		{"compressor", func(s *Spec) { s.Compressor = "brotli" }, "compressor"},
		{"block size", func(s *Spec) { s.BlockSize = 5000 }, "block_size"},
		{"no groups", func(s *Spec) { s.Groups = nil }, "no file groups"},
		{"slash", func(s *Spec) { s.Groups[0].Name = "a/b" }, "path element"},
		{"dup", func(s *Spec) { s.Groups[1].Name = "small" }, "twice"},
		{"range", func(s *Spec) { s.Groups[0].MinBytes = 9999 }, "not a range"},
		{"dirs", func(s *Spec) { s.Groups[1].Dirs = 9 }, "dirs"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := testSpec()
			tt.edit(&s)
			err := s.Validate()
			if tt.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Validate() = %v, want an error about %q", err, tt.want)
			}
		})
	}
}
