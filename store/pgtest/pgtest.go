// Package pgtest starts a throwaway PostgreSQL server for a test: Debian's
// postgresql, a cluster of its own in a temporary directory, listening on
// loopback (and, if asked, on more addresses, with TLS), removed when the
// test ends. initdb refuses to run as root, so as root the cluster belongs
// to the postgres user.
package pgtest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"database/sql"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
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
	// CAFile is the PEM certificate of the authority that signed the
	// server's certificate, when it serves TLS (Options.TLS): what a
	// client's sslrootcert names for sslmode=verify-full.
	CAFile string

	bin  string
	run  func(args ...string) *exec.Cmd
	opts string
	dbs  atomic.Int64
}

// Options shape a cluster beyond the loopback default.
type Options struct {
	// Listen are addresses to listen on besides 127.0.0.1 (the host side
	// of a network namespace's veth pair).
	Listen []string
	// HBA are pg_hba.conf lines, read before the default ones (which
	// trust loopback), e.g. "hostssl all all 10.0.0.0/8 scram-sha-256".
	HBA []string
	// TLS serves TLS with a certificate for the names and addresses in
	// TLSHosts, signed by a new authority (Server.CAFile).
	TLS      bool
	TLSHosts []string
}

// DSN is a connection string for database db ("postgres" exists).
func (s *Server) DSN(db string) string {
	return fmt.Sprintf("postgres://%s@127.0.0.1:%d/%s?sslmode=disable", s.User, s.Port, db)
}

// DSNFor is a connection string for database db as role user, over
// loopback (trusted: no password).
func (s *Server) DSNFor(user, db string) string {
	return fmt.Sprintf("postgres://%s@127.0.0.1:%d/%s?sslmode=disable", user, s.Port, db)
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
func Start(t testing.TB) *Server { return StartWith(t, Options{}) }

// StartWith is Start with options.
func StartWith(t testing.TB, o Options) *Server {
	t.Helper()
	s, err := NewWith(o)
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
func New() (*Server, error) { return NewWith(Options{}) }

// NewWith is New with options.
func NewWith(o Options) (*Server, error) {
	bin, err := binDir()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "pgtest-")
	if err != nil {
		return nil, err
	}
	run := func(args ...string) *exec.Cmd { return exec.Command(args[0], args[1:]...) }
	own := func(string) error { return nil }
	if os.Geteuid() == 0 {
		u, err := user.Lookup("postgres")
		if err != nil {
			os.RemoveAll(dir)
			return nil, errNoOwner
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		own = func(p string) error { return os.Chown(p, uid, gid) }
		if err := own(dir); err != nil {
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
	if len(o.HBA) > 0 {
		hba := filepath.Join(data, "pg_hba.conf")
		old, err := os.ReadFile(hba)
		if err != nil {
			return fail(err)
		}
		if err := os.WriteFile(hba, []byte(strings.Join(o.HBA, "\n")+"\n"+string(old)), 0o600); err != nil {
			return fail(err)
		}
	}
	// A hundred connections are not enough for a fleet's simulation (each
	// worker holds a few); fsync off: the cluster is thrown away.
	listen := strings.Join(append([]string{"127.0.0.1"}, o.Listen...), ",")
	s.opts = fmt.Sprintf("-k %s -c listen_addresses=%s -p %d -c fsync=off -c max_connections=300", dir, listen, s.Port)
	if o.TLS {
		cert, key, ca, err := makeCert(dir, o.TLSHosts)
		if err != nil {
			return fail(err)
		}
		for _, p := range []string{cert, key} {
			if err := own(p); err != nil {
				return fail(err)
			}
		}
		s.CAFile = ca
		s.opts += fmt.Sprintf(" -c ssl=on -c ssl_cert_file=%s -c ssl_key_file=%s", cert, key)
	}
	if err := s.Up(); err != nil {
		return fail(err)
	}
	return s, nil
}

// Down stops the server at once (pg_ctl stop -m immediate: a crash, every
// connection cut), keeping the cluster; Up starts it again.
func (s *Server) Down() error {
	if out, err := s.run(filepath.Join(s.bin, "pg_ctl"), "-D", filepath.Join(s.Dir, "data"), "-m", "immediate", "-w", "stop").CombinedOutput(); err != nil {
		return fmt.Errorf("pg_ctl stop: %v\n%s", err, out)
	}
	return nil
}

// Up starts the cluster's server and waits until it answers.
func (s *Server) Up() error {
	logFile := filepath.Join(s.Dir, "server.log")
	if out, err := s.run(filepath.Join(s.bin, "pg_ctl"), "-D", filepath.Join(s.Dir, "data"), "-o", s.opts, "-l", logFile,
		"-w", "-t", "60", "start").CombinedOutput(); err != nil {
		log, _ := os.ReadFile(logFile)
		return fmt.Errorf("pg_ctl start: %v\n%s\n%s", err, out, log)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", s.Port), time.Second)
		if err == nil {
			c.Close()
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("PostgreSQL does not answer on port %d: %v", s.Port, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// makeCert writes a new authority's certificate (ca.pem) and a server
// certificate signed by it for hosts (server.crt, server.key) into dir.
func makeCert(dir string, hosts []string) (cert, key, ca string, err error) {
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return "", "", "", err
	}
	now := time.Now()
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "pgtest CA"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(48 * time.Hour), IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return "", "", "", err
	}
	srvKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return "", "", "", err
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "pgtest"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(48 * time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	for _, h := range append([]string{"127.0.0.1", "localhost"}, hosts...) {
		if ip := net.ParseIP(h); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else {
			tmpl.DNSNames = append(tmpl.DNSNames, h)
		}
	}
	caCert, err := x509.ParseCertificate(caDER)
	if err != nil {
		return "", "", "", err
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, caCert, &srvKey.PublicKey, caKey)
	if err != nil {
		return "", "", "", err
	}
	keyDER, err := x509.MarshalECPrivateKey(srvKey)
	if err != nil {
		return "", "", "", err
	}
	cert, key, ca = filepath.Join(dir, "server.crt"), filepath.Join(dir, "server.key"), filepath.Join(dir, "ca.pem")
	for _, f := range []struct {
		path, kind string
		der        []byte
		mode       os.FileMode
	}{{cert, "CERTIFICATE", der, 0o644}, {key, "EC PRIVATE KEY", keyDER, 0o600}, {ca, "CERTIFICATE", caDER, 0o644}} {
		if err := os.WriteFile(f.path, pem.EncodeToMemory(&pem.Block{Type: f.kind, Bytes: f.der}), f.mode); err != nil {
			return "", "", "", err
		}
	}
	return cert, key, ca, nil
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
