package service

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/patchbot/patchbot/config"
	"github.com/patchbot/patchbot/intake"
	"github.com/patchbot/patchbot/mailbox"
	"github.com/patchbot/patchbot/store"
	"github.com/patchbot/patchbot/store/pgtest"
)

// No mail can stop a source: whatever bytes its Message-ID, In-Reply-To,
// References, From:, Subject: and command line hold (a NUL, bytes that
// are not UTF-8, overlong and surrogate encodings, encoded words of no
// charset, folded lines), the daemon keeps it on a real PostgreSQL and its
// source's cursor moves past it on the first read. `go test -short` runs
// the seeds below; the fuzzing run is recorded in docs/measurements.md.
func FuzzIngestHostileHeaders(f *testing.F) {
	for _, seed := range [][6]string{
		{"plain@example.org", "", "", "Dev <dev@example.org>", "Re: [PATCH] squashfs: x", "#patchbot help"},
		{"nul\x00@example.org", "parent\x00@x", "root\x00@x", "Dev <dev@example.org>", "Re: a\x00b", "#patchbot test\x00"},
		{"\xff\xfe@evil", "\xc3\x28@x", "\xe2\x82@x \xed\xa0\x80@x", "\xff <s@\xfe.example>", "\xc0\x80 overlong", "#patchbot \xff"},
		{"", "", "", "=?x-unknown?Q?=FF?= <a@b.example>", "=?UTF-8?B?/w==?=", "#patchbot test series=<\xff@x>"},
		{strings.Repeat("\xff", 300) + "@x", "", strings.Repeat("<a\x00@x> ", 50), "a@b.example, c@d.example", "", "#patchbot stop"},
		{"multi@x>\r\nBcc: victim@example.com\r\nX: <y", "", "", "Dev <dev@example.org>", "line\r\n folded\r\n", "#patchbot test locks"},
	} {
		f.Add(seed[0], seed[1], seed[2], seed[3], seed[4], seed[5])
	}
	pg := pgtest.Start(f)
	dsn, err := pg.NewDB()
	if err != nil {
		f.Fatal(err)
	}
	st, err := store.Open(dsn)
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { st.Close() })
	cfg := config.Default()
	cfg.StateDir = f.TempDir()
	cfg.Sources = []mailbox.SourceConfig{{Name: "list", Mbox: "/nonexistent", List: "linux-fsdevel@vger.kernel.org"}}
	d := &Daemon{Config: cfg, Store: st, Verifier: &mailbox.Verifier{LookupTXT: testKeys.LookupTXT}}
	d.Log = slog.New(slog.NewTextHandler(io.Discard, nil))
	var n atomic.Int64
	f.Fuzz(func(t *testing.T, msgid, inReplyTo, refs, from, subject, line string) {
		raw := fmt.Sprintf("From: %s\r\nTo: linux-fsdevel@vger.kernel.org\r\nSubject: %s\r\nMessage-ID: <%s>\r\n"+
			"In-Reply-To: <%s>\r\nReferences: %s\r\n\r\n%s\r\n", from, subject, msgid, inReplyTo, refs, line)
		m, err := mailbox.ParseBytes([]byte(raw))
		if err != nil {
			return // not a mail: a source passes it by
		}
		ctx := context.Background()
		cur := fmt.Sprintf("cursor-%d", n.Add(1))
		if err := d.Ingest(ctx, "list", m, cur); err != nil {
			t.Fatalf("the ingest of a mail failed (its source would read it again): %v\n%q", err, raw)
		}
		if got, err := st.Cursor(ctx, "list"); err != nil || got != cur {
			t.Fatalf("the source's cursor is %q (%v), want it past the mail, %q", got, err, cur)
		}
		if ok, err := st.HasMessage(ctx, intake.KeyOf(m)); err != nil || !ok {
			t.Fatalf("the mail was not kept (%v): %q", err, raw)
		}
	})
}
