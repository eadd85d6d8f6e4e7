package smtptest

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/patchbot/patchbot/internal/testenv"
)

// OpenDKIM is Debian's opendkim milter, started for one test as a
// receiving server's DKIM verifier: in front of a Postfix
// (Options.Milter), it checks each mail's signatures with the keys of a
// DNS server of the test's and prepends its verdict as an
// Authentication-Results field under AuthservID, after removing any such
// field that claims that authserv-id (RFC 8601 section 5).
type OpenDKIM struct {
	Milter     string // inet:PORT@127.0.0.1, for Postfix's smtpd_milters
	AuthservID string
	dir        string
}

// StartOpenDKIM starts opendkim verifying with the DNS server at dnsAddr
// (host:port, e.g. a dnstest.Server) and stops it when the test ends. It
// skips the test when opendkim is not installed.
func StartOpenDKIM(t testing.TB, authservID, dnsAddr string) *OpenDKIM {
	bin := "/usr/sbin/opendkim" // Debian's, off a user's PATH
	testenv.Files(t, bin)
	host, port, err := net.SplitHostPort(dnsAddr)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	milterPort := freePort(t)
	// opendkim resolves with libunbound: forward every query to the test's
	// server, without DNSSEC (the test zone is unsigned).
	unbound := fmt.Sprintf(`server:
  do-not-query-localhost: no
  module-config: "iterator"
  verbosity: 0
forward-zone:
  name: "."
  forward-addr: %s@%s
`, host, port)
	conf := strings.Join([]string{
		"Mode v",
		fmt.Sprintf("Socket inet:%d@127.0.0.1", milterPort),
		"AuthservID " + authservID,
		// Strip fields claiming our authserv-id, whatever they report.
		"RemoveARFrom " + authservID,
		"RemoveARAll yes",
		"AlwaysAddARHeader yes",
		"ResolverConfiguration " + filepath.Join(dir, "unbound.conf"),
		"PidFile " + filepath.Join(dir, "opendkim.pid"),
		"Syslog no",
		"LogWhy yes",
		"UMask 002",
		"Background no",
		"",
	}, "\n")
	for name, content := range map[string]string{"unbound.conf": unbound, "opendkim.conf": conf} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	logf, err := os.Create(filepath.Join(dir, "opendkim.log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "-f", "-x", filepath.Join(dir, "opendkim.conf"))
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); logf.Close(); close(done) }()
	t.Cleanup(func() {
		syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			<-done
		}
	})
	o := &OpenDKIM{Milter: fmt.Sprintf("inet:127.0.0.1:%d", milterPort), AuthservID: authservID, dir: dir}
	deadline := time.Now().Add(15 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", milterPort), time.Second)
		if err == nil {
			c.Close()
			return o
		}
		select {
		case <-done:
			t.Fatalf("opendkim exited:\n%s", o.Log())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("opendkim does not listen on %d: %v\n%s", milterPort, err, o.Log())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// Log is opendkim's output, for failure messages.
func (o *OpenDKIM) Log() string {
	b, _ := os.ReadFile(filepath.Join(o.dir, "opendkim.log"))
	return string(b)
}
