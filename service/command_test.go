package service

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/patchbot/patchbot/intake"
	"github.com/patchbot/patchbot/store"
)

// "#patchbot test base=... patches=..." reaches the job; a range the
// series does not have is answered, not queued.
func TestDaemonTestCommandBaseAndPatches(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	d := newTestDaemon(t, dir)
	d.ingestFile(t, "list", "../testdata/trees/squashfs-3.mbox")
	cmd := func(id, line string) string {
		path := filepath.Join(dir, id+".mbox")
		os.WriteFile(path, []byte(fmt.Sprintf(`From x Mon Nov 30 12:00:00 2026
From: Maintainer <maintainer@example.org>
To: linux-fsdevel@vger.kernel.org
Subject: Re: [PATCH 0/3] squashfs: fewer cache wake-ups, and what the docs say of them
Date: Mon, 30 Nov 2026 12:00:00 +0000
Message-ID: <%s@example.org>
In-Reply-To: <20261130100000.3-0-author@example.org>
References: <20261130100000.3-0-author@example.org>

%s

`, id, line)), 0o644) // the blank line closes the mbox entry
		return path
	}
	// The maintainer is allow-listed; a trusted server vouches for the mail.
	d.ingestAs(t, "c1", cmd("c1", "#patchbot test base=next patches=2-3"), listID+dkimPass("example.org"))
	d.ingestAs(t, "c2", cmd("c2", "#patchbot test patches=2-5"), listID+dkimPass("example.org"))
	all, _ := d.Store.Jobs(ctx)
	var jobs []*store.Job
	for _, j := range all {
		if j.Trigger != "incomplete" { // the first mails' wait for the rest
			jobs = append(jobs, j)
		}
	}
	if len(jobs) != 2 {
		t.Fatalf("jobs = %d, want the list's and c1's", len(jobs))
	}
	var req intake.Request
	if err := json.Unmarshal(jobs[1].Request, &req); err != nil {
		t.Fatal(err)
	}
	if req.BaseOverride != "next" || req.First != 2 || req.Last != 3 || len(req.Series.Patches) != 3 {
		t.Errorf("request base %q patches %d-%d, subjects %d", req.BaseOverride, req.First, req.Last, len(req.Series.Patches))
	}
	var list intake.Request
	json.Unmarshal(jobs[0].Request, &list)
	if list.Series.SeriesKey != (intake.SeriesKey{Author: "author@example.org", Title: "squashfs: fewer cache wake-ups, and what the docs say of them", Version: 1,
		Identity: "author@example.org/unverified"}) {
		t.Errorf("series key %+v", list.Series)
	}
	var answer string
	for _, m := range d.outbox(t) {
		if strings.Contains(string(m.Raw), "In-Reply-To: <c2@example.org>") {
			answer = string(m.Raw)
		}
	}
	if !says(answer, "patches=2-5: the series has 3 patch(es)") {
		t.Errorf("c2 not answered with the reason:\n%s", answer)
	}
}
