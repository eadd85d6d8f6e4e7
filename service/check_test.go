package service

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/patchbot/patchbot/mailbox"
	"github.com/patchbot/patchbot/mailbox/loretest"
	"github.com/patchbot/patchbot/store"
)

// squashfsPatch is patch i of n (0: the cover letter) of a series on a
// watched path, with the Message-ID id, answering the cover letter.
func squashfsPatch(id, cover string, i, n int) []byte {
	head := fmt.Sprintf("From: Ada Dev <ada@example.org>\nTo: linux-fsdevel@vger.kernel.org\n"+
		"Subject: [PATCH %d/%d] squashfs: step %d\nDate: %s\nMessage-ID: <%s>\n",
		i, n, i, time.Now().Format(time.RFC1123Z), id)
	if i == 0 {
		return []byte(head + "\nThree steps.\n\n fs/squashfs/cache.c | 6 +++---\n 1 file changed\n")
	}
	return []byte(head + fmt.Sprintf("In-Reply-To: <%s>\nReferences: <%s>\n\nStep %d.\n\n"+
		"Signed-off-by: Ada Dev <ada@example.org>\n---\n fs/squashfs/cache.c | 2 +-\n\n"+
		"diff --git a/fs/squashfs/cache.c b/fs/squashfs/cache.c\nindex 1111111..2222222 100644\n"+
		"--- a/fs/squashfs/cache.c\n+++ b/fs/squashfs/cache.c\n@@ -%d,3 +%d,3 @@\n line\n-old %d\n+new %d\n line\n-- \n2.39.5\n",
		cover, cover, i, i*10, i*10, i, i))
}

// TestIncompleteSeriesFetchedFromTheArchive: a series waits for patch 1
// of 3, which the archive has but the source has not read yet (the
// daemon was down longer than incomplete_after, say). When the wait is
// over, patch 1 is fetched by its Message-ID (or, when that cannot be
// guessed, with the thread), the series is queued, and nobody is told it
// never came. The source reads the mail later; it is known, and queues
// nothing twice.
func TestIncompleteSeriesFetchedFromTheArchive(t *testing.T) {
	ctx := context.Background()
	srv := loretest.Start(t, "linux-fsdevel", "linux-fsdevel@vger.kernel.org")
	d := newTestDaemon(t, t.TempDir())
	d.Config.IncompleteAfter = time.Hour
	sc := mailbox.SourceConfig{Name: "lore", Lore: srv.URL()}
	d.Config.Sources = []mailbox.SourceConfig{sc}
	srcs, err := d.Config.OpenSources(nil)
	if err != nil {
		t.Fatal(err)
	}
	d.Sources = srcs
	poll := func() {
		t.Helper()
		cur, _ := d.Store.Cursor(ctx, sc.Name)
		next, err := srcs[sc.Name].Poll(ctx, cur, func(m *mailbox.Message, c string) error { return d.Ingest(ctx, sc.Name, m, c) })
		if err != nil {
			t.Fatal(err)
		}
		if err := d.Store.Update(ctx, func(tx *store.Tx) error { return tx.SetCursor(ctx, sc.Name, next) }); err != nil {
			t.Fatal(err)
		}
	}
	poll() // the start point, on the empty list

	// Series A is numbered as git format-patch numbers it; series B's
	// patch 1 has a Message-ID nobody could guess.
	a := func(i int) string { return fmt.Sprintf("20261201100000.4242-%d-ada@example.org", i) }
	b := func(i int) string { return fmt.Sprintf("b-series-%d@example.org", i) }
	for _, i := range []int{0, 2, 3} {
		srv.Deliver(t, squashfsPatch(a(i), a(0), i, 3))
	}
	for _, i := range []int{0, 2, 3} {
		srv.Deliver(t, []byte(strings.Replace(string(squashfsPatch(b(i), b(0), i, 3)), "squashfs: step", "squashfs: stage", 1)))
	}
	poll()
	jobs, _ := d.Store.Jobs(ctx)
	if len(jobs) != 2 || jobs[0].Trigger != "incomplete" || jobs[1].Trigger != "incomplete" {
		t.Fatalf("jobs = %+v, want the two series' waits", jobs)
	}
	// Patch 1 of each reaches the archive; the source does not read it yet.
	srv.Deliver(t, squashfsPatch(a(1), a(0), 1, 3))
	srv.Deliver(t, []byte(strings.Replace(string(squashfsPatch("unguessable-7f3a@example.org", b(0), 1, 3)), "squashfs: step", "squashfs: stage", 1)))
	for _, j := range jobs {
		j.NotBefore = time.Now().Add(-time.Minute)
		d.Store.UpdateJob(ctx, j)
	}
	for range 2 {
		if ran, err := d.RunOnce(ctx); !ran || err != nil {
			t.Fatalf("the wait's check did not run: %v", err)
		}
	}
	if out := d.outbox(t); len(out) != 0 {
		t.Fatalf("the author was told the series is incomplete:\n%s", out[0].Raw)
	}
	jobs, _ = d.Store.Jobs(ctx)
	tests := map[string]bool{}
	for _, j := range jobs {
		if j.Trigger == "list" {
			tests[j.Title] = true
		}
	}
	if len(tests) != 2 {
		t.Fatalf("jobs = %+v, want both series queued once whole", jobs)
	}
	for _, id := range []string{a(1), "unguessable-7f3a@example.org"} {
		if ok, _ := d.Store.HasMessage(ctx, id); !ok {
			t.Errorf("%s was not kept", id)
		}
	}
	// The source reads on: the fetched mails come in the archive's order,
	// are known, and queue nothing more.
	before := len(jobs)
	poll()
	if jobs, _ = d.Store.Jobs(ctx); len(jobs) != before {
		t.Errorf("reading the fetched mail again made %d jobs more", len(jobs)-before)
	}
	if cur, _ := d.Store.Cursor(ctx, sc.Name); !strings.HasPrefix(cur, "lore2:0=") {
		t.Errorf("cursor %q", cur)
	}
}
