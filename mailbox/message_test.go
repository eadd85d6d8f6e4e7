package mailbox

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/mail"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"syscall"
	"testing"
	"time"
)

func TestParse(t *testing.T) {
	diff := "diff --git a/fs/locks.c b/fs/locks.c\n--- a/fs/locks.c\n+++ b/fs/locks.c\n@@ -1 +1 @@\n-a\n+b\n"
	tests := []struct {
		name    string
		raw     string
		check   func(t *testing.T, m *Message)
		wantErr bool
	}{
		{
			name: "RFC 2047 subject and in-body From",
			raw: "From: Sender <s@example.org>\nSubject: =?UTF-8?B?W1BBVENIXSBsb2NrczogYXZvaWQgaGVyZCDigJQgw6k=?=\n" +
				"Message-ID: <a@b>\nIn-Reply-To: <p@b> (comment)\nReferences: <r1@b>\n <p@b>\n\n" +
				"From: =?UTF-8?Q?Jos=C3=A9_Author?= <jose@example.org>\n\nbody\nbase-commit: 0123abcd\n---\n" + diff,
			check: func(t *testing.T, m *Message) {
				if m.Subject != "[PATCH] locks: avoid herd — é" {
					t.Errorf("subject %q", m.Subject)
				}
				if m.Author != "José Author <jose@example.org>" || m.From != "Sender <s@example.org>" {
					t.Errorf("author %q from %q", m.Author, m.From)
				}
				if m.InReplyTo != "p@b" || !reflect.DeepEqual(m.References, []string{"r1@b", "p@b"}) {
					t.Errorf("in-reply-to %q references %q", m.InReplyTo, m.References)
				}
				if m.BaseCommit != "0123abcd" || m.Diff != diff {
					t.Errorf("base %q diff %q", m.BaseCommit, m.Diff)
				}
			},
		},
		{
			name: "quoted-printable body",
			raw: "From: a@b\nSubject: [PATCH] x\nContent-Type: text/plain; charset=utf-8\nContent-Transfer-Encoding: quoted-printable\n\n" +
				"caf=C3=A9 =3D ok\n---\n" + strings.ReplaceAll(diff, "=", "=3D"),
			check: func(t *testing.T, m *Message) {
				if !strings.HasPrefix(m.Body, "café = ok\n") || m.Diff != diff {
					t.Errorf("body %q diff %q", m.Body, m.Diff)
				}
			},
		},
		{
			name: "quoted diff in a reply is no diff",
			raw:  "From: a@b\nSubject: Re: [PATCH] x\n\n> " + strings.ReplaceAll(strings.TrimSuffix(diff, "\n"), "\n", "\n> ") + "\n\nNice.\n",
			check: func(t *testing.T, m *Message) {
				if m.Diff != "" {
					t.Errorf("found a diff in quoted text: %q", m.Diff)
				}
			},
		},
		{
			name: "diff attached as text/x-diff, base64",
			raw: "From: a@b\nSubject: [PATCH] x\nMIME-Version: 1.0\nContent-Type: multipart/mixed; boundary=XX\n\n--XX\nContent-Type: text/plain\n\nmessage\n--XX\n" +
				"Content-Type: text/x-diff\nContent-Transfer-Encoding: base64\n\n" + b64(diff) + "\n--XX--\n",
			check: func(t *testing.T, m *Message) {
				if m.Diff != diff || !m.DiffAttached || strings.Contains(m.Body, "diff --git") {
					t.Errorf("diff %q attached %v body %q", m.Diff, m.DiffAttached, m.Body)
				}
			},
		},
		{
			name: "unknown charset is a warning",
			raw:  "From: a@b\nSubject: x\nContent-Type: text/plain; charset=x-unheard-of\n\nhello\n",
			check: func(t *testing.T, m *Message) {
				if len(m.Warnings) == 0 || m.Body != "hello\n" {
					t.Errorf("warnings %q body %q", m.Warnings, m.Body)
				}
			},
		},
		{
			name: "latin-1 is converted",
			raw:  "From: a@b\nSubject: x\nContent-Type: text/plain; charset=iso-8859-1\nContent-Transfer-Encoding: 8bit\n\ncaf\xe9\n",
			check: func(t *testing.T, m *Message) {
				if len(m.Warnings) != 0 || m.Body != "café\n" {
					t.Errorf("warnings %q body %q", m.Warnings, m.Body)
				}
			},
		},
		{name: "no header", raw: "\njust text\n", wantErr: true},
		{name: "garbage", raw: "this is not a mail\n", wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m, err := Parse(strings.NewReader(tt.raw))
			if (err != nil) != tt.wantErr {
				t.Fatalf("error %v, want error %v", err, tt.wantErr)
			}
			if err == nil {
				tt.check(t, m)
			}
		})
	}
}

func b64(s string) string {
	var b bytes.Buffer
	enc := []byte("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/")
	in := []byte(s)
	for len(in) > 0 {
		var chunk [3]byte
		n := copy(chunk[:], in)
		in = in[n:]
		v := uint(chunk[0])<<16 | uint(chunk[1])<<8 | uint(chunk[2])
		for i := 0; i < 4; i++ {
			if i > n {
				b.WriteByte('=')
			} else {
				b.WriteByte(enc[(v>>(18-6*i))&63])
			}
		}
	}
	return b.String()
}

func TestReadMboxEscaping(t *testing.T) {
	// mboxrd: every >*From line gains a '>' on writing and loses it on reading.
	bodies := []string{
		"Subject: one\n\nFrom here on\n>From quoted\n>>From twice\n",
		"Subject: two\n\nplain\n",
	}
	var mbox bytes.Buffer
	for _, b := range bodies {
		if err := WriteMboxEntry(&mbox, []byte(b)); err != nil {
			t.Fatal(err)
		}
	}
	if !strings.Contains(mbox.String(), "\n>From here on\n>>From quoted\n>>>From twice\n") {
		t.Fatalf("not escaped:\n%s", mbox.String())
	}
	var got []string
	var offs []int64
	err := ReadMbox(&mbox, func(raw []byte, off int64) error {
		got = append(got, string(raw))
		offs = append(offs, off)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, bodies) {
		t.Errorf("read back %q, want %q", got, bodies)
	}
	if offs[0] != 0 || offs[1] == 0 {
		t.Errorf("offsets %v", offs)
	}
}

func TestMboxSourceCursor(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "in.mbox")
	seed, err := os.ReadFile("../testdata/mbox/squashfs-thundering-herd.mbox")
	if err != nil {
		t.Fatal(err)
	}
	// A broken mail in the middle is skipped and the cursor moves past it.
	data := append(append([]byte{}, seed...), []byte("\nFrom x Mon Jan  1 00:00:00 2024\nnot a header line\n\n")...)
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	src := &Mbox{Path: path}
	ids, cur := pollAll(t, src, "")
	if len(ids) != 3 || cur != fmt.Sprint(len(data)) {
		t.Fatalf("first poll: %v cursor %q (file is %d bytes)", ids, cur, len(data))
	}
	if ids, _ := pollAll(t, src, cur); len(ids) != 0 {
		t.Fatalf("second poll delivered %v", ids)
	}
	// The file grows: only the new mail comes.
	f, _ := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
	f.Write([]byte("\n"))
	WriteMboxEntry(f, testMail(7))
	f.Close()
	if ids, _ := pollAll(t, src, cur); !reflect.DeepEqual(ids, []string{"imap-7@demo.example"}) {
		t.Fatalf("after append: %v", ids)
	}
	// A shorter file replaced it: read from the start.
	if err := os.WriteFile(path, seed, 0o644); err != nil {
		t.Fatal(err)
	}
	if ids, _ := pollAll(t, src, cur); len(ids) != 3 {
		t.Fatalf("after the file was replaced: %v", ids)
	}
	os.WriteFile(path, data, 0o644)
	// Stopping in fn keeps the cursor of the last mail handled.
	stop := errors.New("stop")
	n := 0
	c, err := src.Poll(context.Background(), "", func(m *Message, c string) error {
		n++
		if n == 2 {
			return stop
		}
		return nil
	})
	if !errors.Is(err, stop) || c == "" || c == cur {
		t.Fatalf("Poll stopped with %v at %q", err, c)
	}
}

// TestMboxReadOnce: read once (the CLI), the end of the input is the end
// of the last mail: a pipe and a file written a moment ago without the
// closing blank line give every mail. Followed, the same file holds the
// last one back (TestMboxHalfWritten).
func TestMboxReadOnce(t *testing.T) {
	var whole bytes.Buffer
	WriteMboxEntry(&whole, testMail(1))
	WriteMboxEntry(&whole, testMail(2))
	fresh := bytes.TrimSuffix(whole.Bytes(), []byte("\n"))
	path := filepath.Join(t.TempDir(), "fresh.mbox")
	if err := os.WriteFile(path, fresh, 0o644); err != nil {
		t.Fatal(err)
	}
	want := []string{"imap-1@demo.example", "imap-2@demo.example"}
	if ids, _ := pollAll(t, &Mbox{Path: path}, ""); !reflect.DeepEqual(ids, want) {
		t.Errorf("a file written a moment ago, read once: %v, want %v", ids, want)
	}
	if ids, _ := pollAll(t, &Mbox{Path: path, Follow: true, QuietPeriod: time.Hour}, ""); len(ids) != 1 {
		t.Errorf("the same file followed: %v, want the last mail held back", ids)
	}
	// A pipe, by its /dev/fd path as <(...) and /dev/stdin give it, written
	// in two pieces.
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	go func() {
		w.Write(fresh[:len(fresh)/2])
		time.Sleep(50 * time.Millisecond)
		w.Write(fresh[len(fresh)/2:])
		w.Close()
	}()
	pipe := fmt.Sprintf("/dev/fd/%d", r.Fd())
	for _, follow := range []bool{false, true} {
		if follow {
			// A pipe cannot be read again: even followed, what it gave is all.
			r2, w2, _ := os.Pipe()
			defer r2.Close()
			w2.Write(fresh)
			w2.Close()
			pipe = fmt.Sprintf("/dev/fd/%d", r2.Fd())
		}
		if ids, _ := pollAll(t, &Mbox{Path: pipe, Follow: follow}, ""); !reflect.DeepEqual(ids, want) {
			t.Errorf("a pipe (follow %v): %v, want %v", follow, ids, want)
		}
	}
}

// TestMboxHalfWritten: the last mail of an mbox that is being appended to
// is not delivered until it is whole, when the mbox is followed.
func TestMboxHalfWritten(t *testing.T) {
	path := filepath.Join(t.TempDir(), "list.mbox")
	var whole bytes.Buffer
	WriteMboxEntry(&whole, testMail(1))
	WriteMboxEntry(&whole, testMail(2))
	full := whole.Bytes()
	cut := bytes.Index(full, []byte("body 2")) // mid-way through mail 2
	src := &Mbox{Path: path, Follow: true, QuietPeriod: time.Hour}
	os.WriteFile(path, full[:cut], 0o644)
	ids, cur := pollAll(t, src, "")
	if !reflect.DeepEqual(ids, []string{"imap-1@demo.example"}) {
		t.Fatalf("half-written mbox: %v", ids)
	}
	// The writer finishes: the mail comes whole, once.
	os.WriteFile(path, full, 0o644)
	ids, cur = pollAll(t, src, cur)
	if !reflect.DeepEqual(ids, []string{"imap-2@demo.example"}) {
		t.Fatalf("after the write: %v", ids)
	}
	if ids, _ := pollAll(t, src, cur); len(ids) != 0 {
		t.Fatalf("nothing new, got %v", ids)
	}
	// Whole but locked by a writer (flock, or a dot-lock): held back.
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		t.Fatal(err)
	}
	if ids, _ := pollAll(t, src, ""); len(ids) != 1 {
		t.Fatalf("locked: %v", ids)
	}
	syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
	os.WriteFile(path+".lock", nil, 0o644)
	if ids, _ := pollAll(t, src, ""); len(ids) != 1 {
		t.Fatalf("dot-locked: %v", ids)
	}
	os.Remove(path + ".lock")
	if ids, _ := pollAll(t, src, ""); len(ids) != 2 {
		t.Fatalf("unlocked: %v", ids)
	}
	// A file without the closing blank line is complete once it has been
	// quiet for the period (a hand-made mbox, a bare .eml).
	os.WriteFile(path, bytes.TrimSuffix(full, []byte("\n")), 0o644)
	if ids, _ := pollAll(t, &Mbox{Path: path, Follow: true, QuietPeriod: time.Hour}, ""); len(ids) != 1 {
		t.Fatalf("just written, no blank line: %v", ids)
	}
	old := time.Now().Add(-time.Minute)
	os.Chtimes(path, old, old)
	if ids, _ := pollAll(t, &Mbox{Path: path, Follow: true, QuietPeriod: time.Second}, ""); len(ids) != 2 {
		t.Fatalf("quiet, no blank line: %v", ids)
	}
}

func TestMaildirSource(t *testing.T) {
	dir := t.TempDir()
	for _, d := range []string{"cur", "new", "tmp"} {
		os.MkdirAll(filepath.Join(dir, d), 0o755)
	}
	os.WriteFile(filepath.Join(dir, "cur", "1700000001.M1P1.host:2,S"), testMail(1), 0o644)
	os.WriteFile(filepath.Join(dir, "new", "1700000002.M2P1.host"), []byte("garbage\n"), 0o644)
	os.WriteFile(filepath.Join(dir, "new", "1700000003.M3P1.host"), testMail(3), 0o644)
	src := &Maildir{Dir: dir}
	ids, cur := pollAll(t, src, "")
	if !reflect.DeepEqual(ids, []string{"imap-1@demo.example", "imap-3@demo.example"}) {
		t.Fatalf("got %v cursor %q", ids, cur)
	}
	os.WriteFile(filepath.Join(dir, "new", "1700000004.M4P1.host"), testMail(4), 0o644)
	ids, cur = pollAll(t, src, cur)
	if !reflect.DeepEqual(ids, []string{"imap-4@demo.example"}) {
		t.Fatalf("after delivery: %v", ids)
	}
	// Later mails whose names sort before the newest one: the same second
	// with a smaller counter ("M10" < "M4"), and one moved in from another
	// folder an hour older. Moving a read mail from new/ to cur/ (a mail
	// reader marking it) does not deliver it again.
	os.WriteFile(filepath.Join(dir, "new", "1700000004.M10P1.host"), testMail(5), 0o644)
	os.WriteFile(filepath.Join(dir, "new", "1699996400.M1P9.other"), testMail(6), 0o644)
	os.Rename(filepath.Join(dir, "new", "1700000004.M4P1.host"), filepath.Join(dir, "cur", "1700000004.M4P1.host:2,S"))
	ids, cur = pollAll(t, src, cur)
	if !reflect.DeepEqual(ids, []string{"imap-6@demo.example", "imap-5@demo.example"}) {
		t.Fatalf("late mails with smaller names: %v", ids)
	}
	if ids, _ := pollAll(t, src, cur); len(ids) != 0 {
		t.Fatalf("nothing new, got %v", ids)
	}
	// A cursor of an older patchbot (the last name delivered) still works.
	if ids, _ := pollAll(t, src, "1700000003.M3P1.host"); !reflect.DeepEqual(ids, []string{"imap-5@demo.example", "imap-4@demo.example"}) {
		t.Fatalf("from a legacy cursor: %v", ids)
	}
	if _, err := (&Maildir{Dir: t.TempDir()}).Poll(context.Background(), "", nil); err == nil {
		t.Fatal("an empty directory read as a Maildir")
	}
}

// TestMaildirSeenBounded: the cursor stays small however many mails the
// Maildir holds, and a mail older than the window is taken as seen.
func TestMaildirSeenBounded(t *testing.T) {
	dir := t.TempDir()
	for _, d := range []string{"cur", "new", "tmp"} {
		os.MkdirAll(filepath.Join(dir, d), 0o755)
	}
	for i := range 300 {
		// One mail a minute for five hours.
		os.WriteFile(filepath.Join(dir, "new", fmt.Sprintf("%d.M%dP1.host", 1700000000+60*i, i)), testMail(i), 0o644)
	}
	src := &Maildir{Dir: dir, SeenWindow: time.Hour, SeenMax: 50}
	ids, cur := pollAll(t, src, "")
	if len(ids) != 300 {
		t.Fatalf("delivered %d of 300", len(ids))
	}
	if len(cur) > 50*16+64 {
		t.Fatalf("cursor of %d bytes for at most 50 names", len(cur))
	}
	if ids, _ := pollAll(t, src, cur); len(ids) != 0 {
		t.Fatalf("nothing new, got %d", len(ids))
	}
	// Within the window but before the kept set: the cap moved the low
	// mark up, and a newcomer below it is taken as seen (documented).
	os.WriteFile(filepath.Join(dir, "new", "1700000000.M999P1.late"), testMail(999), 0o644)
	os.WriteFile(filepath.Join(dir, "new", fmt.Sprintf("%d.M999P1.late", 1700000000+60*299)), testMail(1000), 0o644)
	if ids, _ := pollAll(t, src, cur); !reflect.DeepEqual(ids, []string{"imap-1000@demo.example"}) {
		t.Fatalf("late mails: %v", ids)
	}
}

func TestParseCommands(t *testing.T) {
	tests := []struct {
		body string
		want []Command
	}{
		{"Please run it.\n#patchbot test cache-contention readahead profile=quick\n", []Command{{
			Name: "test", Suites: []string{"cache-contention", "readahead"}, Profile: "quick",
			Line: "#patchbot test cache-contention readahead profile=quick"}}},
		{"#patchbot test\n", []Command{{Name: "test", Line: "#patchbot test"}}},
		{"  #patchbot help\n", []Command{{Name: "help", Line: "#patchbot help"}}},
		{"> #patchbot test\nquoted, not for us\n", nil},
		{"#patchbotty test\n", nil},
		{"#patchbot frobnicate\n", []Command{{Name: "frobnicate", Line: "#patchbot frobnicate",
			Err: `unknown command "frobnicate" (known: test, help, stop)`}}},
		{"#patchbot test colour=red\n", []Command{{Name: "test", Line: "#patchbot test colour=red",
			Err: `unknown option "colour=red" (known: profile=P, base=TREE|COMMIT, patches=M-N, series=MESSAGE-ID)`}}},
		{"#patchbot\n", []Command{{Line: "#patchbot", Err: `no command after #patchbot (try "#patchbot help")`}}},
	}
	for _, tt := range tests {
		got := ParseCommands(&Message{Body: tt.body})
		if !reflect.DeepEqual(got, tt.want) {
			t.Errorf("ParseCommands(%q) = %+v, want %+v", tt.body, got, tt.want)
		}
	}
}

// TestSimpleAddrList: the fast path gives what the full parser gives, and
// declines what it cannot be sure of.
func TestSimpleAddrList(t *testing.T) {
	tests := []struct {
		in   string
		fast bool
	}{
		{"Andrew Morton <akpm@linux-foundation.org>, linux-kernel@vger.kernel.org", true},
		{"phillip@squashfs.org.uk,\n Andrew Morton <akpm@linux-foundation.org>", true},
		{"<bare@example.org>", true},
		{`"Lastname, First" <x@y>`, false},
		{"J. Bruce Fields <bfields@fieldses.org>", false},
		{"=?UTF-8?q?Ren=C3=A9?= <r@x>", false},
		{"undisclosed-recipients:;", false},
		{"a@b (comment)", false},
		{"not an address", false},
	}
	for _, tt := range tests {
		got, ok := simpleAddrList(tt.in)
		if ok != tt.fast {
			t.Errorf("simpleAddrList(%q) ok = %v, want %v", tt.in, ok, tt.fast)
			continue
		}
		if !ok {
			continue
		}
		m, err := ParseBytes([]byte("From: a@b\nCc: x@y, " + tt.in + " , z@w\nSubject: s\n\n"))
		if err != nil {
			t.Fatal(err)
		}
		addrs, err := mailAddrs(strings.ReplaceAll(tt.in, "\n", "")) // unfolded
		if err != nil {
			t.Fatalf("net/mail rejects %q: %v", tt.in, err)
		}
		if !reflect.DeepEqual(got, addrs) {
			t.Errorf("simpleAddrList(%q) = %q, net/mail gives %q", tt.in, got, addrs)
		}
		if len(m.Cc) != len(got)+2 {
			t.Errorf("Cc %q", m.Cc)
		}
	}
}

func mailAddrs(v string) ([]string, error) {
	list, err := mail.ParseAddressList(v)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, a := range list {
		out = append(out, formatAddr(a.Name, a.Address))
	}
	return out, nil
}

func TestMemorySource(t *testing.T) {
	src := &Memory{}
	src.Add(testMail(1))
	src.Add([]byte("garbage\n"))
	src.Add(testMail(3))
	ids, cur := pollAll(t, src, "")
	if !reflect.DeepEqual(ids, []string{"imap-1@demo.example", "imap-3@demo.example"}) || cur != "3" {
		t.Fatalf("got %v cursor %q", ids, cur)
	}
	src.Add(testMail(4))
	if ids, cur = pollAll(t, src, cur); !reflect.DeepEqual(ids, []string{"imap-4@demo.example"}) || cur != "4" {
		t.Fatalf("after Add: %v cursor %q", ids, cur)
	}
}
