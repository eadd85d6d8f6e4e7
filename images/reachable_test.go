package images

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A private cache directory (mktemp -d makes 0700 ones) is opened to the
// build user; a private directory above the cache is reported with a fix.
func TestReachable(t *testing.T) {
	top := t.TempDir()
	if err := os.Chmod(filepath.Dir(top), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(top, 0o755); err != nil {
		t.Fatal(err)
	}
	cache := filepath.Join(top, "cache")
	if err := os.Mkdir(cache, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := reachable(cache); err != nil {
		t.Fatalf("reachable(%s): %v", cache, err)
	}
	if st, _ := os.Stat(cache); st.Mode().Perm()&0o005 != 0o005 {
		t.Errorf("cache mode %v, want it readable and searchable by others", st.Mode().Perm())
	}

	private := filepath.Join(top, "private")
	if err := os.Mkdir(private, 0o700); err != nil {
		t.Fatal(err)
	}
	err := reachable(filepath.Join(private, "cache"))
	if err == nil || !strings.Contains(err.Error(), "cannot reach") || !strings.Contains(err.Error(), private) {
		t.Errorf("reachable under a private directory: %v, want an error naming %s", err, private)
	}
}
