// Package pgtest starts a throwaway PostgreSQL server for a test: Debian's
// postgresql, a cluster of its own in a temporary directory, listening on
// loopback only, removed when the test ends. initdb refuses to run as
// root, so as root the cluster belongs to the postgres user.
package pgtest

import (
	"database/sql"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib" // the "pgx" driver, to create databases
	"github.com/patchbot/patchbot/internal/testenv"
)

// Server is a running cluster.
type Server struct {
	Dir  string // the cluster's directory (data, socket, log)
	Port int
	User string // the superuser, trusted on loopback

	bin string
	run func(args ...string) *exec.Cmd
	dbs atomic.Int64
}

// DSN is a connection string for database db ("postgres" exists).
func (s *Server) DSN(db string) string {
	return fmt.Sprintf("postgres://%s@127.0.0.1:%d/%s?sslmode=disable", s.User, s.Port, db)
}

// ErrNotInstalled means the machine has no PostgreSQL server to start.
var ErrNotInstalled = errors.New("no PostgreSQL server binaries under /usr/lib/postgresql (apt-get install postgresql)")

// binDir finds the server binaries of the installed major version.
func binDir() (string, error) {
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	for i := len(dirs) - 1; i >= 0; i-- {
		if _, err := os.Stat(filepath.Join(dirs[i], "initdb")); err == nil {
			return dirs[i], nil
		}
	}
	return "", ErrNotInstalled
}

// Start starts a cluster for the test, or skips the test when PostgreSQL
// is not installed. It fails the test when the server does not come up.
func Start(t testing.TB) *Server {
	t.Helper()
	s, err := New()
	if errors.Is(err, ErrNotInstalled) || errors.Is(err, errNoOwner) {
		testenv.Missing(t, "%v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Stop)
	return s
}

var errNoOwner = errors.New("running as root and there is no postgres user to own the cluster")

// New starts a cluster; the caller stops it (Stop). For a TestMain that
// shares one cluster among a package's tests (each takes a database of
// its own, NewDB); ErrNotInstalled when there is no server to start.
func New() (*Server, error) {
	bin, err := binDir()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "pgtest-")
	if err != nil {
		return nil, err
	}
	run := func(args ...string) *exec.Cmd { return exec.Command(args[0], args[1:]...) }
	if os.Geteuid() == 0 {
		u, err := user.Lookup("postgres")
		if err != nil {
			os.RemoveAll(dir)
			return nil, errNoOwner
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		if err := os.Chown(dir, uid, gid); err != nil {
			os.RemoveAll(dir)
			return nil, err
		}
		run = func(args ...string) *exec.Cmd {
			quoted := make([]string, len(args))
			for i, a := range args {
				quoted[i] = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
			}
			return exec.Command("su", "postgres", "-s", "/bin/sh", "-c", strings.Join(quoted, " "))
		}
	}
	port, err := freePort()
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	s := &Server{Dir: dir, Port: port, User: "patchbot", bin: bin, run: run}
	fail := func(err error) (*Server, error) {
		s.Stop()
		return nil, err
	}
	data := filepath.Join(dir, "data")
	if out, err := run(filepath.Join(bin, "initdb"), "-D", data, "-A", "trust", "-U", s.User, "-E", "UTF8").CombinedOutput(); err != nil {
		return fail(fmt.Errorf("initdb: %v\n%s", err, out))
	}
	// A hundred connections are not enough for a fleet's simulation (each
	// worker holds a few); fsync off: the cluster is thrown away.
	opts := fmt.Sprintf("-k %s -c listen_addresses=127.0.0.1 -p %d -c fsync=off -c max_connections=300", dir, s.Port)
	logFile := filepath.Join(dir, "server.log")
	if out, err := run(filepath.Join(bin, "pg_ctl"), "-D", data, "-o", opts, "-l", logFile, "-w", "-t", "60", "start").CombinedOutput(); err != nil {
		log, _ := os.ReadFile(logFile)
		return fail(fmt.Errorf("pg_ctl start: %v\n%s\n%s", err, out, log))
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", s.Port), time.Second)
		if err == nil {
			c.Close()
			return s, nil
		}
		if time.Now().After(deadline) {
			return fail(fmt.Errorf("PostgreSQL does not answer on port %d: %v", s.Port, err))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// Stop stops the cluster and removes its directory.
func (s *Server) Stop() {
	if _, err := os.Stat(filepath.Join(s.Dir, "data", "postmaster.pid")); err == nil {
		s.run(filepath.Join(s.bin, "pg_ctl"), "-D", filepath.Join(s.Dir, "data"), "-m", "immediate", "-w", "stop").Run()
	}
	os.RemoveAll(s.Dir)
}

// NewDB creates an empty database and returns its DSN.
func (s *Server) NewDB() (string, error) {
	name := fmt.Sprintf("test_%d_%d", os.Getpid(), s.dbs.Add(1))
	db, err := sql.Open("pgx", s.DSN("postgres"))
	if err != nil {
		return "", err
	}
	defer db.Close()
	if _, err := db.Exec("CREATE DATABASE " + name); err != nil {
		return "", fmt.Errorf("creating database %s: %w", name, err)
	}
	return s.DSN(name), nil
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}
