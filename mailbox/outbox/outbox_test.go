package outbox

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
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/patchbot/patchbot/mailbox/sender"
	"github.com/patchbot/patchbot/mailbox/sender/smtptest"
	"github.com/patchbot/patchbot/reports"
	"github.com/patchbot/patchbot/store"
)

func testMessage(id string) Message {
	raw := "From: patchbot <bot@patchbot.test>\r\nTo: dev@patchbot.test\r\n" +
		"Subject: Re: [PATCH] squashfs: avoid thundering-herd cache wakeups\r\n" +
		"Message-Id: <" + id + ">\r\nContent-Type: text/plain; charset=utf-8\r\n\r\n" +
		"Hello,\r\n\r\nThe patch improves read-storm throughput by 1.8x.\r\n"
	return Message{MessageID: id, From: "bot@patchbot.test",
		To: []string{"dev@patchbot.test", "list@patchbot.test"}, Raw: []byte(raw)}
}

func openStore(t *testing.T, path string) *store.Store {
	s, err := store.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func newSMTP(t *testing.T, cfg sender.Config) *sender.SMTP {
	if cfg.From == "" {
		cfg.From = "bot@patchbot.test"
	}
	s, err := sender.NewSMTP(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func state(t *testing.T, st *store.Store, id string) *store.OutboxMessage {
	t.Helper()
	ms, err := st.OutboxIn(context.Background(), store.OutboxStates...)
	if err != nil {
		t.Fatal(err)
	}
	for i := range ms {
		if ms[i].MessageID == id {
			return &ms[i]
		}
	}
	t.Fatalf("%s is not in the outbox", id)
	return nil
}

func TestPutCapsRecipients(t *testing.T) {
	st := openStore(t, filepath.Join(t.TempDir(), "state.db"))
	o := &Outbox{Store: st, MaxRecipients: 3}
	m := testMessage("many@patchbot.test")
	m.To = []string{"a@x", "b@x", "c@x", "d@x"}
	if _, err := o.Put(context.Background(), m); !errors.Is(err, ErrTooManyRecipients) {
		t.Errorf("Put to 4 with a cap of 3: %v, want ErrTooManyRecipients", err)
	}
	m.To = m.To[:3]
	if added, err := o.Put(context.Background(), m); !added || err != nil {
		t.Errorf("Put to 3 = %v, %v", added, err)
	}
	if added, err := o.Put(context.Background(), m); added || err != nil {
		t.Errorf("second Put = %v, %v; want not added", added, err)
	}
}

// An opted-out address is dropped from the envelope; a mail to nobody
// else is not queued.
func TestPutDropsOptedOut(t *testing.T) {
	ctx := context.Background()
	st := openStore(t, filepath.Join(t.TempDir(), "state.db"))
	st.Update(ctx, func(tx *store.Tx) error { _, err := tx.OptOut(ctx, "list@patchbot.test", "test", true); return err })
	o := &Outbox{Store: st}
	m := testMessage("optout@patchbot.test")
	if added, err := o.Put(ctx, m); !added || err != nil {
		t.Fatalf("Put = %v, %v", added, err)
	}
	if got := state(t, st, m.MessageID); fmt.Sprint(got.Recipients) != "[dev@patchbot.test]" {
		t.Errorf("recipients = %v, want the opted-out list dropped", got.Recipients)
	}
	m2 := testMessage("nobody@patchbot.test")
	m2.To = []string{"List@patchbot.test"}
	if added, err := o.Put(ctx, m2); added || !errors.Is(err, ErrNoRecipients) {
		t.Errorf("Put to an opted-out address alone = %v, %v; want ErrNoRecipients", added, err)
	}
}

func TestRetriesTransientAndFailsRejected(t *testing.T) {
	ctx := context.Background()
	st := openStore(t, filepath.Join(t.TempDir(), "state.db"))
	m := testMessage("retry@patchbot.test")
	o := &Outbox{Store: st, Retry: time.Millisecond,
		Sender: newSMTP(t, sender.Config{Addr: "127.0.0.1:1", Timeout: 5 * time.Second})} // nothing listens: transient
	if _, err := o.Put(ctx, m); err != nil {
		t.Fatal(err)
	}
	if n, err := o.Flush(ctx); err == nil || n != 0 {
		t.Fatalf("Flush to a closed port = %d, %v; want an error", n, err)
	}
	if got := state(t, st, m.MessageID); got.State != store.Queued || got.Attempts != 1 || got.LastError == "" || got.Owner != "" {
		t.Fatalf("after a transient failure: %+v", got)
	}
	time.Sleep(5 * time.Millisecond) // the retry's wait
	up := smtptest.StartFake(t, smtptest.FakeOptions{})
	o.Sender = newSMTP(t, sender.Config{Addr: up.Addr})
	if n, err := o.Flush(ctx); err != nil || n != 1 {
		t.Fatalf("retry Flush = %d, %v", n, err)
	}
	if got := state(t, st, m.MessageID); got.State != store.Sent || got.Attempts != 2 {
		t.Fatalf("after the retry: %+v", got)
	}

	rej := smtptest.StartFake(t, smtptest.FakeOptions{Reject: 550})
	m2 := testMessage("rejected@patchbot.test")
	o.Put(ctx, m2)
	o.Sender = newSMTP(t, sender.Config{Addr: rej.Addr})
	o.Flush(ctx)
	if got := state(t, st, m2.MessageID); got.State != store.Failed {
		t.Fatalf("after a 550: state %s, want failed", got.State)
	}
	if n, _ := o.Flush(ctx); n != 0 {
		t.Error("a rejected reply was sent again")
	}
}

// Two senders flushing the same outbox at once deliver each reply once
// (a loser of a claim used to turn "sent" back into "queued").
func TestConcurrentFlushesSendOnce(t *testing.T) {
	ctx := context.Background()
	db := filepath.Join(t.TempDir(), "state.db")
	fake := smtptest.StartFake(t, smtptest.FakeOptions{})
	const n = 20
	var ids []string
	st := openStore(t, db)
	for i := 0; i < n; i++ {
		m := testMessage(fmt.Sprintf("c%d@patchbot.test", i))
		ids = append(ids, m.MessageID)
		if _, err := (&Outbox{Store: st}).Put(ctx, m); err != nil {
			t.Fatal(err)
		}
	}
	var wg sync.WaitGroup
	for _, owner := range []string{"a", "b", "c"} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			o := &Outbox{Store: openStore(t, db), Owner: owner, Sender: newSMTP(t, sender.Config{Addr: fake.Addr})}
			if _, err := o.Flush(ctx); err != nil {
				t.Errorf("Flush(%s): %v", owner, err)
			}
		}()
	}
	wg.Wait()
	for _, id := range ids {
		if c := fake.Count(id); c != 1 {
			t.Errorf("%s delivered %d times, want once", id, c)
		}
		if got := state(t, st, id); got.State != store.Sent {
			t.Errorf("%s: state %s, want sent", id, got.State)
		}
	}
}

// The crash test runs the outbox in a child process (this test binary,
// re-executed) that is killed at one step of delivery, then "restarts" it
// here and checks that the server holds the reply exactly once.
const crashEnv = "PATCHBOT_OUTBOX_CRASH" // "step db addr message-id [ca-file]"

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
	kill := func() {
		// SIGKILL, as a crash or an OOM kill would: no deferred code, no
		// buffered writes, the sockets closed by the kernel.
		syscall.Kill(os.Getpid(), syscall.SIGKILL)
		select {}
	}
	cfg := sender.Config{Addr: f[2], From: "bot@patchbot.test"}
	if len(f) > 4 {
		cfg.CAFile = f[4]
	}
	smtpc, err := sender.NewSMTP(cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	// A short lease: the restart must not wait ten minutes for a dead
	// child's claim.
	o := &Outbox{Store: st, Sender: smtpc, Owner: "child", Lease: 200 * time.Millisecond,
		OnStep: func(s Step) error {
			if s == Step(step) {
				kill()
			}
			return nil
		}}
	if _, err := o.Put(ctx, testMessage(f[3])); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if Step(step) == stepQueued {
		kill()
	}
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
	{"body written", StepBodyWritten, store.Sent},
	// From here the server may have the mail once the "." is sent; before
	// it, nothing was delivered, but the record says "delivering", so the
	// restart calls it uncertain (once its lease has run out) and leaves
	// it for a person rather than risk a copy.
	{"delivering", StepDelivering, store.Uncertain},
	{"accepted", StepAccepted, store.Uncertain},
	{"recorded", StepRecorded, store.Sent},
}

// crashAndRestart kills a sender child at step, restarts the sender in
// this process (twice) and checks the reply's final state.
func crashAndRestart(t *testing.T, step Step, wantState store.OutboxState, addr, id, caFile string, smtpc *sender.SMTP) {
	db := filepath.Join(t.TempDir(), "state.db")
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), fmt.Sprintf("%s=%d %s %s %s %s", crashEnv, step, db, addr, id, caFile))
	out, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		t.Fatalf("child was not killed at step %d: %v\n%s", step, err, out)
	}
	st := openStore(t, db)
	reported := 0
	o := &Outbox{Store: st, Sender: smtpc, Owner: "restart", OnUncertain: func(store.OutboxMessage) { reported++ }}
	time.Sleep(300 * time.Millisecond) // the dead child's lease runs out
	for i := 0; i < 2; i++ {           // a second restart changes nothing
		if _, err := o.Flush(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	if got := state(t, st, id); got.State != wantState {
		t.Errorf("state after restart %s, want %s", got.State, wantState)
	}
	un, _ := o.Uncertain(context.Background())
	if (len(un) == 1) != (wantState == store.Uncertain) {
		t.Errorf("Uncertain = %d messages, want %v", len(un), wantState == store.Uncertain)
	}
	if want := map[bool]int{true: 1}[wantState == store.Uncertain]; reported != want {
		t.Errorf("the uncertain delivery was reported %d times over two flushes, want %d", reported, want)
	}
}

func TestCrashAtEachStepSendsOnce(t *testing.T) {
	for _, tt := range crashSteps {
		t.Run(tt.name, func(t *testing.T) {
			fake := smtptest.StartFake(t, smtptest.FakeOptions{})
			crashAndRestart(t, tt.step, tt.wantState, fake.Addr, "crash@patchbot.test", "", newSMTP(t, sender.Config{Addr: fake.Addr}))
			// The server may still be reading a dead child's connection.
			time.Sleep(50 * time.Millisecond)
			want := 1
			if tt.step == StepDelivering {
				want = 0 // killed before the "." was sent
			}
			if n := fake.Count("crash@patchbot.test"); n != want {
				t.Errorf("after a kill at %s the reply was delivered %d times, want %d", tt.name, n, want)
			}
		})
	}
}

// The same against Postfix: a real MTA must deliver nothing for a
// transaction cut before the final ".", and the restart must not repeat
// one it accepted.
func TestCrashAtEachStepThroughPostfix(t *testing.T) {
	pf := smtptest.StartPostfix(t, filepath.Join(t.TempDir(), "Maildir"))
	caFile := filepath.Join(pf.ConfigDir, "cert.pem")
	smtpc := newSMTP(t, sender.Config{Addr: pf.Addr, RequireTLS: true}).WithRoots(pf.Roots)
	var ids []string
	for i, tt := range crashSteps {
		id := fmt.Sprintf("crash-%d@patchbot.test", i)
		ids = append(ids, id)
		t.Run(tt.name, func(t *testing.T) {
			crashAndRestart(t, tt.step, tt.wantState, pf.Addr, id, caFile, smtpc)
		})
	}
	want := map[string]int{}
	total := 0
	for i, id := range ids {
		want[id] = 2 // every reply goes to two recipients: two copies, once each
		if crashSteps[i].step == StepDelivering {
			want[id] = 0
		}
		total += want[id]
	}
	pf.WaitForMail(t, total, 30*time.Second)
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
		if count[id] != want[id] {
			t.Errorf("killed at %s: %d copies delivered, want %d", crashSteps[i].name, count[id], want[id])
		}
	}
}

// A rendered reply goes through the outbox and a real MTA: Debian's
// Postfix, over STARTTLS, into a Maildir read back here. (The instance
// delivers every domain locally: nothing leaves the machine.)
func TestReplyThroughPostfix(t *testing.T) {
	maildir := filepath.Join(t.TempDir(), "Maildir")
	pf := smtptest.StartPostfix(t, maildir)

	run, err := reports.LoadRun("../../reports/testdata/runs/squashfs-improvement")
	if err != nil {
		t.Fatal(err)
	}
	reply, err := reports.Render(run, reports.ReplyOptions{From: "patchbot <bot@patchbot.test>"})
	if err != nil {
		t.Fatal(err)
	}
	raw, err := reply.Bytes()
	if err != nil {
		t.Fatal(err)
	}
	rcpt, err := reply.Recipients()
	if err != nil {
		t.Fatal(err)
	}

	ctx := context.Background()
	st := openStore(t, filepath.Join(t.TempDir(), "state.db"))
	smtpc := newSMTP(t, sender.Config{Addr: pf.Addr, RequireTLS: true}).WithRoots(pf.Roots)
	o := &Outbox{Store: st, Sender: smtpc}
	if _, err := o.Put(ctx, Message{MessageID: reply.Header.MessageID, From: "bot@patchbot.test", To: rcpt, Raw: raw}); err != nil {
		t.Fatal(err)
	}
	if n, err := o.Flush(ctx); err != nil || n != 1 {
		t.Fatalf("Flush = %d, %v\n%s", n, err, pf.Log())
	}
	msgs := pf.WaitForMail(t, len(rcpt), 30*time.Second) // one copy per recipient
	if len(msgs) != len(rcpt) {
		t.Errorf("%d copies delivered, want one per recipient (%d)", len(msgs), len(rcpt))
	}
	for _, got := range msgs {
		msg, err := mail.ReadMessage(bytes.NewReader(got))
		if err != nil {
			t.Fatal(err)
		}
		if id := msg.Header.Get("Message-Id"); id != "<"+reply.Header.MessageID+">" {
			t.Errorf("delivered Message-Id %q", id)
		}
		if irt := msg.Header.Get("In-Reply-To"); irt != "<"+reply.Header.InReplyTo+">" {
			t.Errorf("delivered In-Reply-To %q", irt)
		}
		if !strings.Contains(msg.Header.Get("Received"), "ESMTPS") {
			t.Errorf("delivered without TLS: Received: %s", msg.Header.Get("Received"))
		}
		body := new(bytes.Buffer)
		body.ReadFrom(msg.Body)
		// The UTF-8 body (±) arrives byte for byte.
		if got := strings.ReplaceAll(body.String(), "\r\n", "\n"); got != reply.Body {
			t.Errorf("body changed in transit:\n%s", got)
		}
	}
	if got := state(t, st, reply.Header.MessageID); got.State != store.Sent {
		t.Errorf("outbox state %s, want sent", got.State)
	}
}
