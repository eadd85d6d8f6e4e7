package main

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/patchbot/patchbot/config"
	"github.com/patchbot/patchbot/store"
	"github.com/patchbot/patchbot/web"
)

// The dashboard's form reaches the daemon's queue through the command's
// wiring: a series is queued, and what the queue refuses is a refusal the
// dashboard answers with 422 (web.ErrRefused), its reason kept.
func TestFormQueue(t *testing.T) {
	ctx := context.Background()
	st, err := store.Open(filepath.Join(t.TempDir(), "state.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	cfg := config.Default()
	cfg.StateDir = t.TempDir()
	woken := 0
	q := formQueue{desk: cfg.Desk(), st: st, wake: func() { woken++ }}
	mbox, err := os.ReadFile("../../testdata/mbox/squashfs-thundering-herd.mbox")
	if err != nil {
		t.Fatal(err)
	}
	id, err := q.Submit(ctx, web.Submission{Mbox: mbox, Suites: []string{"cache-contention"}, Submitter: "ann"})
	if err != nil {
		t.Fatal(err)
	}
	if j, err := st.Job(ctx, id); err != nil || j.Sender != "ann" || j.Trigger != "web" || woken != 1 {
		t.Errorf("job %d = %+v, %v, the daemon woken %d times; want ann's web job, one wake", id, j, err, woken)
	}
	_, err = q.Submit(ctx, web.Submission{Mbox: mbox, Suites: []string{"nosuch"}})
	if !errors.Is(err, web.ErrRefused) || !strings.Contains(err.Error(), "nosuch") {
		t.Errorf("unknown suite: %v, want a refusal naming it", err)
	}
	if _, err := q.Submit(ctx, web.Submission{}); !errors.Is(err, web.ErrRefused) {
		t.Errorf("nothing named: %v, want a refusal", err)
	}
}
