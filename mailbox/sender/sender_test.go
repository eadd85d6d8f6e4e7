package sender

import (
	"context"
	"errors"
	"strings"
	"testing"

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
			if err := s.Send(context.Background(), &Email{To: m.Recipients, Raw: m.Raw}); err != nil {
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
			err := s.Send(context.Background(), &Email{To: m.Recipients, Raw: m.Raw})
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
