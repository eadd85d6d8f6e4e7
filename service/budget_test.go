package service

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/emersion/go-msgauth/dkim"

	"github.com/patchbot/patchbot/config"
	"github.com/patchbot/patchbot/mailbox"
	"github.com/patchbot/patchbot/mailbox/dkimtest"
	"github.com/patchbot/patchbot/mailbox/dnstest"
	"github.com/patchbot/patchbot/store"
)

// BenchmarkCommandBehindUnreachableSigners measures what a thousand mails
// signed by domains whose DNS never answers cost a signed maintainer's
// command read after them on the same source: the delay from the poll
// that finds them all to the command acted on (its row logged in the
// store, in the transaction that queues its job). The DNS is real:
// dnsmasq serves the maintainer's key (python3-dkim signs the command) and
// forwards unreachable.test to a name server that drops every query; the
// verifier asks it with the default 5 s timeout. The goal is at most 10 s.
//
//	go test -run XXX -bench CommandBehindUnreachableSigners -benchtime 3x ./service/
func BenchmarkCommandBehindUnreachableSigners(b *testing.B) {
	for _, n := range benchSizes {
		b.Run(fmt.Sprintf("mails=%d/domains=%d", n.mails, n.domains), func(b *testing.B) {
			benchUnreachable(b, n.mails, n.domains)
		})
	}
}

// benchSizes are the mails and their signing domains (0: unsigned, the
// cost of acting on the mail alone).
var benchSizes = []struct{ mails, domains int }{{1000, 0}, {1000, 1000}, {1000, 10}}

func benchUnreachable(b *testing.B, mails, domains int) {
	key := dkimtest.NewKeys(b, "key1", "example.org")["example.org"]
	res := dnstest.StartDnsmasq(b, map[string]string{key.Name(): key.TXT}, "unreachable.test")
	dir := b.TempDir()
	mbox := filepath.Join(dir, "list.mbox")
	var box bytes.Buffer
	add := func(raw []byte) {
		if err := mailbox.WriteMboxEntry(&box, bytes.ReplaceAll(raw, []byte("\r\n"), []byte("\n"))); err != nil {
			b.Fatal(err)
		}
	}
	seed, err := os.ReadFile("../testdata/mbox/squashfs-thundering-herd.mbox")
	if err != nil {
		b.Fatal(err)
	}
	mailbox.ReadMbox(bytes.NewReader(seed), func(raw []byte, _ int64) error {
		if box.Len() == 0 {
			add(raw)
		}
		return nil
	})
	seedID := "20260724190556.1950693-1-usama.arif@linux.dev"
	// The strangers: each signed by its domain (a key nobody can fetch).
	_, priv, _ := ed25519.GenerateKey(rand.Reader)
	for i := 0; i < mails; i++ {
		d := fmt.Sprintf("s%d.unreachable.test", i%max(domains, 1))
		raw := fmt.Sprintf("From: Stranger %d <x%d@%s>\r\nTo: linux-fsdevel@vger.kernel.org\r\nSubject: Re: [PATCH] squashfs\r\n"+
			"Date: %s\r\nMessage-ID: <stranger-%d@%s>\r\nIn-Reply-To: <%s>\r\nReferences: <%s>\r\n\r\nme too %d\r\n",
			i, i, d, time.Now().Format(time.RFC1123Z), i, d, seedID, seedID, i)
		if domains == 0 {
			add([]byte(raw))
			continue
		}
		var signed bytes.Buffer
		if err := dkim.Sign(&signed, strings.NewReader(raw), &dkim.SignOptions{Domain: d, Selector: fmt.Sprintf("sel%d", i),
			Signer: priv}); err != nil {
			b.Fatal(err)
		}
		add(signed.Bytes())
	}
	cmdID := "cmd-behind@example.org"
	add(key.Sign(b, []byte(strings.ReplaceAll(fmt.Sprintf("From: Maintainer <maintainer@example.org>\nTo: linux-fsdevel@vger.kernel.org\n"+
		"Subject: Re: [PATCH] squashfs\nDate: %s\nMessage-ID: <%s>\nIn-Reply-To: <%s>\nReferences: <%s>\n\n#patchbot test cache-contention\n",
		time.Now().Format(time.RFC1123Z), cmdID, seedID, seedID), "\n", "\r\n"))))
	if err := os.WriteFile(mbox, box.Bytes(), 0o644); err != nil {
		b.Fatal(err)
	}

	var delays []time.Duration
	for i := 0; i < b.N; i++ {
		state := filepath.Join(dir, fmt.Sprintf("state-%d", i))
		os.MkdirAll(state, 0o700)
		cfg := config.Default()
		cfg.StateDir = state
		cfg.Commands.Allow = []string{"maintainer@example.org"}
		sc := mailbox.SourceConfig{Name: "list", Mbox: mbox, List: "linux-fsdevel@vger.kernel.org"}
		cfg.Sources = []mailbox.SourceConfig{sc}
		st, err := store.Open(filepath.Join(state, "state.db"))
		if err != nil {
			b.Fatal(err)
		}
		log := slog.New(slog.NewTextHandler(&bytes.Buffer{}, nil))
		src, err := mailbox.Open(sc, log)
		if err != nil {
			b.Fatal(err)
		}
		d := &Daemon{Config: cfg, Store: st, Log: log,
			Verifier: mailbox.NewVerifier(mailbox.DKIMConfig{DNS: res.Addr}, nil)}
		d.defaults()
		ctx, cancel := context.WithCancel(context.Background())
		start := time.Now()
		go d.watch(ctx, "list", src)
		var outcome string
		for time.Since(start) < 10*time.Minute {
			err := st.DB().QueryRow(`SELECT outcome FROM commands WHERE message_id LIKE ?`, cmdID+"#%").Scan(&outcome)
			if err == nil {
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
		delay := time.Since(start)
		cancel()
		var kept, verified int
		var att string
		st.DB().QueryRow(`SELECT attestation FROM messages WHERE message_id = ?`, cmdID).Scan(&att)
		st.DB().QueryRow(`SELECT count(*) FROM messages`).Scan(&kept)
		st.DB().QueryRow(`SELECT count(*) FROM commands WHERE verified = 1`).Scan(&verified)
		st.Close()
		if outcome != "accepted" || verified != 1 {
			b.Fatalf("the maintainer's command: outcome %q, verified %d (of %d mails kept) after %s; attestation %s", outcome, verified, kept, delay, att)
		}
		delays = append(delays, delay)
	}
	var worst time.Duration
	for _, d := range delays {
		worst = max(worst, d)
	}
	b.ReportMetric(worst.Seconds(), "s-worst-delay")
	b.ReportMetric(0, "ns/op")
}
