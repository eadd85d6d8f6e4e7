package mailbox

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/patchbot/patchbot/mailbox/imaptest"
)

// testMail is a small distinct mail for delivery tests.
func testMail(n int) []byte {
	return []byte(fmt.Sprintf("From: Ada Dev <ada@example.org>\r\nTo: list@example.org\r\n"+
		"Subject: [PATCH] demo: change %d\r\nMessage-ID: <imap-%d@demo.example>\r\n"+
		"Date: Mon, 2 Nov 2026 10:00:00 +0000\r\n\r\nbody %d\r\n", n, n, n))
}

// watcher runs IMAP.Watch in the background and hands over what it delivers.
type watcher struct {
	got    chan *Message
	cancel context.CancelFunc
	wg     sync.WaitGroup
	mu     sync.Mutex
	cur    string
	err    error
}

func startWatch(t *testing.T, src *IMAP, cur string) *watcher {
	ctx, cancel := context.WithCancel(context.Background())
	w := &watcher{got: make(chan *Message, 100), cancel: cancel, cur: cur}
	w.wg.Add(1)
	go func() {
		defer w.wg.Done()
		err := src.Watch(ctx, cur, func(m *Message, c string) error {
			w.mu.Lock()
			w.cur = c
			w.mu.Unlock()
			w.got <- m
			return nil
		})
		w.mu.Lock()
		w.err = err
		w.mu.Unlock()
	}()
	t.Cleanup(w.stop)
	return w
}

func (w *watcher) stop() { w.cancel(); w.wg.Wait() }

func (w *watcher) cursor() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.cur
}

func (w *watcher) expect(t *testing.T, id string, within time.Duration) {
	t.Helper()
	select {
	case m := <-w.got:
		if m.MessageID != id {
			t.Fatalf("Watch delivered %q, want %q", m.MessageID, id)
		}
	case <-time.After(within):
		t.Fatalf("Watch did not deliver %s within %v", id, within)
	}
}

func waitIdle(t *testing.T, idling <-chan struct{}) {
	t.Helper()
	select {
	case <-idling:
	case <-time.After(15 * time.Second):
		t.Fatal("Watch did not enter IDLE")
	}
}

func pollAll(t *testing.T, src Source, cur string) ([]string, string) {
	t.Helper()
	var ids []string
	next, err := src.Poll(context.Background(), cur, func(m *Message, _ string) error {
		ids = append(ids, m.MessageID)
		return nil
	})
	if err != nil {
		t.Fatalf("Poll(%q): %v", cur, err)
	}
	return ids, next
}

func TestIMAPDovecot(t *testing.T) {
	srv := imaptest.Start(t)
	src := &IMAP{
		Addr: srv.Addr, User: srv.User, Password: srv.Password,
		// Long enough that a quick delivery proves IDLE woke us up.
		PollInterval: time.Minute,
		MinBackoff:   100 * time.Millisecond, MaxBackoff: 500 * time.Millisecond,
		DialTimeout: 5 * time.Second,
	}
	srv.Deliver(t, testMail(1))
	srv.Deliver(t, []byte("this is not a mail\r\n")) // skipped, cursor moves on
	srv.Deliver(t, testMail(2))

	ids, cur := pollAll(t, src, "")
	if fmt.Sprint(ids) != "[imap-1@demo.example imap-2@demo.example]" {
		t.Fatalf("initial sync got %v", ids)
	}
	c, err := ParseIMAPCursor(cur)
	if err != nil || c.LastUID != 3 || c.UIDValidity == 0 {
		t.Fatalf("cursor after initial sync = %q (%+v, %v), want last UID 3", cur, c, err)
	}

	t.Run("resume", func(t *testing.T) {
		if ids, _ := pollAll(t, src, cur); len(ids) != 0 {
			t.Fatalf("nothing new, but Poll delivered %v", ids)
		}
	})

	t.Run("idle", func(t *testing.T) {
		idling := make(chan struct{}, 10)
		watched := *src
		watched.idling = func() { idling <- struct{}{} }
		w := startWatch(t, &watched, cur)
		waitIdle(t, idling)
		srv.Deliver(t, testMail(3))
		w.expect(t, "imap-3@demo.example", 15*time.Second)
		waitIdle(t, idling) // back to waiting after the fetch

		// The server dies and comes back: Watch reconnects and goes on.
		srv.Restart(t)
		srv.Deliver(t, testMail(4))
		w.expect(t, "imap-4@demo.example", 20*time.Second)
		w.stop()
		cur = w.cursor()
		if c, _ := ParseIMAPCursor(cur); c.LastUID != 5 {
			t.Fatalf("cursor after Watch = %q, want last UID 5", cur)
		}
	})

	t.Run("poll fallback", func(t *testing.T) {
		noIdle := *src
		noIdle.NoIdle = true
		noIdle.PollInterval = 200 * time.Millisecond
		w := startWatch(t, &noIdle, cur)
		srv.Deliver(t, testMail(5))
		w.expect(t, "imap-5@demo.example", 10*time.Second)
		w.stop()
		cur = w.cursor()
	})

	t.Run("restart resumes from cursor", func(t *testing.T) {
		srv.Restart(t)
		srv.Deliver(t, testMail(6))
		ids, next := pollAll(t, src, cur)
		if fmt.Sprint(ids) != "[imap-6@demo.example]" {
			t.Fatalf("after restart got %v, want only the new mail", ids)
		}
		cur = next
	})

	t.Run("uidvalidity change", func(t *testing.T) {
		srv.ResetUIDValidity(t)
		ids, next := pollAll(t, src, cur)
		if len(ids) != 6 {
			t.Fatalf("after UIDVALIDITY change got %d mails %v, want all 6 again", len(ids), ids)
		}
		old, _ := ParseIMAPCursor(cur)
		now, _ := ParseIMAPCursor(next)
		if old.UIDValidity == now.UIDValidity {
			t.Fatalf("UIDVALIDITY did not change (%d)", now.UIDValidity)
		}
	})

	t.Run("bad password", func(t *testing.T) {
		bad := *src
		bad.Password = "wrong"
		if _, err := bad.Poll(context.Background(), "", func(*Message, string) error { return nil }); err == nil {
			t.Fatal("Poll with a wrong password succeeded")
		}
	})
}

func TestNewIMAP(t *testing.T) {
	tests := []struct {
		url, box string
		addr     string
		tls      bool
		user     string
		wantErr  bool
	}{
		{"imap://bot:pw@mail.example.org", "INBOX", "mail.example.org:143", false, "bot", false},
		{"imaps://bot:pw@mail.example.org", "lkml", "mail.example.org:993", true, "bot", false},
		{"imap://127.0.0.1:1143", "", "127.0.0.1:1143", false, "", false},
		{"http://x", "", "", false, "", true},
		{"imap://", "", "", false, "", true},
	}
	for _, tt := range tests {
		s, err := NewIMAP(tt.url, tt.box)
		if (err != nil) != tt.wantErr {
			t.Errorf("NewIMAP(%q) error = %v, want error %v", tt.url, err, tt.wantErr)
			continue
		}
		if err != nil {
			continue
		}
		if s.Addr != tt.addr || s.TLS != tt.tls || s.User != tt.user {
			t.Errorf("NewIMAP(%q) = %+v", tt.url, s)
		}
	}
}
