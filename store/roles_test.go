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

// refused says whether err is PostgreSQL refusing a statement as a
// worker's function does: a privilege (42501), a value over its size
// (22001) or out of bounds (22023).
func refused(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && (pe.Code == "42501" || pe.Code == "22001" || pe.Code == "22023")
}

// A worker's role can claim, renew, end and report the jobs it holds, and
// nothing else. Each attack a worker's credentials allow with psql is
// tried as the worker role, and each is refused: no table is written
// (outbox, mail, commands, jobs, fairness, base rounds, run files), no
// job is taken in another's name or on another clock, none held by
// another is touched, no queued job is changed, and nothing over its
// size is stored.
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
	var ids []int64
	for _, d := range []string{"a", "b", "queued"} {
		id, _, err := admin.AddJob(ctx, Job{Dedupe: d, Title: d, Source: "list", Sender: "dev@x", Request: []byte("{}"),
			Needs: Needs{Suites: []string{"s"}}})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	queued := ids[2]
	for _, w := range []struct {
		s    *Store
		name string
	}{{w1, "w1"}, {w2, "w2"}} {
		if err := w.s.RegisterWorker(ctx, WorkerInfo{Name: w.name, Host: "h"}); err != nil {
			t.Fatalf("%s registering: %v", w.name, err)
		}
	}
	caps := Caps{Suites: []string{"s"}}
	// A claim in another's name, or on a clock of the worker's own, is
	// refused.
	if _, err := w1.ClaimJob(ctx, Claim{Worker: "w2", Lease: time.Minute, Caps: caps}); !denied(err) {
		t.Errorf("w1 claiming as w2: %v, want permission denied", err)
	}
	if _, err := w1.ClaimJob(ctx, Claim{Worker: "w1", Lease: time.Minute, At: time.Now().Add(24 * time.Hour), Caps: caps}); !denied(err) {
		t.Errorf("w1 claiming a day ahead: %v, want permission denied", err)
	}
	j1, err := w1.ClaimJob(ctx, Claim{Worker: "w1", Lease: time.Minute, MaxAttempts: 5, Caps: caps})
	if err != nil || len(j1.Needs.Suites) != 1 {
		t.Fatalf("w1's claim: %+v, %v", j1, err)
	}
	j2, err := w2.ClaimJob(ctx, Claim{Worker: "w2", Lease: time.Minute, MaxAttempts: 5, Caps: caps})
	if err != nil || j2.ID == j1.ID {
		t.Fatalf("w2's claim = %+v, %v", j2, err)
	}
	if err := w1.Heartbeat(ctx, "w1", j1.ID, time.Minute, time.Time{}); err != nil {
		t.Errorf("w1 renewing its lease: %v", err)
	}
	if err := w1.Heartbeat(ctx, "w1", j2.ID, time.Minute, time.Time{}); !errors.Is(err, ErrLeaseLost) {
		t.Errorf("w1 renewing w2's job: %v, want ErrLeaseLost", err)
	}
	// w2 keeps its base rounds; w1 keeps its own under the same key.
	if err := w2.PutBaseRounds(ctx, "k", []byte(`{"w2":1}`), time.Now()); err != nil {
		t.Fatalf("w2 keeping base rounds: %v", err)
	}
	big := strings.Repeat("x", 8<<20)
	before, _ := admin.Jobs(ctx)
	// Each attack, as w1 would make it with psql. A statement refused, or
	// one that changes no row, is the goal; what changed is checked after.
	for _, a := range []struct {
		what string
		q    string
		args []any
	}{
		{"take a queued job straight to done", `UPDATE jobs SET state = 'done', owner = 'w1' WHERE id = $1`, []any{queued}},
		{"end a queued job it never claimed", `SELECT patchbot_end_job('w1', $1, 'done', 'done', '', '', 1, NULL, NULL, '', '{}', '{}')`, []any{queued}},
		{"end w2's job", `SELECT patchbot_end_job('w1', $1, 'done', 'done', '', '', 1, NULL, NULL, '', '{}', '{}')`, []any{j2.ID}},
		{"end w2's job as w2", `SELECT patchbot_end_job('w2', $1, 'done', 'done', '', '', 1, NULL, NULL, '', '{}', '{}')`, []any{j2.ID}},
		{"renew w2's job as w2", `SELECT patchbot_heartbeat('w2', $1, 60, NULL, NULL)`, []any{j2.ID}},
		{"set w2's stage", `SELECT patchbot_set_stage('w2', $1, 'x')`, []any{j2.ID}},
		{"take back w2's jobs", `SELECT * FROM patchbot_recover('w2', $1)`, []any{1}},
		{"stop w2", `SELECT patchbot_stop_worker('w2') WHERE $1 > 0`, []any{1}},
		{"register as w2", `SELECT patchbot_register('w2', 'evil', '{}') WHERE $1 > 0`, []any{1}},
		{"hold its job for ten years", `SELECT patchbot_heartbeat('w1', $1, 315360000, NULL, NULL)`, []any{j1.ID}},
		{"renew on its own clock", `SELECT patchbot_heartbeat('w1', $1, 60, '9999-01-01T00:00:00.000000000Z', '9999-01-01T00:00:00.000000000Z')`, []any{j1.ID}},
		{"claim a check job", `SELECT * FROM patchbot_claim('w1', 'check', 60, NULL, NULL, 1, 64, 65536, '{s}', $1)`, []any{0}},
		{"starve the queue", `UPDATE jobs SET not_before = '9999-01-01T00:00:00.000000000Z' WHERE state = 'queued' AND $1 > 0`, []any{1}},
		{"requeue its job in the year 9999", `SELECT patchbot_end_job('w1', $1, 'queued', '', 'infra', '', 1, '9999-01-01T00:00:00.000000000Z', NULL, '', '{}', '{}')`, []any{j1.ID}},
		{"requeue its job for a year", `SELECT patchbot_end_job('w1', $1, 'queued', '', 'infra', '', 1, NULL, 31536000, '', '{}', '{}')`, []any{j1.ID}},
		{"reset its job's attempts", `SELECT patchbot_end_job('w1', $1, 'queued', '', 'infra', '', -5, NULL, NULL, '', '{}', '{}')`, []any{j1.ID}},
		{"park its job", `SELECT patchbot_end_job('w1', $1, 'parked', '', '', '', 1, NULL, NULL, '', '{}', '{}')`, []any{j1.ID}},
		{"name a run directory", `SELECT patchbot_end_job('w1', $1, 'done', '', '', '', 1, NULL, NULL, '/etc', '{}', '{}') AND false`, []any{j1.ID}},
		{"an 8 MiB stage", `SELECT patchbot_set_stage('w1', $1, repeat('x', 8388608))`, []any{j1.ID}},
		{"an 8 MiB error", `SELECT patchbot_end_job('w1', $1, 'failed', '', 'infra', repeat('x', 8388608), 1, NULL, NULL, '', '{}', '{}')`, []any{j1.ID}},
		{"8 MiB of capabilities", `SELECT patchbot_register('w1', 'h', $1)`, []any{big}},
		{"8 MiB of base rounds", `SELECT patchbot_put_base_rounds('k2', convert_to($1, 'UTF8'), '')`, []any{big}},
		{"a run of 17 MiB files", `SELECT patchbot_end_job('w1', $1, 'done', '', '', '', 1, NULL, NULL, '', '{a}', ARRAY[convert_to(repeat('x', 17825792), 'UTF8')])`, []any{j1.ID}},
		{"a run of 2000 files", `SELECT patchbot_end_job('w1', $1, 'done', '', '', '', 1, NULL, NULL, '', array_fill('a'::text, ARRAY[2000]), array_fill('\x00'::bytea, ARRAY[2000]))`, []any{j1.ID}},
		{"insert an 8 MiB job", `INSERT INTO jobs (dedupe, trigger, title, request, state, not_before, created, updated) VALUES ('z', 'x', $1, '\x00', 'queued', '', '', '')`, []any{big}},
		{"overwrite w2's base rounds", `UPDATE base_rounds SET result = '\x00' WHERE $1 > 0`, []any{1}},
		{"forge base rounds", `INSERT INTO base_rounds (owner, key, result, saved) VALUES ('w2', 'k', '\x00', $1)`, []any{""}},
		{"read w2's base rounds", `SELECT count(*) FROM base_rounds WHERE $1 > 0`, []any{1}},
		{"serve itself first", `UPDATE served SET last = '' WHERE $1 > 0`, []any{1}},
		{"record fairness", `INSERT INTO served (kind, name, last) VALUES ('source', 'list', $1)`, []any{"9999"}},
		{"report w2's run", `INSERT INTO run_files (job_id, name, data) VALUES ($1, 'run.json', '\x00')`, []any{j2.ID}},
		{"report its own run apart", `INSERT INTO run_files (job_id, name, data) VALUES ($1, 'run.json', '\x00')`, []any{j1.ID}},
		{"send a reply", `INSERT INTO job_replies (job_id, message_id, recipients, raw) VALUES ($1, 'x@y', '["a@b"]', '\x00')`, []any{j1.ID}},
		{"change w2's row", `UPDATE workers SET heartbeat = '' WHERE name = 'w2' AND $1 > 0`, []any{1}},
		{"delete w2's job", `DELETE FROM jobs WHERE id = $1`, []any{j2.ID}},
		{"queue mail", `INSERT INTO outbox (message_id, sender, recipients, raw, state, created, updated) VALUES ($1, 'bot@x', '["a@b"]', '\x00', 'queued', '', '')`, []any{"x@y"}},
		{"read the outbox", `SELECT count(*) FROM outbox WHERE $1 > 0`, []any{1}},
		{"requeue sent mail", `UPDATE outbox SET state = 'queued' WHERE $1 > 0`, []any{1}},
		{"read the mail", `SELECT count(*) FROM messages WHERE $1 > 0`, []any{1}},
		{"give a command", `INSERT INTO commands (message_id, sender, at, accepted) VALUES ($1, 'a@b', '', 1)`, []any{"c@x"}},
		{"opt someone out", `INSERT INTO optouts (address, reason, at) VALUES ($1, '', '')`, []any{"a@b"}},
		{"move a source's cursor", `UPDATE cursors SET cursor = '' WHERE $1 > 0`, []any{1}},
		{"make a table", `CREATE TABLE mine (a int)`, nil},
		{"migrate", `INSERT INTO schema_version (version) VALUES ($1)`, []any{99}},
	} {
		var changed bool
		rows, err := w1.DB().QueryContext(ctx, a.q, a.args...)
		if err == nil {
			for rows.Next() {
				var v any
				if rows.Scan(&v) == nil && v != nil && v != false {
					changed = true
				}
			}
			err = rows.Err()
			rows.Close()
		}
		switch {
		case err == nil && changed:
			t.Errorf("%s: w1 could (%s)", a.what, a.q)
		case err != nil && !refused(err):
			t.Errorf("%s: %v, want it refused", a.what, err)
		}
	}
	after, _ := admin.Jobs(ctx)
	for i := range before {
		b, a := before[i], after[i]
		if b.ID == j1.ID {
			if a.State != JobRunning || a.Attempts != 1 || a.Error != "" || a.RunDir != "" || a.Stage != b.Stage {
				t.Errorf("w1's own job after the attacks: %+v", a)
			}
			continue
		}
		if a.State != b.State || a.Owner != b.Owner || !a.NotBefore.Equal(b.NotBefore) || a.Stage != b.Stage ||
			!a.LeaseUntil.Equal(b.LeaseUntil) || a.Attempts != b.Attempts || a.Title != b.Title {
			t.Errorf("job %d changed by w1's attacks: %+v, was %+v", a.ID, a, b)
		}
	}
	if ws, _ := admin.Workers(ctx, time.Now().Add(-time.Hour)); len(ws) != 2 || ws[1].Host != "h" || !ws[1].Stopped.IsZero() {
		t.Errorf("w2's row after w1's tries: %+v", ws)
	}
	var served, outbox, replies, runs int
	admin.DB().QueryRowContext(ctx, `SELECT (SELECT count(*) FROM served WHERE last = '' OR last = '9999'),
		(SELECT count(*) FROM outbox), (SELECT count(*) FROM job_replies), (SELECT count(*) FROM run_files)`).Scan(&served, &outbox, &replies, &runs)
	if served+outbox+replies+runs != 0 {
		t.Errorf("after w1's attacks: %d forged fairness rows, %d outbox rows, %d replies, %d run files", served, outbox, replies, runs)
	}
	if got, _, ok, err := w2.BaseRounds(ctx, "k"); !ok || err != nil || string(got) != `{"w2":1}` {
		t.Errorf("w2's base rounds after w1's attacks: %q, %v, %v", got, ok, err)
	}
	// A worker's base rounds are its own: the same key is two rows.
	for _, r := range []string{`{"a":1}`, `{"a":2}`} {
		if err := w1.PutBaseRounds(ctx, "k", []byte(r), time.Now()); err != nil {
			t.Fatalf("w1 keeping base rounds: %v", err)
		}
	}
	if got, _, ok, err := w1.BaseRounds(ctx, "k"); err != nil || !ok || string(got) != `{"a":2}` {
		t.Errorf("w1 reads its base rounds as %q, %v, %v", got, ok, err)
	}
	if got, _, _, _ := w2.BaseRounds(ctx, "k"); string(got) != `{"w2":1}` {
		t.Errorf("w2's base rounds after w1 kept its own under the same key: %q", got)
	}
	// Its own job ends with its run; the coordinator reads the run.
	j1.State, j1.Stage, j1.RunDir = JobDone, "done", "/etc"
	if err := w1.EndJob(ctx, j1, []RunFile{{"run.json", []byte("{}")}}); err != nil {
		t.Fatalf("w1 ending its job: %v", err)
	}
	if files, err := admin.RunFiles(ctx, j1.ID); err != nil || len(files) != 1 {
		t.Errorf("the coordinator reads w1's run as %v, %v", files, err)
	}
	if got, _ := admin.Job(ctx, j1.ID); got.State != JobDone || got.RunDir != "" {
		t.Errorf("w1's job after its end: %s, run dir %q (a worker names none)", got.State, got.RunDir)
	}
	if err := w1.EndJob(ctx, j1, []RunFile{{"run.json", []byte("forged")}}); !errors.Is(err, ErrLeaseLost) {
		t.Errorf("w1 reporting its run again after the end: %v, want ErrLeaseLost", err)
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
