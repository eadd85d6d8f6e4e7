package sender

import (
	"bytes"
	"context"
	"net/mail"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/patchbot/patchbot/mailbox/sender/smtptest"
	"github.com/patchbot/patchbot/reports"
	"github.com/patchbot/patchbot/store"
)

// A rendered reply goes through the outbox and a real MTA: Debian's
// Postfix, over STARTTLS, into a Maildir read back here. (The instance
// delivers every domain locally: nothing leaves the machine.)
func TestOutboxThroughPostfix(t *testing.T) {
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
	st := openStore(t, filepath.Join(t.TempDir(), "patchbot.db"))
	m := store.OutboxMessage{MessageID: reply.Header.MessageID, From: "bot@patchbot.test", Recipients: rcpt, Raw: raw}
	if _, _, err := st.Enqueue(ctx, m); err != nil {
		t.Fatal(err)
	}
	smtpc := newSMTP(t, Config{Addr: pf.Addr, RequireTLS: true}).WithRoots(pf.Roots)
	o := &Outbox{Store: st, Transport: smtpc}
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
	if got, _ := st.Message(ctx, 1); got.State != store.Sent {
		t.Errorf("outbox state %s, want sent", got.State)
	}
}
