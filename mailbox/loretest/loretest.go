// Package loretest starts a real public-inbox archive (the software
// lore.kernel.org runs, Debian package public-inbox) on loopback for tests:
// a v2 inbox in a temp dir, served by public-inbox-httpd on a free port.
//
//	srv := loretest.Start(t, "linux-fsdevel", "linux-fsdevel@example.org")
//	srv.Deliver(t, raw)        // as the list's MTA would, through public-inbox-mda
//	src, _ := mailbox.NewLore(srv.URL())
//
// Nothing outside the test's temp dir is touched: HOME points there, so
// the public-inbox config is the test's own.
package loretest

import (
	"bytes"
	"fmt"
	"net"
	"net/http"
	"net/mail"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/patchbot/patchbot/internal/testenv"
)

// Server is a running public-inbox-httpd serving one inbox.
type Server struct {
	Name    string // the inbox name, the first path segment of its URLs
	Address string // the list address mail is delivered to
	Addr    string // 127.0.0.1:port

	dir, home, inbox string
	httpd            *exec.Cmd
	httpdDone        chan struct{}

	mu      sync.Mutex
	watch   *exec.Cmd
	maildir string
	seq     int
}

// Start makes the inbox and serves it until the test ends. It skips the
// test when public-inbox is not installed.
func Start(t testing.TB, name, address string) *Server {
	t.Helper()
	testenv.Tools(t, "public-inbox-init", "public-inbox-mda", "public-inbox-httpd")
	dir := t.TempDir()
	s := &Server{Name: name, Address: address, dir: dir,
		home: filepath.Join(dir, "home"), inbox: filepath.Join(dir, "inbox")}
	if err := os.MkdirAll(s.home, 0o700); err != nil {
		t.Fatal(err)
	}
	s.Addr = "127.0.0.1:" + strconv.Itoa(freePort(t))
	base := "http://" + s.Addr
	s.run(t, nil, "public-inbox-init", "-V2", name, s.inbox, base+"/"+name, address)
	// There is no spamc here; every test mail is ham.
	s.run(t, nil, "git", "config", "-f", s.configPath(), "publicinboxmda.spamcheck", "none")
	s.run(t, nil, "git", "config", "-f", s.configPath(), "publicinboxwatch.spamcheck", "none")

	s.serve(t)
	t.Cleanup(func() { s.stop() })
	return s
}

// serve starts public-inbox-httpd and waits until it answers.
func (s *Server) serve(t testing.TB) {
	t.Helper()
	base := "http://" + s.Addr
	log, err := os.OpenFile(filepath.Join(s.dir, "httpd.log"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	s.httpd = exec.Command("public-inbox-httpd", "-l", base)
	s.httpd.Env = s.env()
	s.httpd.Stdout, s.httpd.Stderr = log, log
	s.httpd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := s.httpd.Start(); err != nil {
		t.Fatalf("starting public-inbox-httpd: %v", err)
	}
	done := make(chan struct{})
	s.httpdDone = done
	go func() { s.httpd.Wait(); log.Close(); close(done) }()

	// Up when it answers at all (an empty inbox answers 404).
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := http.Get(base + "/" + s.Name + "/new.atom")
		if err == nil {
			resp.Body.Close()
			break
		}
		select {
		case <-done:
			t.Fatalf("public-inbox-httpd exited at start:\n%s", s.Logs())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("public-inbox-httpd did not answer on %s: %v\n%s", s.Addr, err, s.Logs())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Purge removes a mail from the archive as public-inbox-purge does: its
// commit is kept with the mail emptied, and every later commit of its
// epoch is rewritten. raw is the mail as delivered.
func (s *Server) Purge(t testing.TB, raw []byte) {
	t.Helper()
	s.run(t, raw, "public-inbox-purge", s.inbox)
}

// Edit changes a mail in the archive as public-inbox-edit does, with a
// sed expression as the editor: the mail's commit and every later one of
// its epoch are rewritten.
func (s *Server) Edit(t testing.TB, msgid, sedExpr string) {
	t.Helper()
	cmd := exec.Command("public-inbox-edit", "-m", strings.Trim(msgid, "<>"), s.inbox)
	cmd.Env = append(s.env(), "EDITOR=sed -i "+shellQuote(sedExpr))
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("public-inbox-edit: %v\n%s", err, out)
	}
}

// Reimport makes the archive anew from raws, as an operator who rebuilds
// an inbox from a spool does: the inbox is removed, made again under the
// same name and address, served again, and raws delivered in order. A
// history with a different first mail has no commit in common with the
// old one.
func (s *Server) Reimport(t testing.TB, raws [][]byte) {
	t.Helper()
	s.stop()
	s.mu.Lock()
	s.watch = nil
	s.mu.Unlock()
	if err := os.RemoveAll(s.inbox); err != nil {
		t.Fatal(err)
	}
	s.run(t, nil, "public-inbox-init", "-V2", s.Name, s.inbox, "http://"+s.Addr+"/"+s.Name, s.Address)
	for _, raw := range raws {
		s.Deliver(t, raw)
	}
	s.serve(t)
}

func shellQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

// URL is the inbox's list URL, e.g. http://127.0.0.1:PORT/linux-fsdevel/.
func (s *Server) URL() string { return "http://" + s.Addr + "/" + s.Name + "/" }

// MessageURL is the URL of one message (and, with t.mbox.gz, its thread).
func (s *Server) MessageURL(msgid string) string {
	return s.URL() + url.PathEscape(strings.Trim(msgid, "<>")) + "/"
}

// Deliver adds one mail to the inbox as the list's MTA would, through
// public-inbox-mda; it is served when Deliver returns.
func (s *Server) Deliver(t testing.TB, raw []byte) {
	t.Helper()
	s.run(t, raw, "public-inbox-mda", "--no-precheck")
}

// DeliverMany adds many mails at once, faster than one public-inbox-mda
// per mail (about 0.4 s each): they are dropped into a Maildir that
// public-inbox-watch imports, and DeliverMany returns when the archive
// serves every one of them. Each mail needs a Message-ID.
func (s *Server) DeliverMany(t testing.TB, raws [][]byte) {
	t.Helper()
	s.deliverMany(t, raws, false)
}

// DeliverManyTimed is DeliverMany, and says when each mail reached the
// archive: when its commit appeared in one of the inbox's epochs (the
// repositories are looked at every 10 ms), the moment a reader of the
// archive's git could first fetch it. The mails' subjects must differ
// (a commit's message is its mail's subject).
func (s *Server) DeliverManyTimed(t testing.TB, raws [][]byte) []time.Time {
	t.Helper()
	return s.deliverMany(t, raws, true)
}

func (s *Server) deliverMany(t testing.TB, raws [][]byte, timed bool) []time.Time {
	t.Helper()
	s.startWatch(t)
	var ids []string
	bySubject := map[string]int{}
	for i, raw := range raws {
		m, err := mail.ReadMessage(bytes.NewReader(raw))
		if err != nil {
			t.Fatalf("DeliverMany: %v", err)
		}
		id := strings.Trim(strings.TrimSpace(m.Header.Get("Message-Id")), "<>")
		if id == "" {
			t.Fatal("DeliverMany: a mail without Message-ID cannot be waited for; use Deliver")
		}
		ids = append(ids, id)
		bySubject[strings.Join(strings.Fields(m.Header.Get("Subject")), " ")] = i
	}
	arrived := make([]time.Time, len(raws))
	stop, stopped := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(stopped)
		if !timed {
			return
		}
		tips := map[string]string{}
		for {
			epochs, _ := filepath.Glob(filepath.Join(s.inbox, "git", "*.git"))
			for _, e := range epochs {
				rng := "refs/heads/master"
				if tip := tips[e]; tip != "" {
					rng = tip + ".." + rng
				}
				out, err := exec.Command("git", "--git-dir="+e, "log", "--format=%H %s", rng).Output()
				now := time.Now()
				if err != nil {
					continue
				}
				for i, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
					h, subject, _ := strings.Cut(line, " ")
					if h == "" {
						continue
					}
					if i == 0 {
						tips[e] = h
					}
					if n, ok := bySubject[subject]; ok && arrived[n].IsZero() {
						arrived[n] = now
					}
				}
			}
			select {
			case <-stop:
				return
			case <-time.After(10 * time.Millisecond):
			}
		}
	}()
	for _, raw := range raws {
		s.mu.Lock()
		s.seq++
		// The counter is padded so that the names sort, and the watch
		// imports, in the order given.
		name := fmt.Sprintf("%d.M%09dP%d.loretest", time.Now().Unix(), s.seq, os.Getpid())
		s.mu.Unlock()
		tmp := filepath.Join(s.maildir, "tmp", name)
		if err := os.WriteFile(tmp, raw, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, filepath.Join(s.maildir, "new", name)); err != nil {
			t.Fatal(err)
		}
	}
	deadline := time.Now().Add(5 * time.Minute)
	for _, id := range ids {
		for {
			resp, err := http.Get(s.MessageURL(id) + "raw")
			if err == nil {
				resp.Body.Close()
				if resp.StatusCode == http.StatusOK {
					break
				}
			}
			if time.Now().After(deadline) {
				close(stop)
				t.Fatalf("public-inbox-watch did not import %s in time\n%s", id, s.Logs())
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	// Served: every commit is in the archive; one more look finds them.
	time.Sleep(50 * time.Millisecond)
	close(stop)
	<-stopped
	if !timed {
		return nil
	}
	for i, at := range arrived {
		if at.IsZero() {
			t.Fatalf("DeliverManyTimed: no commit has the subject of mail %d (%s)", i, ids[i])
		}
	}
	return arrived
}

func (s *Server) startWatch(t testing.TB) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.watch != nil {
		return
	}
	s.maildir = filepath.Join(s.dir, "watch")
	for _, d := range []string{"cur", "new", "tmp"} {
		if err := os.MkdirAll(filepath.Join(s.maildir, d), 0o700); err != nil {
			t.Fatal(err)
		}
	}
	s.run(t, nil, "git", "config", "-f", s.configPath(), "publicinbox."+s.Name+".watch", "maildir:"+s.maildir)
	log, err := os.Create(filepath.Join(s.dir, "watch.log"))
	if err != nil {
		t.Fatal(err)
	}
	s.watch = exec.Command("public-inbox-watch")
	s.watch.Env = s.env()
	s.watch.Stdout, s.watch.Stderr = log, log
	s.watch.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := s.watch.Start(); err != nil {
		t.Fatalf("starting public-inbox-watch: %v", err)
	}
	go func() { s.watch.Wait(); log.Close() }()
}

// Rollover makes the archive start a new epoch (git/N+1.git) with the
// next mail delivered. public-inbox starts one when the newest epoch's
// packs reach about 2.5 GB (V2Writable's rotate_bytes, 1 GiB over a
// packing factor of 0.4), summing the sizes of its objects/pack/*.pack;
// a sparse file of that apparent size, which git ignores (it has no
// .idx), makes public-inbox-mda's own check roll over at the next mail
// without a byte of disk. Deliver with Deliver after it (a running
// public-inbox-watch only checks when it starts a new batch).
func (s *Server) Rollover(t testing.TB) {
	t.Helper()
	n := s.Epochs(t) - 1
	if n < 0 {
		t.Fatal("Rollover: the archive has no epoch yet")
	}
	f, err := os.Create(filepath.Join(s.inbox, "git", strconv.Itoa(n)+".git", "objects", "pack", "pack-loretest-rollover.pack"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := f.Truncate(3 << 30); err != nil {
		t.Fatal(err)
	}
}

// Epochs is how many epochs (git/N.git) the archive has made.
func (s *Server) Epochs(t testing.TB) int {
	t.Helper()
	m, err := filepath.Glob(filepath.Join(s.inbox, "git", "*.git"))
	if err != nil {
		t.Fatal(err)
	}
	return len(m)
}

// InboxDir is the inbox's directory (its epochs are under git/).
func (s *Server) InboxDir() string { return s.inbox }

// Logs returns what public-inbox-httpd (and -watch) wrote, for failures.
func (s *Server) Logs() string {
	var b strings.Builder
	for _, f := range []string{"httpd.log", "watch.log"} {
		if data, err := os.ReadFile(filepath.Join(s.dir, f)); err == nil {
			fmt.Fprintf(&b, "--- %s\n%s", f, data)
		}
	}
	return b.String()
}

func (s *Server) stop() {
	s.mu.Lock()
	w := s.watch
	s.mu.Unlock()
	if w != nil && w.Process != nil {
		syscall.Kill(-w.Process.Pid, syscall.SIGKILL)
	}
	if s.httpd.Process != nil {
		syscall.Kill(-s.httpd.Process.Pid, syscall.SIGTERM)
		select {
		case <-s.httpdDone:
		case <-time.After(5 * time.Second):
			syscall.Kill(-s.httpd.Process.Pid, syscall.SIGKILL)
			<-s.httpdDone
		}
	}
}

func (s *Server) configPath() string { return filepath.Join(s.home, ".public-inbox", "config") }

func (s *Server) env() []string {
	return append(os.Environ(), "HOME="+s.home, "ORIGINAL_RECIPIENT="+s.Address,
		"GIT_CONFIG_GLOBAL=/dev/null", "GIT_CONFIG_SYSTEM=/dev/null")
}

func (s *Server) run(t testing.TB, stdin []byte, name string, args ...string) {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Env = s.env()
	if stdin != nil {
		cmd.Stdin = bytes.NewReader(stdin)
	}
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
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
