package service

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"testing"

	"github.com/patchbot/patchbot/intake"
	"github.com/patchbot/patchbot/store"
)

// A run asked for on the dashboard enters the daemon's queue, is tested,
// and its reply is kept with the run, mailed to nobody.
func TestDashboardSubmissionIsQueuedAndNotMailed(t *testing.T) {
	ctx := context.Background()
	d := newTestDaemon(t, t.TempDir())
	desk := d.Config.Desk()
	mbox, err := os.ReadFile("../testdata/mbox/squashfs-thundering-herd.mbox")
	if err != nil {
		t.Fatal(err)
	}
	id, err := desk.Submit(ctx, d.Store, nil, intake.Submission{Mbox: mbox, Suites: []string{"cache-contention"}, Who: "dashboard"})
	if err != nil {
		t.Fatal(err)
	}
	j, err := d.Store.Job(ctx, id)
	if err != nil || j.Trigger != "web" {
		t.Fatalf("job %d = %+v, %v; want a web job", id, j, err)
	}
	var req intake.Request
	json.Unmarshal(j.Request, &req)
	if !req.NoMail || len(req.Series.Patches) != 1 || req.Suites[0] != "cache-contention" {
		t.Errorf("request = no_mail %v, %d patches, suites %v", req.NoMail, len(req.Series.Patches), req.Suites)
	}
	if ran, err := d.RunOnce(ctx); !ran || err != nil {
		t.Fatalf("RunOnce = %v, %v", ran, err)
	}
	j, _ = d.Store.Job(ctx, id)
	if j.State != store.JobDone {
		t.Errorf("job state %s, want done", j.State)
	}
	if out := d.outbox(t); len(out) != 0 {
		t.Errorf("a dashboard run mailed %d replies, want none", len(out))
	}
	if _, err := os.Stat(j.RunDir + "/reply.eml"); err != nil {
		t.Errorf("the reply is not kept with the run: %v", err)
	}

	for name, sub := range map[string]intake.Submission{
		"no series in the mail": {Mbox: []byte("From x\nSubject: hello\n\nnothing here\n")},
		"unknown suite":         {Mbox: mbox, Suites: []string{"nosuch"}},
		"unknown profile":       {Mbox: mbox, Profile: "nope"},
		"nothing named":         {},
	} {
		if _, err := desk.Submit(ctx, d.Store, nil, sub); !errors.Is(err, intake.ErrRefused) {
			t.Errorf("%s: %v, want a refusal", name, err)
		}
	}
}
