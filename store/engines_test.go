package store

import (
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/patchbot/patchbot/internal/testenv"
	"github.com/patchbot/patchbot/store/pgtest"
)

// The store's tests run on both engines: SQLite in a temporary file, and
// PostgreSQL in a throwaway cluster that the package's tests share (each
// test has a database of its own).

var pg struct {
	once sync.Once
	srv  *pgtest.Server
	err  error
}

func TestMain(m *testing.M) {
	code := m.Run()
	if pg.srv != nil {
		pg.srv.Stop()
	}
	os.Exit(code)
}

// engine is one of the two databases the store runs on.
type engine struct {
	name string
	// fresh makes an empty database and returns what Open takes to open
	// it: a path or a URL.
	fresh func(t testing.TB) string
}

var engines = []engine{
	{"sqlite", func(t testing.TB) string { return filepath.Join(t.TempDir(), "state.db") }},
	{"postgres", func(t testing.TB) string {
		pg.once.Do(func() { pg.srv, pg.err = pgtest.New() })
		if pg.err != nil {
			testenv.Missing(t, "PostgreSQL: %v", pg.err)
		}
		dsn, err := pg.srv.NewDB()
		if err != nil {
			t.Fatal(err)
		}
		return dsn
	}},
}

// eachEngine runs a test once on each engine.
func eachEngine(t *testing.T, fn func(t *testing.T, e engine)) {
	for _, e := range engines {
		t.Run(e.name, func(t *testing.T) { fn(t, e) })
	}
}

// open opens a fresh database of the engine, closed when the test ends,
// and returns it with its name (to open it again, as a restart does).
func (e engine) open(t testing.TB) (*Store, string) {
	t.Helper()
	name := e.fresh(t)
	s, err := Open(name)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s, name
}

// reopen opens a database again.
func reopen(t testing.TB, name string) *Store {
	t.Helper()
	s, err := Open(name)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// claim is the claim of a test worker "w" at a time, with a long lease.
func claim(at time.Time, maxAttempts int) Claim {
	return Claim{Worker: "w", Lease: time.Hour, At: at, MaxAttempts: maxAttempts}
}
