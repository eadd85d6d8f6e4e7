package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/patchbot/patchbot/blame"
)

// JobState is where a job is in its life.
type JobState string

const (
	JobQueued  JobState = "queued"
	JobRunning JobState = "running"
	JobDone    JobState = "done"   // a reply was written (a result or the patch's failure)
	JobFailed  JobState = "failed" // gave up on an infrastructure failure, or after too many attempts
	// JobParked: the daemon died while running it twice (see RecoverJobs).
	// It is not run again, and its author is not mailed, until a person
	// looks at it and unparks it (UnparkJob).
	JobParked JobState = "parked"
)

// JobStates are all states, in the order of a job's life, for listings
// and gauges.
var JobStates = []JobState{JobQueued, JobRunning, JobDone, JobFailed, JobParked}

// Job is one test of one series.
type Job struct {
	ID        int64
	Dedupe    string
	Trigger   string // "list", "cli", "command", "incomplete"
	Title     string
	Request   []byte
	State     JobState
	Stage     string
	Blame     blame.Blame // whose fault the last failure was
	Error     string
	Attempts  int // claims so far (a claim given back at a clean shutdown does not count)
	Crashes   int // daemon deaths while it ran
	NotBefore time.Time
	RunDir    string
	Created   time.Time
	Updated   time.Time
}

const timeFormat = time.RFC3339Nano

func now() string { return time.Now().UTC().Format(timeFormat) }

// AddJob queues a job unless one with the same dedupe key exists. A job
// with a NotBefore waits until then. It returns the job's id and whether it
// was new.
func (s *Store) AddJob(ctx context.Context, j Job) (int64, bool, error) { return addJob(ctx, s.db, j) }

// AddJob is Store.AddJob inside the transaction.
func (t *Tx) AddJob(ctx context.Context, j Job) (int64, bool, error) { return addJob(ctx, t.q, j) }

func addJob(ctx context.Context, q querier, j Job) (int64, bool, error) {
	t := now()
	notBefore := t
	if !j.NotBefore.IsZero() {
		notBefore = j.NotBefore.UTC().Format(timeFormat)
	}
	res, err := q.ExecContext(ctx, `INSERT INTO jobs
		(dedupe, trigger, title, request, state, not_before, created, updated)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT(dedupe) DO NOTHING`,
		j.Dedupe, j.Trigger, j.Title, j.Request, JobQueued, notBefore, t, t)
	if err != nil {
		return 0, false, fmt.Errorf("adding job %s: %w", j.Dedupe, err)
	}
	if n, _ := res.RowsAffected(); n == 1 {
		id, err := res.LastInsertId()
		return id, true, err
	}
	var id int64
	err = q.QueryRowContext(ctx, `SELECT id FROM jobs WHERE dedupe = ?`, j.Dedupe).Scan(&id)
	return id, false, err
}

const jobColumns = `id, dedupe, trigger, title, request, state, stage, blame, error,
	attempts, crashes, not_before, run_dir, created, updated`

func scanJob(row interface{ Scan(...any) error }) (*Job, error) {
	var j Job
	var nb, created, updated string
	if err := row.Scan(&j.ID, &j.Dedupe, &j.Trigger, &j.Title, &j.Request, &j.State, &j.Stage,
		&j.Blame, &j.Error, &j.Attempts, &j.Crashes, &nb, &j.RunDir, &created, &updated); err != nil {
		return nil, err
	}
	j.NotBefore, _ = time.Parse(timeFormat, nb)
	j.Created, _ = time.Parse(timeFormat, created)
	j.Updated, _ = time.Parse(timeFormat, updated)
	return &j, nil
}

// Job returns one job.
func (s *Store) Job(ctx context.Context, id int64) (*Job, error) {
	j, err := scanJob(s.db.QueryRowContext(ctx, `SELECT `+jobColumns+` FROM jobs WHERE id = ?`, id))
	if err != nil {
		return nil, fmt.Errorf("reading job %d: %w", id, err)
	}
	return j, nil
}

// Jobs lists every job, oldest first.
func (s *Store) Jobs(ctx context.Context) ([]*Job, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT `+jobColumns+` FROM jobs ORDER BY id`)
	if err != nil {
		return nil, fmt.Errorf("listing jobs: %w", err)
	}
	defer rows.Close()
	var out []*Job
	for rows.Next() {
		j, err := scanJob(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, j)
	}
	return out, rows.Err()
}

// ErrNoJob means no job is ready to run.
var ErrNoJob = errors.New("no job ready")

// ClaimJob moves the oldest queued job whose time has come to running and
// returns it, or ErrNoJob. A queued job that has used maxAttempts claims
// already is failed instead of claimed (0: no limit): the limit holds
// however the job came back to the queue, a retry or a restart.
//
// The claim is one UPDATE … RETURNING statement, so that two workers never
// get the same job.
func (s *Store) ClaimJob(ctx context.Context, at time.Time, maxAttempts int) (*Job, error) {
	if maxAttempts > 0 {
		if _, err := s.db.ExecContext(ctx, `UPDATE jobs SET state = ?, error = ? || error, updated = ?
			WHERE state = ? AND attempts >= ?`,
			JobFailed, fmt.Sprintf("gave up after %d attempts; last error: ", maxAttempts), now(),
			JobQueued, maxAttempts); err != nil {
			return nil, fmt.Errorf("failing jobs out of attempts: %w", err)
		}
	}
	j, err := scanJob(s.db.QueryRowContext(ctx, `UPDATE jobs SET state = ?, attempts = attempts + 1, updated = ?
		WHERE id = (SELECT id FROM jobs WHERE state = ? AND not_before <= ? ORDER BY id LIMIT 1)
		RETURNING `+jobColumns,
		JobRunning, now(), JobQueued, at.UTC().Format(timeFormat)))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, ErrNoJob
	}
	if err != nil {
		return nil, fmt.Errorf("claiming a job: %w", err)
	}
	return j, nil
}

// UpdateJob records a job's progress or end: its state, stage, blame and
// error, its attempts (a worker gives back a claim it did not use), the
// time before which it must not run again (for a retry), and its run
// directory.
func (s *Store) UpdateJob(ctx context.Context, j *Job) error {
	_, err := s.db.ExecContext(ctx, `UPDATE jobs SET state = ?, stage = ?, blame = ?, error = ?, attempts = ?,
		not_before = ?, run_dir = ?, updated = ? WHERE id = ?`,
		j.State, j.Stage, j.Blame, j.Error, j.Attempts, j.NotBefore.UTC().Format(timeFormat), j.RunDir,
		now(), j.ID)
	if err != nil {
		return fmt.Errorf("updating job %d: %w", j.ID, err)
	}
	return nil
}

// RecoverJobs is called once at start, before any job is claimed: a job
// still "running" was running when the daemon died. It counts the crash
// and queues the job again, or parks it when it has now been running in
// maxCrashes deaths: a job that kills the daemon must not keep killing it
// at the head of the queue. It returns the jobs requeued and parked.
func (s *Store) RecoverJobs(ctx context.Context, maxCrashes int) (requeued, parked []*Job, err error) {
	err = s.Update(ctx, func(tx *Tx) error {
		rows, err := tx.q.QueryContext(ctx, `UPDATE jobs SET crashes = crashes + 1,
			state = CASE WHEN crashes + 1 >= ? THEN ? ELSE ? END,
			error = CASE WHEN crashes + 1 >= ? THEN 'parked: the daemon died while running it ' || (crashes + 1) || ' times' ELSE error END,
			updated = ?
			WHERE state = ? RETURNING `+jobColumns,
			maxCrashes, JobParked, JobQueued, maxCrashes, now(), JobRunning)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			j, err := scanJob(rows)
			if err != nil {
				return err
			}
			if j.State == JobParked {
				parked = append(parked, j)
			} else {
				requeued = append(requeued, j)
			}
		}
		return rows.Err()
	})
	if err != nil {
		return nil, nil, fmt.Errorf("recovering interrupted jobs: %w", err)
	}
	return requeued, parked, nil
}

// UnparkJob queues a parked job again with its crash count cleared, for
// a person who has looked at why it killed the daemon.
func (s *Store) UnparkJob(ctx context.Context, id int64) error {
	res, err := s.db.ExecContext(ctx, `UPDATE jobs SET state = ?, crashes = 0, attempts = 0, error = '', updated = ?
		WHERE id = ? AND state = ?`, JobQueued, now(), id, JobParked)
	if err != nil {
		return fmt.Errorf("unparking job %d: %w", id, err)
	}
	if n, _ := res.RowsAffected(); n != 1 {
		return fmt.Errorf("unparking job %d: not parked", id)
	}
	return nil
}

// JobCounts counts jobs by state, for /metrics.
func (s *Store) JobCounts(ctx context.Context) (map[JobState]int, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT state, count(*) FROM jobs GROUP BY state`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := map[JobState]int{}
	for rows.Next() {
		var st JobState
		var n int
		if err := rows.Scan(&st, &n); err != nil {
			return nil, err
		}
		out[st] = n
	}
	return out, rows.Err()
}
