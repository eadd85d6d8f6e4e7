package smtptest

import (
	"bufio"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net"
	"net/smtp"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/patchbot/patchbot/internal/testenv"
)

// Postfix is a second Postfix instance, started for one test, that accepts
// mail on a loopback port and delivers every recipient, of any domain, into
// one Maildir (or one mbox file).
type Postfix struct {
	Addr      string         // 127.0.0.1:port of its smtpd
	Roots     *x509.CertPool // trusts its STARTTLS certificate
	ConfigDir string
	Maildir   string
	Mbox      string // with Options.Mbox: the file mail is appended to
}

// Options change what StartPostfixWith starts.
type Options struct {
	// Mbox, when set, delivers every recipient into this mbox file
	// instead of the Maildir (appended, fcntl-locked, as a list archive or
	// a local mailbox would have it).
	Mbox string
	// Milter, when set, is a milter (inet:HOST:PORT) that sees every mail
	// smtpd accepts, as a receiving server runs opendkim: see
	// StartOpenDKIM.
	Milter string
}

// masterCF runs every service unchrooted (the temporary queue directory has
// none of the files a chroot needs) and smtpd on the test's port only.
const masterCF = `%s inet n - n - - smtpd
pickup    unix  n       -       n       60      1       pickup
cleanup   unix  n       -       n       -       0       cleanup
qmgr      unix  n       -       n       300     1       qmgr
tlsmgr    unix  -       -       n       1000?   1       tlsmgr
rewrite   unix  -       -       n       -       -       trivial-rewrite
bounce    unix  -       -       n       -       0       bounce
defer     unix  -       -       n       -       0       bounce
trace     unix  -       -       n       -       0       bounce
verify    unix  -       -       n       -       1       verify
flush     unix  n       -       n       1000?   0       flush
proxymap  unix  -       -       n       -       -       proxymap
proxywrite unix -       -       n       -       1       proxymap
smtp      unix  -       -       n       -       -       smtp
relay     unix  -       -       n       -       -       smtp
showq     unix  n       -       n       -       -       showq
error     unix  -       -       n       -       -       error
retry     unix  -       -       n       -       -       error
discard   unix  -       -       n       -       -       discard
local     unix  -       n       n       -       -       local
virtual   unix  -       n       n       -       -       virtual
lmtp      unix  -       -       n       -       -       lmtp
anvil     unix  -       -       n       -       1       anvil
scache    unix  -       -       n       -       1       scache
postlog   unix-dgram n  -       n       -       1       postlogd
`

// StartPostfix starts a Postfix instance delivering into maildir (created
// if missing, with cur/new/tmp) and stops it when the test ends. Delivery
// runs as the owner of maildir, or of its parent directory, when that is
// not root (e.g. the dovecot user, so that Dovecot can serve the mail),
// else as nobody. It skips the test when Postfix is not installed or the test does
// not run as root (Postfix starts only as root).
//
// As Debian's Postfix requires, the instance's config directory is listed
// in alternate_config_directories of /etc/postfix/main.cf while it runs.
func StartPostfix(t testing.TB, maildir string) *Postfix {
	return StartPostfixWith(t, maildir, Options{})
}

// StartPostfixWith is StartPostfix with options: delivery into an mbox
// file, a milter in front of delivery.
func StartPostfixWith(t testing.TB, maildir string, o Options) *Postfix {
	t.Helper()
	postfix := "/usr/sbin/postfix" // Debian's, off a user's PATH
	if _, err := os.Stat(postfix); err != nil {
		postfix = testenv.Tool(t, "postfix")
	}
	testenv.Root(t) // Postfix starts only as root
	maildir, err := filepath.Abs(maildir)
	if err != nil {
		t.Fatal(err)
	}
	uid, gid := mailOwner(t, maildir)
	for _, sub := range []string{"cur", "new", "tmp"} {
		if err := os.MkdirAll(filepath.Join(maildir, sub), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(filepath.Join(maildir, sub), uid, gid); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chown(maildir, uid, gid); err != nil {
		t.Fatal(err)
	}
	traversable(t, maildir)

	dir, err := os.MkdirTemp("", "patchbot-postfix-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	cert := NewCert(t)
	port := freePort(t)
	addr := "127.0.0.1:" + strconv.Itoa(port)
	files := map[string]string{
		"cert.pem":  string(cert.CertPEM),
		"key.pem":   string(cert.KeyPEM),
		"master.cf": fmt.Sprintf(masterCF, addr),
		"main.cf": strings.Join([]string{
			"compatibility_level = 3.6",
			"queue_directory = " + filepath.Join(dir, "queue"),
			"data_directory = " + filepath.Join(dir, "data"),
			"mail_owner = postfix",
			"setgid_group = postdrop",
			"myhostname = localhost.patchbot.test",
			"mydomain = patchbot.test",
			"myorigin = $myhostname",
			"mydestination =",
			"inet_interfaces = 127.0.0.1",
			"inet_protocols = ipv4",
			"mynetworks = 127.0.0.0/8",
			"smtpd_relay_restrictions = permit_mynetworks, reject",
			"alias_maps =",
			"alias_database =",
			"local_recipient_maps =",
			"biff = no",
			"smtputf8_enable = no",
			// Every domain is ours, every recipient one Maildir.
			"virtual_mailbox_domains = static:all",
			"virtual_mailbox_base = " + filepath.Dir(maildir),
			"virtual_mailbox_maps = static:" + filepath.Base(maildir) + "/",
			"virtual_minimum_uid = 1",
			fmt.Sprintf("virtual_uid_maps = static:%d", uid),
			fmt.Sprintf("virtual_gid_maps = static:%d", gid),
			"smtpd_tls_security_level = may",
			"smtpd_tls_cert_file = " + filepath.Join(dir, "cert.pem"),
			"smtpd_tls_key_file = " + filepath.Join(dir, "key.pem"),
			"maillog_file = " + filepath.Join(dir, "maillog"),
			"maillog_file_prefixes = " + dir,
			"",
		}, "\n"),
	}
	if o.Mbox != "" {
		mbox, err := filepath.Abs(o.Mbox)
		if err != nil {
			t.Fatal(err)
		}
		o.Mbox = mbox
		if err := os.MkdirAll(filepath.Dir(mbox), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(filepath.Dir(mbox), uid, gid); err != nil {
			t.Fatal(err)
		}
		traversable(t, mbox)
		// No trailing slash: an mbox file, appended under an fcntl lock.
		files["main.cf"] = strings.NewReplacer(
			"virtual_mailbox_base = "+filepath.Dir(maildir)+"\n", "virtual_mailbox_base = "+filepath.Dir(mbox)+"\n",
			"virtual_mailbox_maps = static:"+filepath.Base(maildir)+"/\n", "virtual_mailbox_maps = static:"+filepath.Base(mbox)+"\nvirtual_mailbox_lock = fcntl\n",
		).Replace(files["main.cf"])
	}
	if o.Milter != "" {
		files["main.cf"] += strings.Join([]string{
			"smtpd_milters = " + o.Milter,
			"milter_default_action = tempfail",
			"milter_protocol = 6",
			""}, "\n")
	}
	for name, content := range files {
		mode := os.FileMode(0o644)
		if name == "key.pem" {
			mode = 0o600
		}
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), mode); err != nil {
			t.Fatal(err)
		}
	}

	// postfix(1) creates what lies inside the queue directory, not the
	// directory itself.
	if err := os.Mkdir(filepath.Join(dir, "queue"), 0o755); err != nil {
		t.Fatal(err)
	}
	allowConfigDir(t, dir, true)
	t.Cleanup(func() { allowConfigDir(t, dir, false) })

	run := func(args ...string) error {
		out, err := exec.Command(postfix, append([]string{"-c", dir}, args...)...).CombinedOutput()
		if err != nil {
			// postfix(1) reports to the mail log, not to its output.
			log, _ := os.ReadFile(filepath.Join(dir, "maillog"))
			return fmt.Errorf("postfix -c %s %s: %w\n%s%s", dir, strings.Join(args, " "), err, out, log)
		}
		return nil
	}
	if err := run("start"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		run("stop")
		// Wait for the master to go, so that no process outlives the test.
		pidFile := filepath.Join(dir, "queue", "pid", "master.pid")
		for i := 0; i < 100; i++ {
			b, err := os.ReadFile(pidFile)
			if err != nil {
				return
			}
			pid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
			if pid <= 0 || syscall.Kill(pid, 0) != nil {
				return
			}
			time.Sleep(100 * time.Millisecond)
		}
	})
	if err := waitBanner(addr, 30*time.Second); err != nil {
		log, _ := os.ReadFile(filepath.Join(dir, "maillog"))
		t.Fatalf("postfix did not answer on %s: %v\n%s", addr, err, log)
	}
	return &Postfix{Addr: addr, Roots: cert.Roots, ConfigDir: dir, Maildir: maildir, Mbox: o.Mbox}
}

// Send submits one mail over SMTP with STARTTLS, as a sender's server
// would hand it over.
func (p *Postfix) Send(t testing.TB, from string, to []string, raw []byte) {
	t.Helper()
	c, err := smtp.Dial(p.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	err = c.StartTLS(&tls.Config{RootCAs: p.Roots, ServerName: "127.0.0.1"})
	if err == nil {
		err = c.Mail(from)
	}
	for _, r := range to {
		if err == nil {
			err = c.Rcpt(r)
		}
	}
	var w io.WriteCloser
	if err == nil {
		w, err = c.Data()
	}
	if err == nil {
		_, err = w.Write(raw)
	}
	if err == nil {
		err = w.Close()
	}
	if err == nil {
		err = c.Quit()
	}
	if err != nil {
		t.Fatalf("sending through postfix: %v\n%s", err, p.Log())
	}
}

// Log is the instance's mail log, for failure messages.
func (p *Postfix) Log() string {
	b, _ := os.ReadFile(filepath.Join(p.ConfigDir, "maillog"))
	return string(b)
}

// WaitForMail waits until the Maildir holds at least n new messages and
// returns their contents, oldest first.
func (p *Postfix) WaitForMail(t testing.TB, n int, timeout time.Duration) [][]byte {
	deadline := time.Now().Add(timeout)
	for {
		msgs, err := ReadMaildir(p.Maildir)
		if err != nil {
			t.Fatal(err)
		}
		if len(msgs) >= n {
			return msgs
		}
		if time.Now().After(deadline) {
			t.Fatalf("Maildir %s holds %d messages after %v, want %d; mail log:\n%s", p.Maildir, len(msgs), timeout, n, p.Log())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// ReadMaildir returns the messages in maildir's new and cur, oldest first
// by file name (Maildir names start with the delivery time).
func ReadMaildir(maildir string) ([][]byte, error) {
	var names []string
	for _, sub := range []string{"new", "cur"} {
		ents, err := os.ReadDir(filepath.Join(maildir, sub))
		if err != nil {
			return nil, fmt.Errorf("reading Maildir: %w", err)
		}
		for _, e := range ents {
			names = append(names, filepath.Join(sub, e.Name()))
		}
	}
	sort.Slice(names, func(i, j int) bool { return filepath.Base(names[i]) < filepath.Base(names[j]) })
	var out [][]byte
	for _, n := range names {
		b, err := os.ReadFile(filepath.Join(maildir, n))
		if err != nil {
			return nil, fmt.Errorf("reading Maildir: %w", err)
		}
		out = append(out, b)
	}
	return out, nil
}

// mailOwner picks the uid and gid that deliver into the Maildir: its
// owner, or its parent's, when not root (Postfix's virtual agent refuses
// root); else nobody.
func mailOwner(t testing.TB, maildir string) (int, int) {
	if err := os.MkdirAll(filepath.Dir(maildir), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{maildir, filepath.Dir(maildir)} {
		fi, err := os.Stat(p)
		if err != nil {
			continue
		}
		if st := fi.Sys().(*syscall.Stat_t); st.Uid != 0 {
			return int(st.Uid), int(st.Gid)
		}
	}
	return 65534, 65534 // nobody, nogroup
}

// traversable lets the delivery user reach path: test temp directories
// are created 0700 for root.
func traversable(t testing.TB, path string) {
	for d := filepath.Dir(path); d != "/" && d != "."; d = filepath.Dir(d) {
		fi, err := os.Stat(d)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Perm()&0o001 == 0 {
			if err := os.Chmod(d, fi.Mode().Perm()|0o011); err != nil {
				t.Fatal(err)
			}
		}
	}
}

func freePort(t testing.TB) int {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// waitBanner waits for a "220" greeting. (Postfix drops a client that
// talks before the greeting, so the wait reads and says nothing.)
func waitBanner(addr string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	var last error
	for time.Now().Before(deadline) {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			c.SetDeadline(time.Now().Add(5 * time.Second))
			line, rerr := bufio.NewReader(c).ReadString('\n')
			c.Write([]byte("QUIT\r\n"))
			c.Close()
			if rerr == nil && strings.HasPrefix(line, "220") {
				return nil
			}
			err = fmt.Errorf("greeting %q: %v", line, rerr)
		}
		last = err
		time.Sleep(200 * time.Millisecond)
	}
	return last
}

// allowConfigDir adds dir to (or removes it from) alternate_config_directories
// in the default main.cf, under a lock: other tests may start instances at
// the same time, and postconf -e rewrites the whole file.
func allowConfigDir(t testing.TB, dir string, add bool) {
	lock, err := os.OpenFile(filepath.Join(os.TempDir(), "patchbot-postfix.lock"), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Close()
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		t.Fatal(err)
	}
	defer syscall.Flock(int(lock.Fd()), syscall.LOCK_UN)

	out, err := exec.Command("postconf", "-h", "alternate_config_directories").Output()
	if err != nil {
		t.Fatalf("postconf: %v", err)
	}
	var dirs []string
	for _, d := range strings.FieldsFunc(string(out), func(r rune) bool { return r == ',' || r == ' ' || r == '\n' || r == '\t' }) {
		if d != dir {
			dirs = append(dirs, d)
		}
	}
	if add {
		dirs = append(dirs, dir)
	}
	if b, err := exec.Command("postconf", "-e", "alternate_config_directories="+strings.Join(dirs, ", ")).CombinedOutput(); err != nil {
		t.Fatalf("postconf -e: %v\n%s", err, b)
	}
}
