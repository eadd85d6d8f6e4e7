package mailbox

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/patchbot/patchbot/internal/testenv"
	"github.com/patchbot/patchbot/mailbox/loretest"
)

// listMail is a plain list mail with the Date given.
func listMail(id, subject string, date time.Time) []byte {
	return []byte(fmt.Sprintf("From: Ada Dev <ada@example.org>\nTo: linux-fsdevel@vger.kernel.org\n"+
		"Subject: %s\nDate: %s\nMessage-ID: <%s>\n\nbody of %s\n", subject, date.Format(time.RFC1123Z), id, id))
}

// seriesMail is patch i of an n-patch series as git format-patch threads
// it (Message-IDs <stamp-i-ada@example.org>, each answering the cover
// letter, 0/n), with a diff that applies.
func seriesMail(stamp string, i, n int, date time.Time) []byte {
	id := fmt.Sprintf("%s-%d-ada@example.org", stamp, i)
	head := fmt.Sprintf("From: Ada Dev <ada@example.org>\nTo: linux-fsdevel@vger.kernel.org\n"+
		"Subject: [PATCH %d/%d] fs: change %d\nDate: %s\nMessage-ID: <%s>\n", i, n, i, date.Format(time.RFC1123Z), id)
	if i == 0 {
		return []byte(head + fmt.Sprintf("Subject-Note: cover\n\nA series of %d.\n\nAda Dev (%d):\n  fs: change\n\n fs/demo.c | 2 +-\n 1 file changed\n", n, n))
	}
	cover := fmt.Sprintf("%s-0-ada@example.org", stamp)
	return []byte(head + fmt.Sprintf("In-Reply-To: <%s>\nReferences: <%s>\n\nChange %d.\n\nSigned-off-by: Ada Dev <ada@example.org>\n---\n"+
		" fs/demo%d.c | 2 +-\n\ndiff --git a/fs/demo%d.c b/fs/demo%d.c\nindex 1111111..2222222 100644\n--- a/fs/demo%d.c\n+++ b/fs/demo%d.c\n"+
		"@@ -1,3 +1,3 @@\n line 1\n-line 2\n+line 2 changed\n line 3\n-- \n2.39.5\n", cover, cover, i, i, i, i, i, i))
}

// logRecorder keeps a source's log lines, to count what it did.
type logRecorder struct {
	mu    sync.Mutex
	lines []string
}

func (r *logRecorder) Enabled(context.Context, slog.Level) bool { return true }
func (r *logRecorder) Handle(_ context.Context, rec slog.Record) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.lines = append(r.lines, rec.Message)
	return nil
}
func (r *logRecorder) WithAttrs([]slog.Attr) slog.Handler { return r }
func (r *logRecorder) WithGroup(string) slog.Handler      { return r }

func (r *logRecorder) count(msg string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, l := range r.lines {
		if l == msg {
			n++
		}
	}
	return n
}

func gitSource(t *testing.T, srv *loretest.Server, mirror, since string) (*Lore, *logRecorder) {
	t.Helper()
	src, err := NewLore(srv.URL())
	if err != nil {
		t.Fatal(err)
	}
	rec := &logRecorder{}
	src.Mirror, src.Since, src.Logger = mirror, since, slog.New(rec)
	return src, rec
}

// pollGot polls once and returns the Message-IDs delivered, checking that
// every cursor handed to fn is a git cursor and the last one is what Poll
// returns.
func pollGot(t *testing.T, src Source, cur string) ([]string, string) {
	t.Helper()
	var ids []string
	last := ""
	next, err := src.Poll(t.Context(), cur, func(m *Message, c string) error {
		ids = append(ids, m.MessageID)
		last = c
		return nil
	})
	if err != nil {
		t.Fatalf("Poll(%q): %v", cur, err)
	}
	if !strings.HasPrefix(next, loreGitPrefix) {
		t.Fatalf("Poll returned cursor %q, want a git cursor", next)
	}
	if last != "" && last != next {
		t.Errorf("the last mail's cursor %q is not the one Poll returned, %q", last, next)
	}
	return ids, next
}

// TestLoreGitPublicInbox follows a real public-inbox by its git log, over
// HTTP from public-inbox-httpd: a watch started on an empty list, an idle
// poll that fetches nothing, an out-of-order import (patch 1 of 3 shown
// by the archive two polls after the rest, dated a day earlier), a mail
// dated a year ahead and the mail after it, an epoch rollover, a lost
// mirror and a git killed mid-fetch (its locks left behind).
func TestLoreGitPublicInbox(t *testing.T) {
	srv := loretest.Start(t, "linux-fsdevel", "linux-fsdevel@vger.kernel.org")
	mirror := filepath.Join(t.TempDir(), "mirror")
	src, rec := gitSource(t, srv, mirror, "now")

	// An empty list: nothing yet, and a cursor that reads all to come.
	ids, cur := pollGot(t, src, "")
	if len(ids) != 0 || cur != loreGitPrefix {
		t.Fatalf("empty list: %v, cursor %q", ids, cur)
	}
	now := time.Now()
	for i := 1; i <= 3; i++ {
		srv.Deliver(t, listMail(fmt.Sprintf("m%d@example.org", i), fmt.Sprintf("mail %d", i), now.Add(-time.Duration(4-i)*time.Hour)))
	}
	ids, cur = pollGot(t, src, cur)
	if want := []string{"m1@example.org", "m2@example.org", "m3@example.org"}; !reflect.DeepEqual(ids, want) {
		t.Fatalf("after 3 mails: %v, want %v", ids, want)
	}
	// Nothing new: the manifest's fingerprint says so, and no git fetch runs.
	fetches := rec.count("git fetch")
	if ids, next := pollGot(t, src, cur); len(ids) != 0 || next != cur {
		t.Fatalf("idle poll: %v, cursor %q -> %q", ids, cur, next)
	}
	if n := rec.count("git fetch") - fetches; n != 0 {
		t.Errorf("an idle poll ran %d git fetches, want 0", n)
	}

	// Out of order: patches 2 and 3 first; patch 1, dated a day before
	// them, reaches the archive two polls later.
	const stamp = "20261201100000.4242"
	var got []string
	for _, i := range []int{0, 2, 3} {
		srv.Deliver(t, seriesMail(stamp, i, 3, now))
	}
	for range 2 {
		ids, cur = pollGot(t, src, cur)
		got = append(got, ids...)
	}
	srv.Deliver(t, seriesMail(stamp, 1, 3, now.Add(-24*time.Hour)))
	ids, cur = pollGot(t, src, cur)
	got = append(got, ids...)
	want := []string{stamp + "-0-ada@example.org", stamp + "-2-ada@example.org", stamp + "-3-ada@example.org", stamp + "-1-ada@example.org"}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("out-of-order import: %v, want %v", got, want)
	}

	// A mail dated a year ahead, then more mail dated now.
	srv.Deliver(t, listMail("future@example.org", "from the future", now.AddDate(1, 0, 0)))
	ids, cur = pollGot(t, src, cur)
	for i := 4; i <= 6; i++ {
		srv.Deliver(t, listMail(fmt.Sprintf("m%d@example.org", i), fmt.Sprintf("mail %d", i), now))
	}
	more, next := pollGot(t, src, cur)
	cur = next
	if !reflect.DeepEqual(ids, []string{"future@example.org"}) ||
		!reflect.DeepEqual(more, []string{"m4@example.org", "m5@example.org", "m6@example.org"}) {
		t.Fatalf("a mail a year ahead, then three: %v then %v", ids, more)
	}

	// A new epoch: read on from epoch 0's end into epoch 1.
	srv.Rollover(t)
	srv.Deliver(t, listMail("e1a@example.org", "epoch 1 a", now))
	srv.Deliver(t, listMail("e1b@example.org", "epoch 1 b", now))
	if srv.Epochs(t) != 2 {
		t.Fatalf("the archive has %d epochs, want 2", srv.Epochs(t))
	}
	ids, cur = pollGot(t, src, cur)
	if !reflect.DeepEqual(ids, []string{"e1a@example.org", "e1b@example.org"}) || !strings.Contains(cur, ",1=") {
		t.Fatalf("after the rollover: %v, cursor %q", ids, cur)
	}

	// The mirror is lost: it is fetched again from the cursor, and nothing
	// read before comes again.
	if err := os.RemoveAll(mirror); err != nil {
		t.Fatal(err)
	}
	srv.Deliver(t, listMail("after-loss@example.org", "after the mirror was lost", now))
	ids, cur = pollGot(t, src, cur)
	if !reflect.DeepEqual(ids, []string{"after-loss@example.org"}) {
		t.Fatalf("after the mirror was removed: %v", ids)
	}

	// A git killed mid-fetch leaves its locks: the next poll removes them.
	repo := filepath.Join(mirror, "git", "1.git")
	for _, f := range []string{"shallow.lock", "packed-refs.lock", "refs/heads/master.lock", "objects/pack/tmp_pack_XyZ"} {
		if err := os.WriteFile(filepath.Join(repo, f), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	srv.Deliver(t, listMail("after-kill@example.org", "after a killed fetch", now))
	ids, cur = pollGot(t, src, cur)
	if !reflect.DeepEqual(ids, []string{"after-kill@example.org"}) {
		t.Fatalf("after stale locks: %v", ids)
	}
	t.Logf("cursor after %d epochs: %s (%d bytes)", srv.Epochs(t), cur, len(cur))
}

// TestLoreGitStart: a source's first read starts at its since: "now", a
// time (the mirror then holds only what it needs), or a date before all
// mail; and an older patchbot's feed cursor is migrated: what it had
// delivered is not delivered again, what it had missed is.
func TestLoreGitStart(t *testing.T) {
	srv := loretest.Start(t, "linux-fsdevel", "linux-fsdevel@vger.kernel.org")
	now := time.Now().Truncate(time.Second)
	at := map[string]time.Time{}
	for _, m := range []struct {
		id  string
		ago time.Duration
	}{{"m1", 6 * time.Hour}, {"m2", 5 * time.Hour}, {"m3", 4 * time.Hour}, {"m4", 3 * time.Hour},
		{"m5", 2 * time.Hour}, {"x", 150 * time.Minute}, {"m6", time.Hour}} {
		// x reaches the archive after m5 though it is dated before it.
		id := m.id + "@example.org"
		at[id] = now.Add(-m.ago)
		srv.Deliver(t, listMail(id, m.id, at[id]))
	}
	ids := func(names ...string) []string {
		out := []string{}
		for _, n := range names {
			out = append(out, n+"@example.org")
		}
		return out
	}
	type start struct {
		name, since, cursor string
		want                []string
	}
	legacy := newSeenSet(loreCursorPrefix, time.Hour, 0)
	legacy.add(at["m4@example.org"].Unix(), "m4@example.org")
	legacy.add(at["m5@example.org"].Unix(), "m5@example.org")
	var afters []string // mail each case delivers after its start, dated now: later cases read it too
	for _, tc := range []start{
		{name: "now", since: "now", want: ids()},
		{name: "time", since: now.Add(-210 * time.Minute).Format(time.RFC3339), want: ids("m4", "m5", "x", "m6")},
		{name: "date", since: "2000-01-01", want: ids("m1", "m2", "m3", "m4", "m5", "x", "m6")},
		// The older feed cursor had delivered m4 and m5 and took everything
		// older than m4 as seen; it had missed x.
		{name: "lore1", cursor: legacy.String(), want: ids("x", "m6")},
		{name: "rfc3339", cursor: at["m5@example.org"].UTC().Format(time.RFC3339Nano) + "|" + srv.MessageURL("m5@example.org"), want: ids("m6")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			src, _ := gitSource(t, srv, filepath.Join(t.TempDir(), "mirror"), tc.since)
			var got, cursors []string
			cur, err := src.Poll(t.Context(), tc.cursor, func(m *Message, c string) error {
				got, cursors = append(got, m.MessageID), append(cursors, c)
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			if tc.name != "now" {
				tc.want = append(tc.want, afters...)
			}
			if fmt.Sprint(got) != fmt.Sprint(tc.want) {
				t.Fatalf("first read: %v, want %v", got, tc.want)
			}
			if strings.Contains(cur, ";") {
				t.Errorf("the cursor after a whole read still carries the old one: %q", cur)
			}
			if tc.cursor != "" && len(cursors) > 0 && !strings.HasSuffix(cursors[0], ";"+tc.cursor) {
				t.Errorf("a mail's cursor mid-migration %q does not keep the old cursor", cursors[0])
			}
			if tc.name == "time" {
				// Shallow: the mirror holds the commits from m3 on, not m1 and m2.
				out, err := src.gitOut(t.Context(), src.repoDir(0), nil, "rev-list", "--count", "refs/heads/master")
				if want := fmt.Sprint(5 + len(afters)); err != nil || strings.TrimSpace(string(out)) != want {
					t.Errorf("the mirror holds %q commits (%v), want the %s from m3 on", out, err, want)
				}
			}
			// Then mail comes: it alone is read.
			id := "after-" + tc.name + "@example.org"
			srv.Deliver(t, listMail(id, "after", now))
			afters = append(afters, id)
			if got, _ := pollGot(t, src, cur); !reflect.DeepEqual(got, []string{id}) {
				t.Fatalf("after the start: %v, want %s", got, id)
			}
		})
	}
}

func TestRenumberID(t *testing.T) {
	for _, tc := range []struct {
		id       string
		from, to int
		want     string
	}{
		{"20261201100000.4242-2-ada@example.org", 2, 1, "20261201100000.4242-1-ada@example.org"},
		{"20240101-topic-1-v2-3-0a1b2c3d@kernel.org", 3, 1, "20240101-topic-1-v2-1-0a1b2c3d@kernel.org"},
		{"20261201100000.4242-12-ada@example.org", 12, 0, "20261201100000.4242-0-ada@example.org"},
		{"random-id@example.org", 2, 1, ""},
		{"no-at-sign-2-x", 2, 1, ""},
	} {
		got, ok := renumberID(tc.id, tc.from, tc.to)
		if got != tc.want || ok != (tc.want != "") {
			t.Errorf("renumberID(%q, %d, %d) = %q, %v; want %q", tc.id, tc.from, tc.to, got, ok, tc.want)
		}
	}
}

// archiveOrder is the subjects of an inbox's commits, epoch by epoch,
// oldest first: the archive's own order.
func archiveOrder(t *testing.T, srv *loretest.Server) []string {
	t.Helper()
	var out []string
	for n := 0; n < srv.Epochs(t); n++ {
		cmd := exec.Command("git", "--git-dir="+filepath.Join(srv.InboxDir(), "git", fmt.Sprintf("%d.git", n)),
			"log", "--reverse", "--format=%s")
		b, err := cmd.Output()
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, strings.Split(strings.TrimSpace(string(b)), "\n")...)
	}
	return out
}

// TestLoreGitBursts (full tier: 1,300 mails through public-inbox-watch):
// a watch started on an empty list gets 300 mails at once; then 1,000
// arrive while it polls every 100 ms. Every mail is read once, in the
// archive's order.
func TestLoreGitBursts(t *testing.T) {
	testenv.Long(t)
	srv := loretest.Start(t, "linux-fsdevel", "linux-fsdevel@vger.kernel.org")
	src, _ := gitSource(t, srv, filepath.Join(t.TempDir(), "mirror"), "now")
	_, cur := pollGot(t, src, "")
	burst := func(from, n int) [][]byte {
		var raws [][]byte
		for i := from; i < from+n; i++ {
			raws = append(raws, listMail(fmt.Sprintf("burst-%d@example.org", i), fmt.Sprintf("burst %d", i), time.Now()))
		}
		return raws
	}
	var got []string // subjects, in the order read
	count := map[string]int{}
	read := func(m *Message, c string) error {
		got = append(got, m.Subject)
		count[m.MessageID]++
		cur = c
		return nil
	}
	srv.DeliverMany(t, burst(0, 300))
	if _, err := src.Poll(t.Context(), cur, read); err != nil {
		t.Fatal(err)
	}
	if len(got) != 300 {
		t.Fatalf("after 300 mails at once on a watched empty list: %d read", len(got))
	}

	// 1,000 while polling.
	ctx, cancel := context.WithCancel(t.Context())
	var mu sync.Mutex
	polls := 0
	done := make(chan error, 1)
	go func() {
		for ctx.Err() == nil {
			mu.Lock()
			next, err := src.Poll(ctx, cur, read)
			cur = next
			polls++
			mu.Unlock()
			if err != nil && ctx.Err() == nil {
				done <- err
				return
			}
			time.Sleep(100 * time.Millisecond)
		}
		done <- nil
	}()
	srv.DeliverMany(t, burst(300, 1000))
	deadline := time.Now().Add(2 * time.Minute)
	for {
		mu.Lock()
		n := len(count)
		mu.Unlock()
		if n >= 1300 || time.Now().After(deadline) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	lost, dups := 0, 0
	for i := 0; i < 1300; i++ {
		switch c := count[fmt.Sprintf("burst-%d@example.org", i)]; {
		case c == 0:
			lost++
		case c > 1:
			dups += c - 1
		}
	}
	t.Logf("1,300 mails (300 at once on an empty list, then 1,000 over %d polls): %d lost, %d duplicated", polls, lost, dups)
	if lost != 0 || dups != 0 {
		t.Fatalf("%d lost, %d duplicated", lost, dups)
	}
	if want := archiveOrder(t, srv); !reflect.DeepEqual(got, want) {
		t.Errorf("read in another order than the archive's")
	}
}

// countingTransport counts the bytes of HTTP responses.
type countingTransport struct {
	mu sync.Mutex
	n  int64
}

func (c *countingTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := http.DefaultTransport.RoundTrip(req)
	if err == nil {
		resp.Body = &countingBody{ReadCloser: resp.Body, c: c}
	}
	return resp, err
}

type countingBody struct {
	io.ReadCloser
	c *countingTransport
}

func (b *countingBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	b.c.mu.Lock()
	b.c.n += int64(n)
	b.c.mu.Unlock()
	return n, err
}

// dirSize is the bytes of the files under dir.
func dirSize(dir string) int64 {
	var n int64
	filepath.WalkDir(dir, func(_ string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			if fi, err := d.Info(); err == nil {
				n += fi.Size()
			}
		}
		return nil
	})
	return n
}

// BenchmarkLoreRead1000 is the cost of reading 1,000 new mails from a
// real public-inbox over HTTP: by git, with a mirror that was current
// before they came (fetch, log, cat-file, parse), and from nothing
// (a first read from a date: the whole epoch); by the Atom feed (the
// feed, search pages back, one /raw per mail); and a poll with nothing
// new (the manifest alone). Run it with -benchtime 3x.
func BenchmarkLoreRead1000(b *testing.B) {
	testenv.Tools(b, "git")
	srv := loretest.Start(b, "linux-fsdevel", "linux-fsdevel@vger.kernel.org")
	srv.Deliver(b, listMail("first@example.org", "first", time.Now()))
	base := b.TempDir()
	tmpl := filepath.Join(base, "template")
	src, err := NewLore(srv.URL())
	if err != nil {
		b.Fatal(err)
	}
	src.Mirror, src.Since = tmpl, "now"
	c0, err := src.Poll(context.Background(), "", func(*Message, string) error { return nil })
	if err != nil {
		b.Fatal(err)
	}
	feed, _ := NewLore(srv.URL())
	f0, err := feed.Poll(context.Background(), "", func(*Message, string) error { return nil })
	if err != nil {
		b.Fatal(err)
	}
	var raws [][]byte
	for i := range 1000 {
		raws = append(raws, listMail(fmt.Sprintf("bench-%d@example.org", i), fmt.Sprintf("[PATCH] bench %d", i), time.Now()))
	}
	srv.DeliverMany(b, raws)
	read := func(b *testing.B, s *Lore, cur string) string {
		n := 0
		next, err := s.Poll(context.Background(), cur, func(*Message, string) error { n++; return nil })
		if err != nil || n != 1000 {
			b.Fatalf("read %d mails: %v", n, err)
		}
		return next
	}
	var last string
	b.Run("git-mirror-current", func(b *testing.B) {
		var pack int64
		for i := 0; i < b.N; i++ {
			b.StopTimer()
			dir := filepath.Join(base, fmt.Sprintf("m%d", i))
			if out, err := exec.Command("cp", "-a", tmpl, dir).CombinedOutput(); err != nil {
				b.Fatalf("%v: %s", err, out)
			}
			s, _ := NewLore(srv.URL())
			s.Mirror = dir
			before := dirSize(dir)
			b.StartTimer()
			last = read(b, s, c0)
			b.StopTimer()
			pack = dirSize(dir) - before
			os.RemoveAll(dir)
			b.StartTimer()
		}
		b.ReportMetric(float64(pack)/1024, "KB-fetched/op")
	})
	b.Run("git-first-read", func(b *testing.B) {
		var size int64
		for i := 0; i < b.N; i++ {
			dir := filepath.Join(base, fmt.Sprintf("f%d", i))
			s, _ := NewLore(srv.URL())
			s.Mirror, s.Since, s.Logger = dir, "2000-01-01", slog.New(slog.DiscardHandler)
			n := 0
			if _, err := s.Poll(context.Background(), "", func(*Message, string) error { n++; return nil }); err != nil || n != 1001 {
				b.Fatalf("read %d mails: %v", n, err)
			}
			b.StopTimer()
			size = dirSize(dir)
			os.RemoveAll(dir)
			b.StartTimer()
		}
		b.ReportMetric(float64(size)/1024, "KB-mirror/op")
	})
	b.Run("feed", func(b *testing.B) {
		ct := &countingTransport{}
		for i := 0; i < b.N; i++ {
			s, _ := NewLore(srv.URL())
			s.Client, s.Logger = &http.Client{Transport: ct}, slog.New(slog.DiscardHandler)
			read(b, s, f0)
		}
		b.ReportMetric(float64(ct.n)/1024/float64(b.N), "KB-fetched/op")
	})
	b.Run("git-idle-poll", func(b *testing.B) {
		s, _ := NewLore(srv.URL())
		s.Mirror = filepath.Join(base, "idle")
		exec.Command("cp", "-a", tmpl, s.Mirror).Run()
		cur := read(b, s, c0)
		if cur != last {
			b.Fatalf("two mirrors read to %q and %q", cur, last)
		}
		ct := &countingTransport{}
		s.Client = &http.Client{Transport: ct}
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			if _, err := s.Poll(context.Background(), cur, func(*Message, string) error {
				b.Fatal("a mail on an idle poll")
				return nil
			}); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(ct.n)/float64(b.N), "B-fetched/op")
	})
}
