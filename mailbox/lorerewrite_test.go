package mailbox

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/patchbot/patchbot/mailbox/loretest"
)

// The archive never hands over mail from before the source's start point,
// nor mail it handed over already, whatever happens to its history: a
// public-inbox-purge of a mail before the start (its epoch rewritten from
// there on, so that where the old and new histories part lies before the
// start), a public-inbox-edit of a mail read, an archive imported anew
// without its first mail (no commit in common), and a new epoch. Each
// step then delivers one new mail, which alone must come. It logs, for
// each, the mails delivered again and the mails from before the start
// (which a daemon would act on as new): the goal is 0 and 0.
func TestLoreGitRewrites(t *testing.T) {
	srv := loretest.Start(t, "linux-fsdevel", "linux-fsdevel@vger.kernel.org")
	now := time.Now().Truncate(time.Second)
	var all [][]byte // every mail delivered, in order, for the re-import
	deliver := func(id string, at time.Time) {
		raw := listMail(id+"@example.org", id, at)
		all = append(all, raw)
		srv.Deliver(t, raw)
	}
	// Before the start point: pre1..pre4; the source starts after them.
	for i := 1; i <= 4; i++ {
		deliver(fmt.Sprintf("pre%d", i), now.Add(-time.Duration(10-i)*time.Hour))
	}
	src, rec := gitSource(t, srv, filepath.Join(t.TempDir(), "mirror"), now.Add(-5*time.Hour).Format(time.RFC3339))
	ids, cur := pollGot(t, src, "")
	if len(ids) != 0 {
		t.Fatalf("the first read delivered %v, want nothing (all before the start)", ids)
	}
	for i := 1; i <= 3; i++ {
		deliver(fmt.Sprintf("a%d", i), now.Add(-time.Duration(4-i)*time.Hour))
	}
	ids, cur = pollGot(t, src, cur)
	if fmt.Sprint(ids) != "[a1@example.org a2@example.org a3@example.org]" {
		t.Fatalf("after the start: %v", ids)
	}
	seen := map[string]bool{}
	for _, id := range ids {
		seen[id] = true
	}
	var rows []string
	step := func(name, fresh string) {
		t.Helper()
		deliver(fresh, now)
		ids, cur = pollGot(t, src, cur)
		again, before := 0, 0
		for _, id := range ids {
			if seen[id] {
				again++
			}
			if strings.HasPrefix(id, "pre") {
				before++
			}
			seen[id] = true
		}
		rows = append(rows, fmt.Sprintf("| %s | %d | %d | %v |", name, again, before, ids))
		if again+before != 0 || fmt.Sprint(ids) != "["+fresh+"@example.org]" {
			t.Errorf("%s: delivered %v (%d again, %d from before the start), want %s alone", name, ids, again, before, fresh)
		}
	}

	// public-inbox-purge of pre2: the epoch is rewritten from pre2 on; the
	// old and new histories part at pre1, before the start point.
	srv.Purge(t, all[1])
	step("public-inbox-purge of a mail before the start point", "b1")
	// public-inbox-purge of a mail read (a2).
	srv.Purge(t, all[5])
	step("public-inbox-purge of a mail read", "b2")
	// public-inbox-edit of a mail read (a1): what changed is not new mail.
	srv.Edit(t, "a1@example.org", "s/body of/edited body of/")
	step("public-inbox-edit of a mail read", "b3")
	// Imported anew without pre1 (the spam an operator dropped): no commit
	// in common with the history read.
	var kept [][]byte
	for i, raw := range all {
		if i != 0 && i != 1 && i != 5 { // pre1 dropped; pre2 and a2 purged
			kept = append(kept, raw)
		}
	}
	srv.Reimport(t, kept)
	step("the archive imported anew, no commit in common", "b4")
	// A new epoch: read from its start.
	srv.Rollover(t)
	step("a new epoch", "b5")
	if srv.Epochs(t) != 2 {
		t.Errorf("the archive has %d epochs, want 2", srv.Epochs(t))
	}
	if n := rec.count("the archive rewrote an epoch's history and holds none of the mail read before; " +
		"going on from its tip: mail imported since the last read may be missed"); n != 0 {
		t.Errorf("%d rewrites were read on from the tip (none of the mail read found)", n)
	}
	t.Logf("mail delivered after each change of the archive's history:\n| change | delivered again | from before the start | delivered |\n|---|---|---|---|\n%s",
		strings.Join(rows, "\n"))
}
