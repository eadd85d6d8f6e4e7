package store

import (
	"os"
	"path/filepath"
	"testing"
)

// The database and SQLite's files beside it are patchbot's alone.
func TestOpenMakesFilesPrivate(t *testing.T) {
	for _, existing := range []bool{false, true} {
		path := filepath.Join(t.TempDir(), "state.db")
		if existing {
			// A database made by an older patchbot, open to everyone.
			s, err := Open(path)
			if err != nil {
				t.Fatal(err)
			}
			s.Close()
			for _, p := range []string{path, path + "-wal", path + "-shm"} {
				os.Chmod(p, 0o644)
			}
		}
		s, err := Open(path)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.DB().Exec(`INSERT INTO cursors(source, cursor, updated) VALUES ('a', 'b', 'c')`); err != nil {
			t.Fatal(err)
		}
		for _, p := range []string{path, path + "-wal", path + "-shm"} {
			fi, err := os.Stat(p)
			if err != nil {
				t.Errorf("existing=%v: %v", existing, err)
				continue
			}
			if perm := fi.Mode().Perm(); perm != 0o600 {
				t.Errorf("existing=%v: %s mode %v, want 0600", existing, filepath.Base(p), perm)
			}
		}
		s.Close()
	}
}
