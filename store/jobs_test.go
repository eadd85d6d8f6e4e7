package store

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
)

func TestJobsLifecycle(t *testing.T) {
	eachEngine(t, func(t *testing.T, e engine) {
		ctx := context.Background()
		s, path := e.open(t)
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
		j, err := s.ClaimJob(ctx, claim(time.Now(), 0))
		if err != nil || j.ID != id || j.State != JobRunning || j.Attempts != 1 {
			t.Fatalf("ClaimJob = %+v, %v", j, err)
		}
		// A crash while running: reopen, requeue, claim again.
		s.Close()
		s = reopen(t, path)
		if re, parked, err := s.RecoverJobs(ctx, "w", 2); len(re) != 1 || len(parked) != 0 || err != nil {
			t.Fatalf("RecoverJobs = %d, %d, %v", len(re), len(parked), err)
		}
		j, err = s.ClaimJob(ctx, claim(time.Now(), 0))
		if err != nil || j.ID != id || j.Attempts != 2 {
			t.Fatalf("ClaimJob after restart = %+v, %v", j, err)
		}
		// A retry waits for its time.
		j.State, j.NotBefore, j.Blame = JobQueued, time.Now().Add(time.Hour), "infra"
		if err := s.UpdateJob(ctx, j); err != nil {
			t.Fatal(err)
		}
		j2, err := s.ClaimJob(ctx, claim(time.Now(), 0))
		if err != nil || j2.Dedupe != "series:abc:v2" {
			t.Fatalf("ClaimJob = %+v, %v; want the v2 job", j2, err)
		}
		if _, err := s.ClaimJob(ctx, claim(time.Now(), 0)); !errors.Is(err, ErrNoJob) {
			t.Errorf("ClaimJob with nothing ready: %v, want ErrNoJob", err)
		}
		if j, err := s.ClaimJob(ctx, claim(time.Now().Add(2*time.Hour), 0)); err != nil || j.ID != id {
			t.Errorf("ClaimJob after the backoff = %+v, %v", j, err)
		}
		counts, _ := s.JobCounts(ctx)
		if counts[JobRunning] != 2 {
			t.Errorf("JobCounts = %v", counts)
		}
	})
}

func TestMessagesAndCommands(t *testing.T) {
	eachEngine(t, func(t *testing.T, e engine) {
		ctx := context.Background()
		s, _ := e.open(t)
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
		err := s.Update(ctx, func(tx *Tx) error {
			for i, id := range []string{"c1", "c2", "c1"} {
				added, err := tx.LogCommand(ctx, Command{Key: id, Sender: "dev@x", At: now, Outcome: CommandAccepted})
				if err != nil || added != (i < 2) {
					t.Errorf("LogCommand(%s) = %v, %v", id, added, err)
				}
			}
			tx.LogCommand(ctx, Command{Key: "c3", Sender: "dev@x", At: now, Outcome: CommandRefused})
			tx.LogCommand(ctx, Command{Key: "c4", Sender: "dev@x", At: now, Outcome: CommandAnswered})
			tx.LogCommand(ctx, Command{Key: "c5", Sender: "dev@x", At: now, Outcome: CommandDropped}) // sent nothing: not counted
			tx.LogCommand(ctx, Command{Key: "c6", Sender: "other@x", At: now, Outcome: CommandAccepted})
			// In dev@x's name but not proven: counted apart.
			tx.LogCommand(ctx, Command{Key: "c7", Sender: "dev@x", At: now, Outcome: CommandAnswered, Unverified: true})
			tx.LogCommand(ctx, Command{Key: "c8", Sender: "dev@x", At: now, Outcome: CommandRefused, Unverified: true})
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		if c, _ := s.CommandCounts(ctx, "dev@x", true, now.Add(-time.Minute)); c != (CommandCounts{Counted: 4, Refusals: 1}) {
			t.Errorf("CommandCounts = %+v, want 4 counted, 1 refusal", c)
		}
		if c, _ := s.CommandCounts(ctx, "dev@x", false, now.Add(-time.Minute)); c != (CommandCounts{Counted: 2, Refusals: 1}) {
			t.Errorf("CommandCounts(unverified) = %+v, want 2 counted, 1 refusal", c)
		}
		if c, _ := s.CommandCounts(ctx, "dev@x", true, now.Add(time.Minute)); c != (CommandCounts{}) {
			t.Errorf("CommandCounts(future) = %+v, want none", c)
		}
	})
}

// A mail read from a second source for the same list is not new: the
// caller acts on it once.
func TestSaveMessageIsNewOnce(t *testing.T) {
	eachEngine(t, func(t *testing.T, e engine) {
		ctx := context.Background()
		s, _ := e.open(t)
		var fresh []bool
		for _, src := range []string{"imap", "lore", "imap"} {
			err := s.Update(ctx, func(tx *Tx) error {
				f, err := tx.SaveMessage(ctx, src, "a@x", "a@x", []byte("mail"))
				fresh = append(fresh, f)
				if err != nil {
					return err
				}
				return tx.SetCursor(ctx, src, "1")
			})
			if err != nil {
				t.Fatal(err)
			}
		}
		if fmt.Sprint(fresh) != "[true false false]" {
			t.Errorf("fresh = %v, want only the first", fresh)
		}
		if c, _ := s.Cursor(ctx, "lore"); c != "1" {
			t.Errorf("the second source's cursor did not move: %q", c)
		}
	})
}

// A rolled-back transaction leaves nothing: not the mail, not the cursor,
// not the job.
func TestUpdateRollsBackEverything(t *testing.T) {
	eachEngine(t, func(t *testing.T, e engine) {
		ctx := context.Background()
		s, _ := e.open(t)
		boom := errors.New("boom")
		err := s.Update(ctx, func(tx *Tx) error {
			tx.SaveMessage(ctx, "imap", "a@x", "a@x", []byte("mail"))
			tx.SetCursor(ctx, "imap", "7:1")
			tx.AddJob(ctx, Job{Dedupe: "series:a", Request: []byte("{}")})
			tx.Enqueue(ctx, OutboxMessage{MessageID: "r@x", From: "bot@x", Recipients: []string{"a@x"}, Raw: []byte("x")})
			return boom
		})
		if !errors.Is(err, boom) {
			t.Fatalf("Update = %v, want boom", err)
		}
		if ok, _ := s.HasMessage(ctx, "a@x"); ok {
			t.Error("the mail was kept")
		}
		if c, _ := s.Cursor(ctx, "imap"); c != "" {
			t.Errorf("the cursor moved to %q", c)
		}
		if jobs, _ := s.Jobs(ctx); len(jobs) != 0 {
			t.Errorf("%d jobs kept", len(jobs))
		}
		if ms, _ := s.OutboxIn(ctx, OutboxStates...); len(ms) != 0 {
			t.Errorf("%d outbox messages kept", len(ms))
		}
	})
}

// A job the daemon died running twice is parked, not run a third time;
// a job out of attempts is failed at its next claim, however it came back
// to the queue.
func TestJobsParkedAndOutOfAttempts(t *testing.T) {
	eachEngine(t, func(t *testing.T, e engine) {
		ctx := context.Background()
		s, _ := e.open(t)
		defer s.Close()
		id, _, _ := s.AddJob(ctx, Job{Dedupe: "series:crashy", Request: []byte("{}")})
		for crash := 1; crash <= 2; crash++ {
			j, err := s.ClaimJob(ctx, claim(time.Now(), 5))
			if err != nil || j.ID != id {
				t.Fatalf("claim before crash %d = %+v, %v", crash, j, err)
			}
			re, parked, err := s.RecoverJobs(ctx, "w", 2) // the restart after the crash
			if err != nil {
				t.Fatal(err)
			}
			if crash == 1 && (len(re) != 1 || len(parked) != 0) || crash == 2 && (len(re) != 0 || len(parked) != 1) {
				t.Fatalf("after crash %d: requeued %d, parked %d", crash, len(re), len(parked))
			}
		}
		if _, err := s.ClaimJob(ctx, claim(time.Now(), 5)); !errors.Is(err, ErrNoJob) {
			t.Fatalf("a parked job was claimed: %v", err)
		}
		j, _ := s.Job(ctx, id)
		if j.State != JobParked || j.Crashes != 2 || !strings.Contains(j.Error, "died while running it 2 times") {
			t.Errorf("parked job = %+v", j)
		}
		if counts, _ := s.JobCounts(ctx); counts[JobParked] != 1 {
			t.Errorf("JobCounts = %v", counts)
		}
		if err := s.UnparkJob(ctx, id); err != nil {
			t.Fatal(err)
		}
		if j, err := s.ClaimJob(ctx, claim(time.Now(), 5)); err != nil || j.ID != id || j.Attempts != 1 {
			t.Fatalf("claim after unpark = %+v, %v", j, err)
		}

		// Out of attempts: requeued by hand (as a restart would) after its
		// last allowed attempt, it is not claimed, and the coordinator's
		// next look fails it.
		id2, _, _ := s.AddJob(ctx, Job{Dedupe: "series:flaky", Request: []byte("{}")})
		for i := 0; i < 2; i++ {
			j, err := s.ClaimJob(ctx, claim(time.Now(), 2))
			if err != nil || j.ID != id2 {
				t.Fatalf("claim %d = %+v, %v", i+1, j, err)
			}
			j.State, j.Error = JobQueued, "qemu: not found"
			s.UpdateJob(ctx, j)
		}
		if j, err := s.ClaimJob(ctx, claim(time.Now(), 2)); !errors.Is(err, ErrNoJob) {
			t.Fatalf("a job out of attempts was claimed: %+v, %v", j, err)
		}
		if j, _ := s.Job(ctx, id2); j.State != JobQueued {
			t.Fatalf("a claim changed a job out of attempts: %+v", j)
		}
		if n, err := s.FailSpentJobs(ctx, 2); n != 1 || err != nil {
			t.Fatalf("FailSpentJobs = %d, %v; want the one job", n, err)
		}
		if j, _ := s.Job(ctx, id2); j.State != JobFailed || !strings.Contains(j.Error, "gave up after 2 attempts; last error: qemu") {
			t.Errorf("job out of attempts = %+v", j)
		}
	})
}

func TestOptOuts(t *testing.T) {
	eachEngine(t, func(t *testing.T, e engine) {
		ctx := context.Background()
		s, _ := e.open(t)
		s.Update(ctx, func(tx *Tx) error {
			if added, err := tx.OptOut(ctx, "Dev@X.org", "#patchbot stop", false); !added || err != nil {
				t.Errorf("OptOut = %v, %v", added, err)
			}
			if out, verified, _ := tx.OptOutOf(ctx, "dev@x.org"); !out || verified {
				t.Errorf("an unverified stop: out %v, verified %v", out, verified)
			}
			if added, _ := tx.OptOut(ctx, "dev@x.org", "again", true); added {
				t.Error("a second opt-out was added")
			}
			if out, verified, _ := tx.OptOutOf(ctx, "dev@x.org"); !out || !verified {
				t.Errorf("then a verified one: out %v, verified %v", out, verified)
			}
			if out, _, _ := tx.OptOutOf(ctx, "other@x.org"); out {
				t.Error("an address that never opted out is out")
			}
			return nil
		})
		if ok, _ := s.OptedOut(ctx, "DEV@x.org"); !ok {
			t.Error("opt-out not found")
		}
		s.OptIn(ctx, "dev@x.org")
		if ok, _ := s.OptedOut(ctx, "dev@x.org"); ok {
			t.Error("opt-in did not remove the opt-out")
		}
	})
}

// A source writing mail while the worker claims jobs must not make the
// claim fail with SQLITE_BUSY (seen with a read-then-write transaction).
func TestClaimJobWhileSourcesWrite(t *testing.T) {
	eachEngine(t, func(t *testing.T, e engine) {
		ctx := context.Background()
		s, _ := e.open(t)
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
			if _, err := s.ClaimJob(ctx, claim(time.Now(), 0)); err != nil {
				t.Fatalf("ClaimJob after %d claims: %v", claimed, err)
			}
			claimed++
		}
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	})
}
