package sender

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/mail"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/patchbot/patchbot/mailbox/sender/smtptest"
	"github.com/patchbot/patchbot/store"
)

func testMessage(id string) store.OutboxMessage {
	raw := "From: patchbot <bot@patchbot.test>\r\nTo: dev@patchbot.test\r\n" +
		"Subject: Re: [PATCH] squashfs: avoid thundering-herd cache wakeups\r\n" +
		"Message-Id: <" + id + ">\r\nContent-Type: text/plain; charset=utf-8\r\n\r\n" +
		"Hello,\r\n\r\nThe patch improves read-storm throughput by 1.8x.\r\n"
	return store.OutboxMessage{MessageID: id, From: "bot@patchbot.test",
		Recipients: []string{"dev@patchbot.test", "list@patchbot.test"}, Raw: []byte(raw)}
}

func openStore(t *testing.T, path string) *store.Store {
	s, err := store.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func newSMTP(t *testing.T, cfg Config) *SMTP {
	if cfg.From == "" {
		cfg.From = "bot@patchbot.test"
	}
	s, err := NewSMTP(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestSendUsesStartTLSAndAuthWhenOffered(t *testing.T) {
	cert := smtptest.NewCert(t)
	tests := []struct {
		name     string
		opt      smtptest.FakeOptions
		cfg      Config
		wantTLS  bool
		wantAuth bool
	}{
		{"plain server", smtptest.FakeOptions{}, Config{}, false, false},
		{"starttls", smtptest.FakeOptions{Cert: cert}, Config{}, true, false},
		{"starttls and auth", smtptest.FakeOptions{Cert: cert, Username: "bot", Password: "s3cret"},
			Config{Username: "bot", Password: "s3cret"}, true, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fake := smtptest.StartFake(t, tt.opt)
			tt.cfg.Addr = fake.Addr
			s := newSMTP(t, tt.cfg).WithRoots(cert.Roots)
			m := testMessage("send-" + strings.ReplaceAll(tt.name, " ", "-") + "@patchbot.test")
			if err := s.Send(context.Background(), m.Recipients, m.Raw); err != nil {
				t.Fatal(err)
			}
			got := fake.Messages()
			if len(got) != 1 {
				t.Fatalf("server accepted %d messages, want 1", len(got))
			}
			if got[0].TLS != tt.wantTLS || got[0].Auth != tt.wantAuth {
				t.Errorf("TLS %v auth %v, want %v %v", got[0].TLS, got[0].Auth, tt.wantTLS, tt.wantAuth)
			}
			if strings.Join(got[0].To, ",") != strings.Join(m.Recipients, ",") || got[0].From != "bot@patchbot.test" {
				t.Errorf("envelope %s -> %v", got[0].From, got[0].To)
			}
		})
	}
}

func TestSendErrors(t *testing.T) {
	cert := smtptest.NewCert(t)
	tests := []struct {
		name      string
		opt       smtptest.FakeOptions
		cfg       Config
		permanent bool
	}{
		{"require tls without starttls", smtptest.FakeOptions{}, Config{RequireTLS: true}, false},
		{"untrusted certificate", smtptest.FakeOptions{Cert: cert}, Config{}, false},
		{"wrong password", smtptest.FakeOptions{Cert: cert, Username: "bot", Password: "right"},
			Config{Username: "bot", Password: "wrong"}, false},
		{"rejected", smtptest.FakeOptions{Reject: 554}, Config{}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fake := smtptest.StartFake(t, tt.opt)
			tt.cfg.Addr = fake.Addr
			s := newSMTP(t, tt.cfg)
			if tt.name != "untrusted certificate" {
				s = s.WithRoots(cert.Roots)
			}
			m := testMessage("err@patchbot.test")
			err := s.Send(context.Background(), m.Recipients, m.Raw)
			if err == nil {
				t.Fatal("Send succeeded, want an error")
			}
			var rej *RejectedError
			if errors.As(err, &rej) != tt.permanent {
				t.Errorf("error %v: permanent = %v, want %v", err, !tt.permanent, tt.permanent)
			}
			if n := len(fake.Messages()); n != 0 {
				t.Errorf("server accepted %d messages", n)
			}
		})
	}
}

func TestNewSMTPChecksConfig(t *testing.T) {
	for _, cfg := range []Config{{}, {Addr: "nohostport", From: "a@b"}, {Addr: "127.0.0.1:25"},
		{Addr: "127.0.0.1:25", From: "a@b", CAFile: "/nonexistent"}} {
		if _, err := NewSMTP(cfg); err == nil {
			t.Errorf("NewSMTP(%+v) accepted a bad config", cfg)
		}
	}
}

func TestOutboxRetriesTransientAndFailsRejected(t *testing.T) {
	ctx := context.Background()
	st := openStore(t, filepath.Join(t.TempDir(), "patchbot.db"))
	m := testMessage("retry@patchbot.test")
	id, _, err := st.Enqueue(ctx, m)
	if err != nil {
		t.Fatal(err)
	}
	// Nothing listens on a closed port: a transient failure, queued again.
	down := smtptest.StartFake(t, smtptest.FakeOptions{})
	o := &Outbox{Store: st, Transport: newSMTP(t, Config{Addr: "127.0.0.1:1", Timeout: 5 * time.Second})}
	if n, err := o.Flush(ctx); err == nil || n != 0 {
		t.Fatalf("Flush to a closed port = %d, %v; want an error", n, err)
	}
	if got, _ := st.Message(ctx, id); got.State != store.Queued || got.Attempts != 1 || got.LastError == "" {
		t.Fatalf("after a transient failure: %+v", got)
	}
	o.Transport = newSMTP(t, Config{Addr: down.Addr})
	if n, err := o.Flush(ctx); err != nil || n != 1 {
		t.Fatalf("retry Flush = %d, %v", n, err)
	}
	if got, _ := st.Message(ctx, id); got.State != store.Sent || got.Attempts != 2 {
		t.Fatalf("after the retry: %+v", got)
	}

	rej := smtptest.StartFake(t, smtptest.FakeOptions{Reject: 550})
	id2, _, _ := st.Enqueue(ctx, testMessage("rejected@patchbot.test"))
	o.Transport = newSMTP(t, Config{Addr: rej.Addr})
	o.Flush(ctx)
	if got, _ := st.Message(ctx, id2); got.State != store.Failed {
		t.Fatalf("after a 550: state %s, want failed", got.State)
	}
	if n, _ := o.Flush(ctx); n != 0 {
		t.Error("a rejected reply was sent again")
	}
}

// The crash test runs the sender in a child process (this test binary,
// re-executed) that is killed at one step of delivery, then "restarts" it here
// and checks that the server holds the reply exactly once.
const crashEnv = "PATCHBOT_SENDER_CRASH" // "step db addr message-id [ca-file]"

// stepQueued stops the child right after the reply is written to the outbox.
const stepQueued Step = 0

func TestMain(m *testing.M) {
	if v := os.Getenv(crashEnv); v != "" {
		os.Exit(crashChild(v))
	}
	os.Exit(m.Run())
}

func crashChild(spec string) int {
	f := strings.Fields(spec)
	step, _ := strconv.Atoi(f[0])
	st, err := store.Open(f[1])
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	ctx := context.Background()
	if _, _, err := st.Enqueue(ctx, testMessage(f[3])); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	kill := func() {
		// SIGKILL, as a crash or an OOM kill would: no deferred code, no
		// buffered writes, the sockets closed by the kernel.
		syscall.Kill(os.Getpid(), syscall.SIGKILL)
		select {}
	}
	if Step(step) == stepQueued {
		kill()
	}
	stepHook = func(s Step) error {
		if s == Step(step) {
			kill()
		}
		return nil
	}
	cfg := Config{Addr: f[2], From: "bot@patchbot.test"}
	if len(f) > 4 {
		cfg.CAFile = f[4]
	}
	smtpc, err := NewSMTP(cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	o := &Outbox{Store: st, Transport: smtpc}
	if _, err := o.Flush(ctx); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0 // not reached when the step exists
}

// crashSteps are the points the sender is killed at, and the state the
// reply must end in after a restart.
var crashSteps = []struct {
	name      string
	step      Step
	wantState store.OutboxState
}{
	{"queued", stepQueued, store.Sent},
	{"claimed", StepClaimed, store.Sent},
	{"connected", StepConnected, store.Sent},
	{"body written", StepBodyWritten, store.Sent},
	// The server has the mail; the restart must not send it again, and
	// leaves it for a person to confirm.
	{"accepted", StepAccepted, store.Delivering},
	{"recorded", StepRecorded, store.Sent},
}

// crashAndRestart kills a sender child at step, restarts the sender in
// this process (twice) and checks the reply's final state.
func crashAndRestart(t *testing.T, step Step, wantState store.OutboxState, addr, id, caFile string, smtpc *SMTP) {
	db := filepath.Join(t.TempDir(), "patchbot.db")
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), fmt.Sprintf("%s=%d %s %s %s %s", crashEnv, step, db, addr, id, caFile))
	out, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		t.Fatalf("child was not killed at step %d: %v\n%s", step, err, out)
	}
	st := openStore(t, db)
	o := &Outbox{Store: st, Transport: smtpc}
	for i := 0; i < 2; i++ { // a second restart changes nothing
		if _, err := o.Flush(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	if ms, err := st.Pending(context.Background()); err != nil || len(ms) != 0 {
		t.Errorf("pending after restart: %d, %v", len(ms), err)
	}
	un, _ := st.Uncertain(context.Background())
	got := store.Sent
	if len(un) == 1 {
		got = store.Delivering
	}
	if got != wantState {
		t.Errorf("state after restart %s, want %s", got, wantState)
	}
}

func TestOutboxCrashAtEachStepSendsOnce(t *testing.T) {
	for _, tt := range crashSteps {
		t.Run(tt.name, func(t *testing.T) {
			fake := smtptest.StartFake(t, smtptest.FakeOptions{})
			crashAndRestart(t, tt.step, tt.wantState, fake.Addr, "crash@patchbot.test", "", newSMTP(t, Config{Addr: fake.Addr}))
			// The server may still be reading a dead child's connection.
			time.Sleep(50 * time.Millisecond)
			if n := fake.Count("crash@patchbot.test"); n != 1 {
				t.Errorf("after a kill at %s the reply was delivered %d times, want once", tt.name, n)
			}
		})
	}
}

// The same against Postfix: a real MTA must deliver nothing for a
// transaction cut before the final ".", and the restart must not repeat
// one it accepted.
func TestOutboxCrashAtEachStepThroughPostfix(t *testing.T) {
	pf := smtptest.StartPostfix(t, filepath.Join(t.TempDir(), "Maildir"))
	caFile := filepath.Join(pf.ConfigDir, "cert.pem")
	smtpc := newSMTP(t, Config{Addr: pf.Addr, RequireTLS: true}).WithRoots(pf.Roots)
	var ids []string
	for i, tt := range crashSteps {
		id := fmt.Sprintf("crash-%d@patchbot.test", i)
		ids = append(ids, id)
		t.Run(tt.name, func(t *testing.T) {
			crashAndRestart(t, tt.step, tt.wantState, pf.Addr, id, caFile, smtpc)
		})
	}
	// Every reply goes to two recipients: two copies each, once.
	pf.WaitForMail(t, 2*len(ids), 30*time.Second)
	time.Sleep(time.Second) // room for a copy too many to arrive
	msgs, err := smtptest.ReadMaildir(pf.Maildir)
	if err != nil {
		t.Fatal(err)
	}
	count := map[string]int{}
	for _, raw := range msgs {
		if m, err := mail.ReadMessage(bytes.NewReader(raw)); err == nil {
			count[strings.Trim(m.Header.Get("Message-Id"), "<>")]++
		}
	}
	for i, id := range ids {
		if count[id] != 2 {
			t.Errorf("killed at %s: %d copies delivered, want 2 (one per recipient)", crashSteps[i].name, count[id])
		}
	}
}
