package store

import (
	"context"
	"errors"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
)

// workerStore opens the database behind a superuser's DSN as a login role
// of patchbot_worker named name, made here as an operator would.
func workerStore(t *testing.T, dsn, name string) *Store {
	t.Helper()
	admin, err := Open(dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	ctx := context.Background()
	if _, err := admin.DB().ExecContext(ctx, `DO $$ BEGIN
		IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = '`+name+`') THEN
			CREATE ROLE "`+name+`" LOGIN IN ROLE patchbot_worker;
		END IF; END $$`); err != nil {
		t.Fatal(err)
	}
	u, _ := url.Parse(dsn)
	u.User = url.User(name)
	s, err := OpenWorker(u.String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// denied says whether err is PostgreSQL refusing a privilege or a row
// (42501 insufficient_privilege, which row-level security's WITH CHECK
// also raises).
func denied(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && pe.Code == "42501"
}

// A worker's role can claim, renew, end and report the jobs it holds, and
// nothing else: not the outbox, the mail, the commands, nor another
// worker's row or job; and it cannot take a job in another's name.
func TestWorkerRoleDoesOnlyAWorkersJob(t *testing.T) {
	admin, dsn := engines[1].open(t)
	ctx := context.Background()
	w1 := workerStore(t, dsn, "w1")
	w2 := workerStore(t, dsn, "w2")
	if name, worker, err := w1.Role(ctx); err != nil || name != "w1" || !worker {
		t.Fatalf("w1's Role = %q, %v, %v", name, worker, err)
	}
	if name, worker, _ := admin.Role(ctx); worker || name == "" {
		t.Errorf("the schema owner's Role = %q, %v; want not a restricted worker", name, worker)
	}
	for i, d := range []string{"a", "b"} {
		if _, _, err := admin.AddJob(ctx, Job{Dedupe: d, Title: d, Source: "list", Sender: "dev@x", Request: []byte("{}")}); err != nil {
			t.Fatal(i, err)
		}
	}
	for _, w := range []struct {
		s    *Store
		name string
	}{{w1, "w1"}, {w2, "w2"}} {
		if err := w.s.RegisterWorker(ctx, WorkerInfo{Name: w.name, Host: "h"}); err != nil {
			t.Fatalf("%s registering: %v", w.name, err)
		}
	}
	// A claim in another's name is refused by the row policy.
	if _, err := w1.ClaimJob(ctx, Claim{Worker: "w2", Lease: time.Minute}); !denied(err) {
		t.Errorf("w1 claiming as w2: %v, want permission denied", err)
	}
	j1, err := w1.ClaimJob(ctx, Claim{Worker: "w1", Lease: time.Minute, MaxAttempts: 5})
	if err != nil {
		t.Fatalf("w1's claim: %v", err)
	}
	j2, err := w2.ClaimJob(ctx, Claim{Worker: "w2", Lease: time.Minute, MaxAttempts: 5})
	if err != nil || j2.ID == j1.ID {
		t.Fatalf("w2's claim = %+v, %v", j2, err)
	}
	if err := w1.Heartbeat(ctx, "w1", j1.ID, time.Minute, time.Time{}); err != nil {
		t.Errorf("w1 renewing its lease: %v", err)
	}
	// w2's job and row are out of w1's reach: invisible, so untouched.
	if err := w1.Heartbeat(ctx, "w1", j2.ID, time.Minute, time.Time{}); !errors.Is(err, ErrLeaseLost) {
		t.Errorf("w1 renewing w2's job: %v, want ErrLeaseLost", err)
	}
	for _, q := range []string{
		`UPDATE jobs SET state = 'done', lease_until = '' WHERE id = $1`,
		`UPDATE jobs SET request = '\x00' WHERE id = $1`,
		`UPDATE workers SET heartbeat = '' WHERE name = 'w2' AND $1 > 0`,
		`DELETE FROM jobs WHERE id = $1`,
	} {
		res, err := w1.DB().ExecContext(ctx, q, j2.ID)
		if err == nil {
			if n, _ := res.RowsAffected(); n != 0 {
				t.Errorf("%s: w1 changed %d of w2's rows", q, n)
			}
		} else if !denied(err) {
			t.Errorf("%s: %v, want permission denied or no row", q, err)
		}
	}
	if ws, _ := admin.Workers(ctx, time.Now().Add(-time.Hour)); len(ws) != 2 || ws[1].Heartbeat.IsZero() {
		t.Errorf("w2's row after w1's tries: %+v", ws)
	}
	// The outbox, the mail, the commands, opt-outs and cursors are the
	// coordinator's alone.
	for _, q := range []string{
		`INSERT INTO outbox (message_id, sender, recipients, raw, state, created, updated) VALUES ('x@y', 'bot@x', '["a@b"]', '\x00', 'queued', '', '')`,
		`SELECT count(*) FROM outbox`,
		`UPDATE outbox SET state = 'queued'`,
		`SELECT count(*) FROM messages`,
		`INSERT INTO commands (message_id, sender, at, accepted) VALUES ('c@x', 'a@b', '', 1)`,
		`INSERT INTO optouts (address, reason, at) VALUES ('a@b', '', '')`,
		`UPDATE cursors SET cursor = ''`,
		`INSERT INTO jobs (dedupe, trigger, title, request, state, not_before, created, updated) VALUES ('z', 'x', 'x', '\x00', 'queued', '', '', '')`,
		`CREATE TABLE mine (a int)`,
	} {
		if _, err := w1.DB().ExecContext(ctx, q); !denied(err) {
			t.Errorf("w1: %s: %v, want permission denied", q, err)
		}
	}
	// Its own job ends with its run and reply; another's run it may not
	// report.
	err = w1.Update(ctx, func(tx *Tx) error {
		j1.State, j1.Stage = JobDone, "done"
		if err := tx.FinishJob(ctx, j1); err != nil {
			return err
		}
		if err := tx.PutRunFiles(ctx, j1.ID, []RunFile{{"run.json", []byte("{}")}}); err != nil {
			return err
		}
		return tx.PutJobReply(ctx, JobReply{JobID: j1.ID, MessageID: "r@x", Recipients: []string{"dev@x"}, Raw: []byte("hi")})
	})
	if err != nil {
		t.Fatalf("w1 ending its job: %v", err)
	}
	err = w1.Update(ctx, func(tx *Tx) error { return tx.PutRunFiles(ctx, j2.ID, []RunFile{{"run.json", []byte("{}")}}) })
	if !denied(err) {
		t.Errorf("w1 reporting w2's run: %v, want permission denied", err)
	}
	if r, err := admin.JobReply(ctx, j1.ID); err != nil || r == nil || r.MessageID != "r@x" {
		t.Errorf("the coordinator reads w1's reply as %+v, %v", r, err)
	}
	// A worker keeps its base kernels' rounds for the next series on its
	// host, and replaces them (suites/invm's reuse).
	for _, r := range []string{`{"a":1}`, `{"a":2}`} {
		if err := w1.PutBaseRounds(ctx, "w1-host/base", []byte(r), time.Now()); err != nil {
			t.Fatalf("w1 keeping base rounds: %v", err)
		}
	}
	if got, _, ok, err := w1.BaseRounds(ctx, "w1-host/base"); err != nil || !ok || string(got) != `{"a":2}` {
		t.Errorf("w1 reads its base rounds as %q, %v, %v", got, ok, err)
	}
	// A worker never migrates: its open checks the version only.
	if _, err := w1.DB().ExecContext(ctx, `INSERT INTO schema_version (version) VALUES (99)`); !denied(err) {
		t.Errorf("w1 wrote the schema's version: %v", err)
	}
}

// A worker refuses a database whose schema is not its own: the
// coordinator migrates, and is upgraded first.
func TestOpenWorkerChecksTheSchema(t *testing.T) {
	dsn := engines[1].fresh(t)
	if _, err := OpenWorker(dsn); err == nil {
		t.Fatal("a worker opened a database no coordinator had migrated")
	}
	old, err := openSteps(dsn, migrations[:len(migrations)-1])
	if err != nil {
		t.Fatal(err)
	}
	old.Close()
	if _, err := OpenWorker(dsn); !errors.Is(err, ErrSchema) || !strings.Contains(err.Error(), "coordinator first") {
		t.Fatalf("OpenWorker on an older schema: %v", err)
	}
	s, err := Open(dsn)
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	w, err := OpenWorker(dsn)
	if err != nil {
		t.Fatal(err)
	}
	w.Close()
}

// Leases are stamped and judged by the database's clock when no time is
// given (what workers and the coordinator pass).
func TestLeasesOnTheDatabasesClock(t *testing.T) {
	eachEngine(t, func(t *testing.T, e engine) {
		s, _ := e.open(t)
		ctx := context.Background()
		s.AddJob(ctx, Job{Dedupe: "a", Request: []byte("{}")})
		s.RegisterWorker(ctx, WorkerInfo{Name: "w", Host: "h"})
		before, err := s.Now(ctx)
		if err != nil {
			t.Fatal(err)
		}
		j, err := s.ClaimJob(ctx, Claim{Worker: "w", Lease: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		after, _ := s.Now(ctx)
		if j.LeaseUntil.Before(before.Add(time.Minute)) || j.LeaseUntil.After(after.Add(time.Minute)) {
			t.Errorf("lease until %v; want a minute after the claim, by the database's clock (%v..%v)", j.LeaseUntil, before, after)
		}
		if re, _, _ := s.ExpireJobs(ctx, time.Time{}, 2); len(re) != 0 {
			t.Errorf("a fresh lease expired: %+v", re)
		}
		if err := s.Heartbeat(ctx, "w", j.ID, time.Minute, time.Time{}); err != nil {
			t.Fatal(err)
		}
		ws, _ := s.Workers(ctx, before.Add(-time.Hour))
		if len(ws) != 1 || ws[0].JobID != j.ID || ws[0].Heartbeat.Before(before) || !ws[0].LeaseUntil.After(after) {
			t.Errorf("Workers = %+v", ws)
		}
		if re, _, _ := s.ExpireJobs(ctx, after.Add(2*time.Minute), 2); len(re) != 1 {
			t.Errorf("a lease past its end did not expire")
		}
		// A retry's wait runs on the database's clock too.
		j, _ = s.ClaimJob(ctx, Claim{Worker: "w", Lease: time.Minute})
		j.State, j.RetryAfter = JobQueued, time.Hour
		if err := s.FinishJob(ctx, j); err != nil {
			t.Fatal(err)
		}
		got, _ := s.Job(ctx, j.ID)
		if got.NotBefore.Before(after.Add(59*time.Minute)) || got.NotBefore.After(after.Add(61*time.Minute)) {
			t.Errorf("not before %v, want an hour after %v", got.NotBefore, after)
		}
	})
}

// A job's reply travels with its run and is forgotten with it.
func TestJobReplyTravelsWithTheRun(t *testing.T) {
	eachEngine(t, func(t *testing.T, e engine) {
		s, _ := e.open(t)
		ctx := context.Background()
		id, _, _ := s.AddJob(ctx, Job{Dedupe: "a", Request: []byte("{}")})
		j, _ := s.ClaimJob(ctx, claim(time.Now(), 0))
		err := s.Update(ctx, func(tx *Tx) error {
			j.State = JobDone
			if err := tx.FinishJob(ctx, j); err != nil {
				return err
			}
			return tx.PutJobReply(ctx, JobReply{JobID: id, MessageID: "r@x", Recipients: []string{"a@x", "b@y"}, Raw: []byte("raw")})
		})
		if err != nil {
			t.Fatal(err)
		}
		if p, _ := s.PendingRuns(ctx, 10); len(p) != 1 || p[0] != id {
			t.Fatalf("PendingRuns = %v", p)
		}
		r, err := s.JobReply(ctx, id)
		if err != nil || r == nil || r.MessageID != "r@x" || strings.Join(r.Recipients, " ") != "a@x b@y" || string(r.Raw) != "raw" {
			t.Fatalf("JobReply = %+v, %v", r, err)
		}
		if err := s.DeleteRunFiles(ctx, id); err != nil {
			t.Fatal(err)
		}
		if r, _ := s.JobReply(ctx, id); r != nil {
			t.Errorf("the reply outlived its run: %+v", r)
		}
		if p, _ := s.PendingRuns(ctx, 10); len(p) != 0 {
			t.Errorf("PendingRuns after delete = %v", p)
		}
	})
}

// A sender restarting under its name queues again at once what it was
// sending before the final ".", and reports as uncertain what it had at
// the final "."; another sender's claims are not its own.
func TestRecoverOutbox(t *testing.T) {
	eachEngine(t, func(t *testing.T, e engine) {
		s, _ := e.open(t)
		ctx := context.Background()
		for _, id := range []string{"a@x", "b@x", "c@x"} {
			if _, _, err := s.Enqueue(ctx, OutboxMessage{MessageID: id, From: "bot@x", Recipients: []string{"dev@y"}, Raw: []byte("x")}); err != nil {
				t.Fatal(err)
			}
		}
		now := time.Now()
		a, _ := s.ClaimOutbox(ctx, "coord", time.Hour, now)
		b, _ := s.ClaimOutbox(ctx, "coord", time.Hour, now)
		s.ClaimOutbox(ctx, "other", time.Hour, now)
		if err := s.MoveOutbox(ctx, b.ID, "coord", Sending, Delivering, "", time.Time{}); err != nil {
			t.Fatal(err)
		}
		requeued, uncertain, err := s.RecoverOutbox(ctx, "coord")
		if err != nil || requeued != 1 || len(uncertain) != 1 || uncertain[0].ID != b.ID {
			t.Fatalf("RecoverOutbox = %d, %+v, %v", requeued, uncertain, err)
		}
		if m, err := s.ClaimOutbox(ctx, "coord", time.Hour, now); err != nil || m.ID != a.ID {
			t.Errorf("the message coord was sending is not claimable at once: %+v, %v", m, err)
		}
		if ms, _ := s.OutboxIn(ctx, Sending); len(ms) != 2 {
			t.Errorf("sending after recovery: %d, want a's new claim and other's", len(ms))
		}
	})
}
