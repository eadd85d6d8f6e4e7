package images

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/patchbot/patchbot/internal/testenv"
)

func TestParseChanges(t *testing.T) {
	diff := `diff --git a/fs/squashfs/cache.c b/fs/squashfs/cache.c
index 1..2 100644
--- a/fs/squashfs/cache.c
+++ b/fs/squashfs/cache.c
@@ -45,0 +46,2 @@ struct x
+added
+added
@@ -57 +91,2 @@ struct squashfs_cache_entry *squashfs_cache_get(struct super_block *sb,
-old
+new
+new
@@ -80,3 +115,0 @@ f
-gone
diff --git a/gone.c b/gone.c
deleted file mode 100644
--- a/gone.c
+++ /dev/null
@@ -1,3 +0,0 @@
-x
diff --git a/new.h b/new.h
new file mode 100644
--- /dev/null
+++ b/new.h
@@ -0,0 +1 @@
+#define X 1
`
	got := parseChanges([]byte(diff))
	want := []Change{
		// added; rewritten (the line before the removal too); removed
		{File: "fs/squashfs/cache.c", Lines: [][2]int{{46, 47}, {90, 92}, {115, 116}}},
		{File: "new.h", Lines: [][2]int{{1, 1}}},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("changes = %+v, want %+v", got, want)
	}
}

// A patch mail's own hunks (with their context) give the same lines as
// git diff -U0 of the tree it was applied to.
func TestChangesOfAMail(t *testing.T) {
	gitBin := testenv.Tool(t, "git")
	raw, err := os.ReadFile("../testdata/mbox/squashfs-thundering-herd.mbox")
	if err != nil {
		t.Fatal(err)
	}
	if i := bytes.Index(raw, []byte("\nFrom ")); i > 0 {
		raw = raw[:i+1] // the patch; the ping and the review after it
	}
	dir := t.TempDir()
	git := func(args ...string) []byte {
		t.Helper()
		cmd := exec.Command(gitBin, args...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@t", "GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@t")
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
		return out
	}
	// The file as the seed's base (Debian's 6.1.192) has it.
	base, err := os.ReadFile("testdata/cache.c-6.1")
	if err != nil {
		t.Fatal(err)
	}
	os.MkdirAll(filepath.Join(dir, "fs/squashfs"), 0o755)
	os.WriteFile(filepath.Join(dir, "fs/squashfs/cache.c"), base, 0o644)
	git("init", "-q")
	git("add", ".")
	git("commit", "-qm", "base")
	os.WriteFile(filepath.Join(dir, "seed.mbox"), raw, 0o644)
	git("am", "-q", "seed.mbox")
	want := parseChanges(git("diff", "-U0", "HEAD~1", "HEAD", "--"))
	got := mergeChanges(nil, parseChanges(raw))
	if !reflect.DeepEqual(got, want) || len(want) != 1 {
		t.Errorf("from the mail: %+v\nfrom git diff -U0: %+v", got, want)
	}
}
