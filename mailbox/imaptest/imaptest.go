// Package imaptest starts a real Dovecot IMAP server on loopback for tests,
// with one user and a Maildir the test can deliver into.
//
// Dovecot runs from a config file of the test's own (nothing in /etc is
// touched). imap-login refuses to run as root, so the login and internal
// users are Debian's dovenull and dovecot, and the mail belongs to dovecot.
package imaptest

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/patchbot/patchbot/internal/testenv"
)

// Server is a running Dovecot.
type Server struct {
	Addr        string // 127.0.0.1:port
	User        string
	Password    string
	MaildirPath string // the user's INBOX Maildir

	dir      string
	conf     string
	uid, gid int
	cmd      *exec.Cmd
	done     chan struct{}
	seq      atomic.Int64
}

// Start runs Dovecot until the test ends. It skips the test (fails it in
// the full tier) when Dovecot or its dovecot/dovenull users are not
// installed, or the test does not run as root.
func Start(t testing.TB) *Server {
	t.Helper()
	bin := dovecotPath(t)
	testenv.Root(t) // Dovecot with its own users
	dc, err := user.Lookup("dovecot")
	if err != nil {
		testenv.Missing(t, "no dovecot user (Debian package dovecot-imapd): %v", err)
	}
	if _, err := user.Lookup("dovenull"); err != nil {
		testenv.Missing(t, "no dovenull user (Debian package dovecot-imapd): %v", err)
	}
	uid, _ := strconv.Atoi(dc.Uid)
	gid, _ := strconv.Atoi(dc.Gid)

	// Not t.TempDir: Dovecot's users must reach the Maildir, and unix
	// socket paths must stay short.
	dir, err := os.MkdirTemp("", "imaptest")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	s := &Server{
		User:     "patchbot",
		Password: "secret",
		dir:      dir,
		uid:      uid,
		gid:      gid,
	}
	home := filepath.Join(dir, "home")
	s.MaildirPath = filepath.Join(home, "Maildir")
	for _, d := range []string{"cur", "new", "tmp"} {
		if err := os.MkdirAll(filepath.Join(s.MaildirPath, d), 0o700); err != nil {
			t.Fatal(err)
		}
	}
	chownTree(t, home, uid, gid)
	if err := os.WriteFile(filepath.Join(dir, "passwd"),
		[]byte(s.User+":{PLAIN}"+s.Password+"::::::\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	s.Addr = "127.0.0.1:" + strconv.Itoa(freePort(t))
	s.conf = filepath.Join(dir, "dovecot.conf")
	if err := os.WriteFile(s.conf, []byte(s.config(home)), 0o644); err != nil {
		t.Fatal(err)
	}
	// Registered first, so that a start that fails still kills Dovecot.
	t.Cleanup(func() { s.Stop(t) })
	s.start(t, bin)
	return s
}

func (s *Server) config(home string) string {
	_, port, _ := net.SplitHostPort(s.Addr)
	return fmt.Sprintf(`protocols = imap
listen = 127.0.0.1
base_dir = %[1]s/run
state_dir = %[1]s/state
log_path = %[1]s/dovecot.log
ssl = no
disable_plaintext_auth = no
auth_mechanisms = plain login
default_login_user = dovenull
default_internal_user = dovecot
first_valid_uid = 1
first_valid_gid = 1
mail_location = maildir:%[2]s/Maildir
mailbox_idle_check_interval = 1 secs
passdb {
  driver = passwd-file
  args = scheme=PLAIN username_format=%%u %[1]s/passwd
}
userdb {
  driver = static
  args = uid=%[3]d gid=%[4]d home=%[2]s
}
service imap-login {
  inet_listener imap {
    address = 127.0.0.1
    port = %[5]s
  }
  inet_listener imaps {
    port = 0
  }
}
`, s.dir, home, s.uid, s.gid, port)
}

func (s *Server) start(t testing.TB, bin string) {
	t.Helper()
	cmd := exec.Command(bin, "-F", "-c", s.conf)
	out, err := os.Create(filepath.Join(s.dir, "dovecot.out"))
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting dovecot: %v", err)
	}
	out.Close()
	s.cmd = cmd
	s.done = make(chan struct{})
	go func() { cmd.Wait(); close(s.done) }()
	deadline := time.Now().Add(20 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", s.Addr, time.Second)
		if err == nil {
			c.Close()
			return
		}
		select {
		case <-s.done:
			t.Fatalf("dovecot exited at start: %s", s.Logs())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("dovecot did not listen on %s: %v\n%s", s.Addr, err, s.Logs())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Logs returns Dovecot's log, for failure messages.
func (s *Server) Logs() string {
	a, _ := os.ReadFile(filepath.Join(s.dir, "dovecot.out"))
	b, _ := os.ReadFile(filepath.Join(s.dir, "dovecot.log"))
	return string(a) + string(b)
}

// Stop kills Dovecot and its children (as a server crash would) and waits.
// Calling it twice is fine.
func (s *Server) Stop(t testing.TB) {
	if s.cmd == nil {
		return
	}
	syscall.Kill(-s.cmd.Process.Pid, syscall.SIGKILL)
	select {
	case <-s.done:
	case <-time.After(10 * time.Second):
		t.Errorf("dovecot (pid %d) did not exit", s.cmd.Process.Pid)
	}
	s.cmd = nil
	// Listeners of killed children may linger a moment.
	os.RemoveAll(filepath.Join(s.dir, "run"))
}

// Restart stops Dovecot and starts it again on the same address and mail.
func (s *Server) Restart(t testing.TB) {
	t.Helper()
	bin := dovecotPath(t)
	s.Stop(t)
	s.start(t, bin)
}

// Deliver drops a mail into the INBOX Maildir, as a local delivery agent
// would (written in tmp/, then renamed into new/).
func (s *Server) Deliver(t testing.TB, raw []byte) {
	t.Helper()
	name := fmt.Sprintf("%d.M%dP%d.imaptest", time.Now().Unix(), s.seq.Add(1), os.Getpid())
	tmp := filepath.Join(s.MaildirPath, "tmp", name)
	if err := os.WriteFile(tmp, raw, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(tmp, s.uid, s.gid); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(s.MaildirPath, "new", name)); err != nil {
		t.Fatal(err)
	}
}

// ResetUIDValidity makes Dovecot give the INBOX a new UIDVALIDITY, as after
// a mailbox was rebuilt: it stops the server, drops Dovecot's index and
// UID list (the mails stay), and starts it again.
func (s *Server) ResetUIDValidity(t testing.TB) {
	t.Helper()
	s.Stop(t)
	for _, pat := range []string{"dovecot-uidlist", "dovecot.index*", "dovecot-uidvalidity*", "dovecot.list.index*"} {
		m, _ := filepath.Glob(filepath.Join(s.MaildirPath, pat))
		for _, f := range m {
			os.Remove(f)
		}
	}
	// UIDVALIDITY is a timestamp: make sure the new one differs.
	time.Sleep(1100 * time.Millisecond)
	s.start(t, dovecotPath(t))
}

// dovecotPath is Dovecot's binary: on PATH, or where Debian puts it
// (/usr/sbin, off a user's PATH).
func dovecotPath(t testing.TB) string {
	t.Helper()
	const debian = "/usr/sbin/dovecot"
	if _, err := os.Stat(debian); err == nil {
		return debian
	}
	return testenv.Tool(t, "dovecot")
}

func chownTree(t testing.TB, root string, uid, gid int) {
	t.Helper()
	err := filepath.Walk(root, func(p string, _ os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		return os.Chown(p, uid, gid)
	})
	if err != nil {
		t.Fatal(err)
	}
}

func freePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}
