package images

import (
	"os"
	"path/filepath"
	"testing"
)

// The cache is closed to everyone but patchbot: the sandbox reaches the
// build's directories without a path through it.
func TestPrivateDir(t *testing.T) {
	top := t.TempDir()
	open := filepath.Join(top, "cache")
	if err := os.Mkdir(open, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{open, filepath.Join(top, "new", "kernels")} {
		if err := privateDir(d); err != nil {
			t.Fatalf("privateDir(%s): %v", d, err)
		}
		if st, err := os.Stat(d); err != nil || st.Mode().Perm() != 0o700 {
			t.Errorf("%s: mode %v, %v; want 0700", d, st.Mode().Perm(), err)
		}
	}
}
