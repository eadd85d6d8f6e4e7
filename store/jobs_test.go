package store

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"testing"
	"time"
)

func TestJobsLifecycle(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "state.db")
	s, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	id, added, err := s.AddJob(ctx, Job{Dedupe: "series:abc:v1", Trigger: "list", Title: "t", Request: []byte("{}")})
	if err != nil || !added {
		t.Fatalf("AddJob = %d, %v, %v", id, added, err)
	}
	// The same series version is not queued twice; a reroll is a new job.
	if id2, added, _ := s.AddJob(ctx, Job{Dedupe: "series:abc:v1", Request: []byte("{}")}); added || id2 != id {
		t.Errorf("duplicate AddJob = %d, %v; want %d, false", id2, added, id)
	}
	if _, added, _ := s.AddJob(ctx, Job{Dedupe: "series:abc:v2", Request: []byte("{}")}); !added {
		t.Error("reroll not added")
	}
	j, err := s.ClaimJob(ctx, time.Now())
	if err != nil || j.ID != id || j.State != JobRunning || j.Attempts != 1 {
		t.Fatalf("ClaimJob = %+v, %v", j, err)
	}
	// A crash while running: reopen, requeue, claim again.
	s.Close()
	s, err = Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if n, err := s.RequeueInterrupted(ctx); n != 1 || err != nil {
		t.Fatalf("RequeueInterrupted = %d, %v", n, err)
	}
	j, err = s.ClaimJob(ctx, time.Now())
	if err != nil || j.ID != id || j.Attempts != 2 {
		t.Fatalf("ClaimJob after restart = %+v, %v", j, err)
	}
	// A retry waits for its time.
	j.State, j.NotBefore, j.Blame = JobQueued, time.Now().Add(time.Hour), "infra"
	if err := s.UpdateJob(ctx, j); err != nil {
		t.Fatal(err)
	}
	j2, err := s.ClaimJob(ctx, time.Now())
	if err != nil || j2.Dedupe != "series:abc:v2" {
		t.Fatalf("ClaimJob = %+v, %v; want the v2 job", j2, err)
	}
	if _, err := s.ClaimJob(ctx, time.Now()); !errors.Is(err, ErrNoJob) {
		t.Errorf("ClaimJob with nothing ready: %v, want ErrNoJob", err)
	}
	if j, err := s.ClaimJob(ctx, time.Now().Add(2*time.Hour)); err != nil || j.ID != id {
		t.Errorf("ClaimJob after the backoff = %+v, %v", j, err)
	}
	counts, _ := s.JobCounts(ctx)
	if counts[JobRunning] != 2 {
		t.Errorf("JobCounts = %v", counts)
	}
}

func TestMessagesAndCommands(t *testing.T) {
	ctx := context.Background()
	s, err := Open(filepath.Join(t.TempDir(), "state.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.SaveMessage(ctx, "imap:INBOX", "7:1", "a@x", "a@x", []byte("mail a")); err != nil {
		t.Fatal(err)
	}
	if err := s.SaveMessage(ctx, "imap:INBOX", "7:2", "b@x", "a@x", []byte("mail b")); err != nil {
		t.Fatal(err)
	}
	if c, _ := s.Cursor(ctx, "imap:INBOX"); c != "7:2" {
		t.Errorf("cursor = %q, want 7:2", c)
	}
	raws, _ := s.ThreadMessages(ctx, "a@x")
	if len(raws) != 2 || string(raws[1]) != "mail b" {
		t.Errorf("thread = %q", raws)
	}
	now := time.Now()
	for i, id := range []string{"c1", "c2", "c1"} {
		added, err := s.LogCommand(ctx, id, "dev@x", now, true)
		if err != nil || added != (i < 2) {
			t.Errorf("LogCommand(%s) = %v, %v", id, added, err)
		}
	}
	s.LogCommand(ctx, "c3", "dev@x", now, false) // refused: does not count
	if n, _ := s.CommandsSince("dev@x", now.Add(-time.Minute)); n != 2 {
		t.Errorf("CommandsSince = %d, want 2", n)
	}
	if n, _ := s.CommandsSince("dev@x", now.Add(time.Minute)); n != 0 {
		t.Errorf("CommandsSince(future) = %d, want 0", n)
	}
}

// A source writing mail while the worker claims jobs must not make the
// claim fail with SQLITE_BUSY (seen with a read-then-write transaction).
func TestClaimJobWhileSourcesWrite(t *testing.T) {
	ctx := context.Background()
	s, err := Open(filepath.Join(t.TempDir(), "state.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	const jobs = 50
	for i := 0; i < jobs; i++ {
		if _, _, err := s.AddJob(ctx, Job{Dedupe: fmt.Sprintf("series:x:v%d", i), Request: []byte("{}")}); err != nil {
			t.Fatal(err)
		}
	}
	done := make(chan error, 1)
	go func() {
		for i := 0; i < 300; i++ {
			id := fmt.Sprintf("m%d@x", i)
			if err := s.SaveMessage(ctx, "imap", fmt.Sprint(i), id, id, []byte("mail")); err != nil {
				done <- err
				return
			}
		}
		done <- nil
	}()
	claimed := 0
	for claimed < jobs {
		if _, err := s.ClaimJob(ctx, time.Now()); err != nil {
			t.Fatalf("ClaimJob after %d claims: %v", claimed, err)
		}
		claimed++
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}
