package service

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/patchbot/patchbot/intake"
	"github.com/patchbot/patchbot/mailbox"
	"github.com/patchbot/patchbot/store"
)

// A command whose References list its parent first (a patch, not the
// thread's root) is still in the thread: the daemon follows In-Reply-To
// to the kept parent, as b4 does, and finds the series.
func TestDaemonFollowsInReplyToIntoTheThread(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	d := newTestDaemon(t, dir)
	data, err := os.ReadFile("../testdata/b4/irt-before-refs.mbox")
	if err != nil {
		t.Fatal(err)
	}
	// The cover letter and both patches; the command answers patch 2.
	parts := strings.SplitAfter(string(data), "\nFrom mboxrd@z")
	series := strings.Join(parts[:3], "")
	series = strings.TrimSuffix(series, "From mboxrd@z")
	path := filepath.Join(dir, "series.mbox")
	os.WriteFile(path, []byte(series), 0o644)
	d.ingestFile(t, "list", path)
	d.ingestRaw(t, "list", listID+dkimPass("example.org")+`From: Maintainer <maintainer@example.org>
To: linux-demo@example.org
Subject: Re: [PATCH 2/2] demo: two
Date: Tue, 3 Nov 2026 12:00:00 +0000
Message-ID: <cmd-parent-first@example.org>
In-Reply-To: <i-2@demo.example>
References: <i-2@demo.example> <i-0@demo.example>

#patchbot test locks
`)
	jobs, _ := d.Store.Jobs(ctx)
	var cmd *store.Job
	for _, j := range jobs {
		if j.Trigger == "command" {
			cmd = j
		}
	}
	if cmd == nil {
		t.Fatalf("the command found no series: jobs %+v, outbox %d", jobs, len(d.outbox(t)))
	}
	var req intake.Request
	json.Unmarshal(cmd.Request, &req)
	if len(req.Series.Patches) != 2 {
		t.Errorf("the command's job tests %d patches, want the series' 2", len(req.Series.Patches))
	}
}

// A mail the daemon died on twice is set aside: it is not acted on again,
// its source's cursor moves past it, and the operator can list it.
func TestDaemonSetsAsideMailItDiedOnTwice(t *testing.T) {
	ctx := context.Background()
	d := newTestDaemon(t, t.TempDir())
	const id = "20260724190556.1950693-1-usama.arif@linux.dev"
	for i := 0; i < 2; i++ { // two deaths while acting on the seed patch
		if _, err := d.Store.BeginIngest(ctx, id); err != nil {
			t.Fatal(err)
		}
	}
	d.ingestFile(t, "list", "../testdata/mbox/squashfs-thundering-herd.mbox")
	jobs, _ := d.Store.Jobs(ctx)
	if len(jobs) != 0 {
		t.Errorf("%d jobs from a mail set aside, want none", len(jobs))
	}
	aside, err := d.Store.SetAsideMail(ctx)
	if err != nil || len(aside) != 1 || aside[0].MessageID != id || !strings.Contains(aside[0].Reason, "died 2 times") {
		t.Fatalf("SetAsideMail = %+v, %v", aside, err)
	}
	if cur, _ := d.Store.Cursor(ctx, "list"); cur == "" {
		t.Error("the cursor did not move past the mail set aside")
	}
	// A mail that went through is forgotten: its count does not grow.
	d2 := newTestDaemon(t, t.TempDir())
	d2.ingestFile(t, "list", "../testdata/mbox/squashfs-thundering-herd.mbox")
	if n, _ := d2.Store.BeginIngest(ctx, id); n.Attempts != 1 {
		t.Errorf("after a clean ingest the count is %d, want it forgotten (1 for this new attempt)", n.Attempts)
	}
}

// A patch without a Message-ID is kept, and tested, like any other.
func TestDaemonTestsAPatchWithoutMessageID(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	d := newTestDaemon(t, dir)
	data, _ := os.ReadFile("../testdata/mbox/squashfs-thundering-herd.mbox")
	first := strings.SplitN(string(data), "\nFrom ", 2)[0] + "\n"
	first = strings.Replace(first, "Message-ID: <20260724190556.1950693-1-usama.arif@linux.dev>\n", "", 1)
	first = strings.Replace(first, "Message-Id: <20260724190556.1950693-1-usama.arif@linux.dev>\n", "", 1)
	if strings.Contains(strings.ToLower(first), "message-id:") {
		t.Fatal("the fixture's Message-ID was not removed")
	}
	path := filepath.Join(dir, "no-id.mbox")
	os.WriteFile(path, []byte(first), 0o644)
	d.ingestFile(t, "list", path)
	if jobs, _ := d.Store.Jobs(ctx); len(jobs) != 1 {
		t.Errorf("%d jobs for a patch without a Message-ID, want 1", len(jobs))
	}
}

// A mail whose ingest fails every time (here a trigger of the database
// refuses to keep it) fails a few reads, then is set aside with the error,
// and its source's cursor moves past it: one mail cannot stop a source.
func TestDaemonSetsAsideMailThatKeepsFailing(t *testing.T) {
	ctx := context.Background()
	d := newTestDaemon(t, t.TempDir())
	if _, err := d.Store.DB().Exec(`CREATE TRIGGER refuse BEFORE INSERT ON messages WHEN NEW.message_id = 'doomed@example.org'
		BEGIN SELECT RAISE(ABORT, 'refused by the test'); END`); err != nil {
		t.Fatal(err)
	}
	m, err := mailbox.ParseBytes([]byte(reply{id: "doomed@example.org", from: "maintainer@example.org", body: "#patchbot help\n"}.raw()))
	if err != nil {
		t.Fatal(err)
	}
	for i := 1; i <= maxIngestFailures; i++ {
		if err := d.Ingest(ctx, "list", m, "after-doomed"); err == nil || !strings.Contains(err.Error(), "refused by the test") {
			t.Fatalf("read %d: Ingest = %v, want the database's refusal", i, err)
		}
		if cur, _ := d.Store.Cursor(ctx, "list"); cur != "" {
			t.Fatalf("read %d: the cursor moved to %q past a mail that was not kept", i, cur)
		}
	}
	if err := d.Ingest(ctx, "list", m, "after-doomed"); err != nil {
		t.Fatalf("the read after %d failures: %v, want the mail set aside", maxIngestFailures, err)
	}
	if cur, _ := d.Store.Cursor(ctx, "list"); cur != "after-doomed" {
		t.Errorf("cursor %q, want it past the mail set aside", cur)
	}
	aside, err := d.Store.SetAsideMail(ctx)
	if err != nil || len(aside) != 1 || !strings.Contains(aside[0].Reason, "failed 3 times") ||
		!strings.Contains(aside[0].Reason, "refused by the test") {
		t.Errorf("SetAsideMail = %+v, %v; want the mail with its error", aside, err)
	}
}
