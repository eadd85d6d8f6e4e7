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
	"github.com/patchbot/patchbot/store"
)

// A reply goes through the outbox and a real MTA: Debian's Postfix, over
// STARTTLS, into a Maildir read back here.
func TestOutboxThroughPostfix(t *testing.T) {
	maildir := filepath.Join(t.TempDir(), "Maildir")
	pf := smtptest.StartPostfix(t, maildir)

	ctx := context.Background()
	st := openStore(t, filepath.Join(t.TempDir(), "patchbot.db"))
	m := testMessage("postfix@patchbot.test")
	if _, _, err := st.Enqueue(ctx, m); err != nil {
		t.Fatal(err)
	}
	smtpc := newSMTP(t, Config{Addr: pf.Addr, RequireTLS: true}).WithRoots(pf.Roots)
	o := &Outbox{Store: st, Transport: smtpc}
	if n, err := o.Flush(ctx); err != nil || n != 1 {
		t.Fatalf("Flush = %d, %v\n%s", n, err, pf.Log())
	}
	msgs := pf.WaitForMail(t, 2, 30*time.Second) // one copy per recipient
	for _, raw := range msgs {
		msg, err := mail.ReadMessage(bytes.NewReader(raw))
		if err != nil {
			t.Fatal(err)
		}
		if got := msg.Header.Get("Message-Id"); got != "<postfix@patchbot.test>" {
			t.Errorf("delivered Message-Id %q", got)
		}
		if !strings.Contains(msg.Header.Get("Received"), "ESMTPS") {
			t.Errorf("delivered without TLS: Received: %s", msg.Header.Get("Received"))
		}
		body := new(bytes.Buffer)
		body.ReadFrom(msg.Body)
		if !strings.Contains(body.String(), "read-storm throughput by 1.8x") {
			t.Errorf("body lost: %q", body.String())
		}
	}
	if got, _ := st.Message(ctx, 1); got.State != store.Sent {
		t.Errorf("outbox state %s, want sent", got.State)
	}
}
