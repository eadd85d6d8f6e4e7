package mailbox

import (
	"strings"
	"testing"
)

// File names that git and patchbot would read differently are refused:
// the patch is corrupt, with the reason. Names git quotes for their
// non-ASCII bytes are read as git reads them.
func TestDiffPathsGitReadsAlike(t *testing.T) {
	diff := func(a, b string) string {
		return "diff --git " + a + " " + b + "\n--- " + a + "\n+++ " + b + "\n@@ -1 +1 @@\n-x\n+y\n"
	}
	tests := []struct {
		name, diff, problem string
		files               []string
	}{
		{"plain", diff("a/fs/squashfs/cache.c", "b/fs/squashfs/cache.c"), "", []string{"fs/squashfs/cache.c"}},
		{"NUL", diff("a/fs/squashfs/cache.c\x00/../../fuse/dev.c", "b/fs/squashfs/cache.c\x00/../../fuse/dev.c"), "control character", nil},
		{"escape", diff("a/fs/x\x1b[2J.c", "b/fs/x\x1b[2J.c"), "control character", nil},
		{"C1", diff("a/fs/x\u009b.c", "b/fs/x\u009b.c"), "control character", nil},
		{"stray byte", diff("a/fs/x\xff.c", "b/fs/x\xff.c"), "not UTF-8", nil},
		{"quoted NUL", diff(`"a/fs/x\000.c"`, `"b/fs/x\000.c"`), "decodes to a control character", nil},
		{"quoted newline", diff(`"a/fs/x\n.c"`, `"b/fs/x\n.c"`), "decodes to a control character", nil},
		{"quoted UTF-8", diff(`"a/fs/caf\303\251.c"`, `"b/fs/caf\303\251.c"`), "", []string{"fs/café.c"}},
		{"rename to a NUL", "diff --git a/x b/y\nsimilarity index 100%\nrename from x\nrename to y\x00z\n", "control character", nil},
		{"diff -u timestamp", "--- a/fs/x.c\t2026-01-01 00:00:00\n+++ b/fs/x.c\t2026-01-01 00:00:00\n@@ -1 +1 @@\n-x\n+y\n", "", []string{"fs/x.c"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := diffProblem(tt.diff)
			if (tt.problem == "") != (p == "") || !strings.Contains(p, tt.problem) {
				t.Errorf("diffProblem = %q, want %q", p, tt.problem)
			}
			if strings.ContainsAny(p, "\x00\x1b") {
				t.Errorf("the reason carries the control character: %q", p)
			}
			if tt.files != nil {
				if got := DiffFiles(tt.diff); strings.Join(got, ",") != strings.Join(tt.files, ",") {
					t.Errorf("DiffFiles = %q, want %q", got, tt.files)
				}
			}
		})
	}
}
