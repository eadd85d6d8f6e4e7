package mailbox

import (
	"bytes"
	"compress/gzip"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/patchbot/patchbot/mailbox/loretest"
)

// loreArchive lays out fixture mail the way public-inbox serves it:
// <list>/<msgid>/raw, <list>/<msgid>/t.mbox.gz and <list>/new.atom, and
// serves it over HTTP.
type loreArchive struct {
	dir string
	srv *httptest.Server
}

func newLoreArchive(t *testing.T) *loreArchive {
	a := &loreArchive{dir: t.TempDir()}
	a.srv = httptest.NewServer(http.FileServer(http.Dir(a.dir)))
	t.Cleanup(a.srv.Close)
	return a
}

type loreEntry struct {
	msg     *Message
	updated string
}

// publish writes the list's mails, a t.mbox.gz of its thread beside each, and an
// Atom feed of all of them (newest first, as public-inbox does).
func (a *loreArchive) publish(t *testing.T, list string, entries []loreEntry) {
	threads := map[string][]*Message{}
	var feed strings.Builder
	feed.WriteString(`<?xml version="1.0" encoding="us-ascii"?>` + "\n" +
		`<feed xmlns="http://www.w3.org/2005/Atom"><title>` + list + `</title>`)
	for i := len(entries) - 1; i >= 0; i-- {
		m := entries[i].msg
		dir := filepath.Join(a.dir, list, m.MessageID)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "raw"), m.Raw, 0o644); err != nil {
			t.Fatal(err)
		}
		root := m.MessageID
		if len(m.References) > 0 {
			root = m.References[0]
		}
		threads[root] = append([]*Message{m}, threads[root]...)
		link := a.srv.URL + "/" + list + "/" + url.PathEscape(m.MessageID) + "/"
		fmt.Fprintf(&feed, `<entry><author><name>x</name></author><title>%s</title><updated>%s</updated>`+
			`<link href="%s"/><id>urn:uuid:%d</id></entry>`, xmlEscape(m.Subject), entries[i].updated, link, i)
	}
	feed.WriteString("</feed>\n")
	if err := os.WriteFile(filepath.Join(a.dir, list, "new.atom"), []byte(feed.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, msgs := range threads {
		var mbox bytes.Buffer
		for _, m := range msgs {
			WriteMboxEntry(&mbox, m.Raw)
		}
		var gz bytes.Buffer
		zw := gzip.NewWriter(&gz)
		zw.Write(mbox.Bytes())
		zw.Close()
		for _, m := range msgs {
			os.WriteFile(filepath.Join(a.dir, list, m.MessageID, "t.mbox.gz"), gz.Bytes(), 0o644)
		}
	}
}

func xmlEscape(s string) string {
	return strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;").Replace(s)
}

func TestLoreThread(t *testing.T) {
	a := newLoreArchive(t)
	msgs := readFixture(t, "../testdata/mbox/squashfs-thundering-herd.mbox")
	var entries []loreEntry
	for i, m := range msgs {
		entries = append(entries, loreEntry{m, fmt.Sprintf("2026-08-0%dT10:00:00Z", i+1)})
	}
	a.publish(t, "linux-fsdevel", entries)

	// Any message of the thread finds the whole thread.
	src, err := NewLore(a.srv.URL + "/linux-fsdevel/" + url.PathEscape(msgs[2].MessageID) + "/T/#u")
	if err != nil {
		t.Fatal(err)
	}
	if src.MessageID != msgs[2].MessageID {
		t.Fatalf("message id %q", src.MessageID)
	}
	var got []*Message
	if _, err := src.Poll(t.Context(), "", func(m *Message, _ string) error {
		got = append(got, m)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	series := Assemble(got)
	if len(got) != 3 || len(series) != 1 || len(series[0].Patches) != 1 ||
		!reflect.DeepEqual(series[0].Patches[0].Files, []string{"fs/squashfs/cache.c"}) {
		t.Fatalf("thread gave %d mails, series %+v", len(got), series)
	}

	missing, _ := NewLore(a.srv.URL + "/linux-fsdevel/nonexistent@x/")
	if _, err := missing.Poll(t.Context(), "", func(*Message, string) error { return nil }); err == nil ||
		!strings.Contains(err.Error(), "404") {
		t.Fatalf("unknown thread: error %v, want a 404", err)
	}
}

func TestLoreFeed(t *testing.T) {
	a := newLoreArchive(t)
	msgs := readFixture(t, "../testdata/mailbox/reroll.mbox")
	var entries []loreEntry
	for i, m := range msgs[:5] {
		entries = append(entries, loreEntry{m, fmt.Sprintf("2026-11-02T10:%02d:00Z", i)})
	}
	a.publish(t, "linux-demo", entries)
	src, err := NewLore(a.srv.URL + "/linux-demo/")
	if err != nil {
		t.Fatal(err)
	}
	if src.MessageID != "" {
		t.Fatalf("list URL read as thread %q", src.MessageID)
	}
	ids, cur := pollAll(t, src, "")
	if len(ids) != 5 || ids[0] != "v1-0@demo.example" || ids[4] != "r1@demo.example" {
		t.Fatalf("first poll: %v", ids)
	}
	if ids, _ := pollAll(t, src, cur); len(ids) != 0 {
		t.Fatalf("nothing new, got %v", ids)
	}
	// New mail on the list: only it comes.
	for i, m := range msgs[5:9] {
		entries = append(entries, loreEntry{m, fmt.Sprintf("2026-11-09T10:%02d:00Z", i)})
	}
	a.publish(t, "linux-demo", entries)
	ids, _ = pollAll(t, src, cur)
	if !reflect.DeepEqual(ids, []string{"v2-0@demo.example", "v2-1@demo.example", "v2-2@demo.example", "v2-3@demo.example"}) {
		t.Fatalf("second poll: %v", ids)
	}
}

func TestNewLore(t *testing.T) {
	tests := []struct {
		url, list, msgid string
		wantErr          bool
	}{
		{"https://lore.kernel.org/linux-fsdevel/", "https://lore.kernel.org/linux-fsdevel/", "", false},
		{"https://lore.kernel.org/linux-fsdevel/new.atom", "https://lore.kernel.org/linux-fsdevel/", "", false},
		{"https://lore.kernel.org/all/20260724190556.1950693-1-usama.arif@linux.dev/t.mbox.gz",
			"https://lore.kernel.org/all/", "20260724190556.1950693-1-usama.arif@linux.dev", false},
		{"https://lore.kernel.org/lkml/a%2Fb@x/", "https://lore.kernel.org/lkml/", "a/b@x", false},
		{"https://lore.kernel.org/", "", "", true},
		{"ftp://lore.kernel.org/lkml/", "", "", true},
	}
	for _, tt := range tests {
		l, err := NewLore(tt.url)
		if (err != nil) != tt.wantErr {
			t.Errorf("NewLore(%q) error %v", tt.url, err)
			continue
		}
		if err == nil && (l.List.String() != tt.list || l.MessageID != tt.msgid) {
			t.Errorf("NewLore(%q) = %s %q, want %s %q", tt.url, l.List, l.MessageID, tt.list, tt.msgid)
		}
	}
}

// deliverFixture delivers every mail of an mbox fixture, in order, to a
// real public-inbox.
func deliverFixture(t *testing.T, srv *loretest.Server, path string) []*Message {
	t.Helper()
	msgs := readFixture(t, path)
	for _, m := range msgs {
		srv.Deliver(t, m.Raw)
	}
	return msgs
}

// TestLorePublicInboxThread reads a thread by Message-ID from a real
// public-inbox-httpd.
func TestLorePublicInboxThread(t *testing.T) {
	srv := loretest.Start(t, "linux-fsdevel", "linux-fsdevel@example.org")
	msgs := deliverFixture(t, srv, "../testdata/mbox/squashfs-thundering-herd.mbox")
	// Any message of the thread finds the whole thread; lore's URL forms.
	for _, u := range []string{srv.MessageURL(msgs[2].MessageID), srv.MessageURL(msgs[0].MessageID) + "T/#u"} {
		src, err := NewLore(u)
		if err != nil {
			t.Fatal(err)
		}
		got, err := Collect(t.Context(), src)
		if err != nil {
			t.Fatal(err)
		}
		series := Assemble(got)
		if len(got) != 3 || len(series) != 1 || len(series[0].Patches) != 1 ||
			series[0].Patches[0].MessageID != msgs[0].MessageID ||
			!reflect.DeepEqual(series[0].Patches[0].Files, []string{"fs/squashfs/cache.c"}) {
			t.Fatalf("%s: %d mails, series %+v", u, len(got), series)
		}
	}
	missing, _ := NewLore(srv.MessageURL("nonexistent@example.org"))
	if _, err := Collect(t.Context(), missing); err == nil || !strings.Contains(err.Error(), "404") {
		t.Fatalf("unknown thread: error %v, want a 404", err)
	}
}

// TestLorePublicInboxFeed watches a list's new mail on a real
// public-inbox-httpd, whose /raw is mboxrd ("From mboxrd@z" first).
func TestLorePublicInboxFeed(t *testing.T) {
	srv := loretest.Start(t, "linux-demo", "linux-demo@example.org")
	msgs := readFixture(t, "../testdata/mailbox/reroll.mbox")
	for _, m := range msgs[:5] {
		srv.Deliver(t, m.Raw)
	}
	src, err := NewLore(srv.URL())
	if err != nil {
		t.Fatal(err)
	}
	var got []*Message
	poll := func(cur string) string {
		t.Helper()
		got = nil
		next, err := src.Poll(t.Context(), cur, func(m *Message, _ string) error {
			got = append(got, m)
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		return next
	}
	ids := func() []string {
		var out []string
		for _, m := range got {
			out = append(out, m.MessageID)
		}
		return out
	}
	cur := poll("")
	if len(got) != 5 {
		t.Fatalf("first poll: %v", ids())
	}
	for i, m := range got {
		if m.Subject != msgs[i].Subject || m.Body != msgs[i].Body {
			t.Errorf("mail %d came back changed: %q\n%q", i, m.Subject, m.Body)
		}
	}
	if poll(cur); len(got) != 0 {
		t.Fatalf("nothing new, got %v", ids())
	}
	// A body line starting "From " survives mboxrd quoting.
	fromLine := []byte("From: Eve <eve@example.org>\nTo: linux-demo@example.org\nSubject: a line\n" +
		"Date: Mon, 9 Nov 2026 10:00:00 +0000\nMessage-ID: <from/line+1:2@example.org>\n\nFirst\nFrom here on it is quoted.\n>From this too.\n")
	srv.Deliver(t, fromLine)
	for _, m := range msgs[5:9] {
		srv.Deliver(t, m.Raw)
	}
	cur = poll(cur)
	want := []string{"from/line+1:2@example.org", "v2-0@demo.example", "v2-1@demo.example", "v2-2@demo.example", "v2-3@demo.example"}
	if !reflect.DeepEqual(ids(), want) {
		t.Fatalf("second poll: %v, want %v", ids(), want)
	}
	if b := got[0].Body; b != "First\nFrom here on it is quoted.\n>From this too.\n" {
		t.Errorf("From lines: %q", b)
	}
	// A Message-ID with '/', '+' and ':' reads as a thread too.
	th, err := NewLore(srv.MessageURL("from/line+1:2@example.org"))
	if err != nil {
		t.Fatal(err)
	}
	if msgs, err := Collect(t.Context(), th); err != nil || len(msgs) != 1 || msgs[0].MessageID != "from/line+1:2@example.org" {
		t.Fatalf("thread of an odd Message-ID: %v, %v", msgs, err)
	}
	if poll(cur); len(got) != 0 {
		t.Fatalf("nothing new, got %v", ids())
	}
}

// TestLorePublicInboxBurst: far more mail arrives between two polls than
// the Atom feed shows; every mail is delivered, once.
func TestLorePublicInboxBurst(t *testing.T) {
	srv := loretest.Start(t, "linux-burst", "linux-burst@example.org")
	mk := func(i int, date string) []byte {
		return []byte(fmt.Sprintf("From: Dev %d <dev%d@example.org>\nTo: linux-burst@example.org\n"+
			"Subject: [PATCH] burst: change %d\nDate: %s\nMessage-ID: <burst-%d@example.org>\n\nchange %d\n", i%7, i%7, i, date, i, i))
	}
	srv.Deliver(t, mk(0, "Tue, 1 Dec 2026 09:00:00 +0000"))
	src, err := NewLore(srv.URL())
	if err != nil {
		t.Fatal(err)
	}
	cur, err := src.Poll(t.Context(), "", func(*Message, string) error { return nil })
	if err != nil {
		t.Fatal(err)
	}
	const n = 200
	var raws [][]byte
	for i := 1; i <= n; i++ {
		// 20 mails a second: many share a received time.
		raws = append(raws, mk(i, fmt.Sprintf("Tue, 1 Dec 2026 09:00:%02d +0000", 1+i/20)))
	}
	srv.DeliverMany(t, raws)
	seen := map[string]int{}
	cur, err = src.Poll(t.Context(), cur, func(m *Message, _ string) error {
		seen[m.MessageID]++
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	dups := 0
	for _, c := range seen {
		dups += c - 1
	}
	for i := 1; i <= n; i++ {
		if seen[fmt.Sprintf("burst-%d@example.org", i)] == 0 {
			t.Errorf("burst-%d never arrived", i)
		}
	}
	t.Logf("burst: delivered %d, seen %d, duplicates %d, cursor %d bytes", n, len(seen), dups, len(cur))
	if len(seen) != n || dups != 0 {
		t.Fatalf("delivered %d, seen %d distinct, %d duplicates", n, len(seen), dups)
	}
	again := 0
	if _, err := src.Poll(t.Context(), cur, func(*Message, string) error { again++; return nil }); err != nil || again != 0 {
		t.Fatalf("poll after the burst: %d mails, %v", again, err)
	}
}

// TestLoreFeedFallback: an archive that serves no git (no manifest) is
// read from its feed even with a Mirror, by Message-ID: a mail dated a
// year ahead sits at the top of the feed and does not hide the mail that
// comes after it; an older patchbot's lore1: cursor becomes a feed2: one.
func TestLoreFeedFallback(t *testing.T) {
	a := newLoreArchive(t)
	msgs := readFixture(t, "../testdata/mailbox/reroll.mbox")
	if len(msgs) < 9 {
		t.Fatalf("%d mails in the fixture", len(msgs))
	}
	at := func(i int) string { return fmt.Sprintf("2026-11-02T10:%02d:00Z", i) }
	// The feed lists by claimed time: publish's last entry is its top.
	var entries []loreEntry
	for i := range 3 {
		entries = append(entries, loreEntry{msgs[i], at(i)})
	}
	a.publish(t, "linux-demo", entries)
	src, _ := NewLore(a.srv.URL + "/linux-demo/")
	src.Mirror, src.Since = filepath.Join(t.TempDir(), "mirror"), "now"
	ids, cur := pollAll(t, src, "")
	if len(ids) != 0 || !strings.HasPrefix(cur, loreFeedPrefix) {
		t.Fatalf("first poll at now: %v, cursor %q", ids, cur)
	}
	future := loreEntry{msgs[3], "2027-11-02T10:00:00Z"}
	for i := 4; i < 8; i++ {
		entries = append(entries, loreEntry{msgs[i], at(i)})
	}
	a.publish(t, "linux-demo", append(append([]loreEntry{}, entries...), future))
	ids, cur = pollAll(t, src, cur)
	want := []string{msgs[4].MessageID, msgs[5].MessageID, msgs[6].MessageID, msgs[7].MessageID, msgs[3].MessageID}
	if !reflect.DeepEqual(ids, want) {
		t.Fatalf("after a mail a year ahead and four more: %v, want %v", ids, want)
	}
	entries = append(entries, loreEntry{msgs[8], at(8)})
	a.publish(t, "linux-demo", append(append([]loreEntry{}, entries...), future))
	if ids, _ := pollAll(t, src, cur); !reflect.DeepEqual(ids, []string{msgs[8].MessageID}) {
		t.Fatalf("the mail after the one a year ahead: %v", ids)
	}
	// An older patchbot had delivered the first three.
	legacy := newSeenSet(loreCursorPrefix, time.Hour, 0)
	for i := range 3 {
		tm, _ := time.Parse(time.RFC3339, at(i))
		legacy.add(tm.Unix(), msgs[i].MessageID)
	}
	ids, next := pollAll(t, src, legacy.String())
	if len(ids) != 6 || slices.Contains(ids, msgs[0].MessageID) || !strings.HasPrefix(next, loreFeedPrefix) {
		t.Fatalf("from a lore1: cursor: %v, cursor %q", ids, next)
	}
	if ids, _ := pollAll(t, src, next); len(ids) != 0 {
		t.Fatalf("after the migration: %v", ids)
	}
}
