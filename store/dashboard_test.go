package store

import (
	"context"
	"testing"
	"time"
)

func TestDashboardQueries(t *testing.T) {
	eachEngine(t, func(t *testing.T, e engine) {
		ctx := context.Background()
		s, _ := e.open(t)
		add := func(dedupe string, notBefore time.Time) int64 {
			id, _, err := s.AddJob(ctx, Job{Dedupe: dedupe, Trigger: "list", Title: dedupe, Request: []byte(`{"patches":["big"]}`),
				NotBefore: notBefore})
			if err != nil {
				t.Fatal(err)
			}
			return id
		}
		done := add("done", time.Time{})
		failed := add("failed", time.Time{})
		running := add("running", time.Time{})
		queued := add("queued", time.Time{})
		parked := add("parked", time.Now().Add(time.Hour))
		for _, u := range []struct {
			id    int64
			state JobState
			dir   string
		}{{done, JobDone, "/state/runs/job-1"}, {failed, JobFailed, ""}, {running, JobRunning, "/state/runs/job-3"}} {
			j, err := s.Job(ctx, u.id)
			if err != nil {
				t.Fatal(err)
			}
			j.State, j.RunDir = u.state, u.dir
			if err := s.UpdateJob(ctx, j); err != nil {
				t.Fatal(err)
			}
		}

		active, err := s.ActiveJobs(ctx, 10)
		if err != nil {
			t.Fatal(err)
		}
		var ids []int64
		for _, j := range active {
			ids = append(ids, j.ID)
			if j.Request != nil {
				t.Errorf("job %d: a listing carries the request", j.ID)
			}
		}
		if want := []int64{running, queued, parked}; !equal(ids, want) {
			t.Errorf("ActiveJobs = %v, want %v (queued and running, oldest first)", ids, want)
		}
		if limited, _ := s.ActiveJobs(ctx, 1); len(limited) != 1 {
			t.Errorf("ActiveJobs(1) returned %d jobs", len(limited))
		}
		f, err := s.RecentJobs(ctx, JobFailed, 10)
		if err != nil || len(f) != 1 || f[0].ID != failed {
			t.Errorf("RecentJobs(failed) = %v, %v", f, err)
		}
		if j, err := s.JobByRunDir(ctx, "/state/runs/job-1"); err != nil || j == nil || j.ID != done {
			t.Errorf("JobByRunDir = %+v, %v; want job %d", j, err, done)
		}
		if j, err := s.JobByRunDir(ctx, "/state/runs/none"); err != nil || j != nil {
			t.Errorf("JobByRunDir of an unknown dir = %+v, %v; want nil, nil", j, err)
		}
		if j, err := s.JobView(ctx, 999); err != nil || j != nil {
			t.Errorf("JobView(999) = %+v, %v; want nil, nil", j, err)
		}
		if j, err := s.JobView(ctx, parked); err != nil || j == nil || !j.NotBefore.After(time.Now()) {
			t.Errorf("JobView(parked) = %+v, %v", j, err)
		}

		if err := s.SaveMessage(ctx, "lore-fsdevel", "c1", "m1@x", "m1@x", []byte("raw")); err != nil {
			t.Fatal(err)
		}
		acts, err := s.SourcesActivity(ctx)
		if err != nil || len(acts) != 1 || acts[0].Source != "lore-fsdevel" || acts[0].Cursor != "c1" ||
			time.Since(acts[0].Updated) > time.Minute {
			t.Errorf("SourcesActivity = %+v, %v", acts, err)
		}

		if _, _, err := s.Enqueue(ctx, OutboxMessage{MessageID: "reply-1@x", From: "a@x", Recipients: []string{"b@x"},
			Raw: []byte("mail")}); err != nil {
			t.Fatal(err)
		}
		if st, err := s.ReplyStatus(ctx, "reply-1@x"); err != nil || st == nil || st.State != Queued {
			t.Errorf("ReplyStatus = %+v, %v; want queued", st, err)
		}
		if st, err := s.ReplyStatus(ctx, "nope@x"); err != nil || st != nil {
			t.Errorf("ReplyStatus of an unknown reply = %+v, %v; want nil, nil", st, err)
		}
	})
}

func equal(a, b []int64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
