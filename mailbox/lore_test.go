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
	"strings"
	"testing"
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
