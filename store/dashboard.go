package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"
)

// The dashboard's queries (web). They only read, and they never
// select a job's request: it holds the series' raw mails, which a page does
// not show and which would make a listing of thousands of jobs slow.

const jobViewColumns = `id, dedupe, kind, trigger, title, source, sender, state, stage, blame, error,
	attempts, crashes, not_before, run_dir, owner, lease_until, started, created, updated`

func scanJobView(row interface{ Scan(...any) error }) (*Job, error) {
	var j Job
	var nb, lease, started, created, updated string
	if err := row.Scan(&j.ID, &j.Dedupe, &j.Kind, &j.Trigger, &j.Title, &j.Source, &j.Sender, &j.State, &j.Stage,
		&j.Blame, &j.Error, &j.Attempts, &j.Crashes, &nb, &j.RunDir, &j.Owner, &lease, &started, &created, &updated); err != nil {
		return nil, err
	}
	j.NotBefore, j.LeaseUntil, j.Started = parseTime(nb), parseTime(lease), parseTime(started)
	j.Created, j.Updated = parseTime(created), parseTime(updated)
	return &j, nil
}

func (s *Store) jobViews(ctx context.Context, what, query string, args ...any) ([]*Job, error) {
	return queryAll(ctx, s.r, "listing "+what, func(rows *sql.Rows) (*Job, error) { return scanJobView(rows) },
		`SELECT `+jobViewColumns+` FROM jobs `+query, args...)
}

// ActiveJobs returns up to limit jobs that are queued (due or waiting for
// their not-before time) or running, oldest first, without their requests.
func (s *Store) ActiveJobs(ctx context.Context, limit int) ([]*Job, error) {
	return s.jobViews(ctx, "active jobs", `WHERE state IN (?, ?) ORDER BY id LIMIT ?`,
		JobQueued, JobRunning, limit)
}

// RecentJobs returns up to limit jobs in state, newest first, without
// their requests.
func (s *Store) RecentJobs(ctx context.Context, state JobState, limit int) ([]*Job, error) {
	return s.jobViews(ctx, string(state)+" jobs", `WHERE state = ? ORDER BY id DESC LIMIT ?`, state, limit)
}

// JobView returns one job without its request, or nil when there is none.
func (s *Store) JobView(ctx context.Context, id int64) (*Job, error) {
	jobs, err := s.jobViews(ctx, "a job", `WHERE id = ?`, id)
	if err != nil || len(jobs) == 0 {
		return nil, err
	}
	return jobs[0], nil
}

// JobByRunDir returns the job that wrote the run directory dir (as stored:
// the path the daemon gave it), or nil when no job did (a `patchbot run`
// from the command line has no job).
func (s *Store) JobByRunDir(ctx context.Context, dir string) (*Job, error) {
	jobs, err := s.jobViews(ctx, "the job of a run", `WHERE run_dir = ? ORDER BY id DESC LIMIT 1`, dir)
	if err != nil || len(jobs) == 0 {
		return nil, err
	}
	return jobs[0], nil
}

// SourceActivity is when a source last moved its cursor: it does so with
// every mail it keeps (SaveMessage), so this is when it last delivered one.
type SourceActivity struct {
	Source  string
	Cursor  string
	Updated time.Time
}

// SourcesActivity returns every source that has delivered mail, by name.
func (s *Store) SourcesActivity(ctx context.Context) ([]SourceActivity, error) {
	return queryAll(ctx, s.r, "listing sources", func(rows *sql.Rows) (a SourceActivity, err error) {
		var updated string
		err = rows.Scan(&a.Source, &a.Cursor, &updated)
		a.Updated = parseTime(updated)
		return a, err
	}, `SELECT source, cursor, updated FROM cursors ORDER BY source`)
}

// OutboxStatus is how far sending one reply got, without the mail itself.
type OutboxStatus struct {
	State     OutboxState
	Attempts  int
	LastError string
	Updated   time.Time
}

// ReplyStatus returns the outbox state of the reply with Message-ID id
// (without angle brackets), or nil when the outbox does not hold it.
func (s *Store) ReplyStatus(ctx context.Context, id string) (*OutboxStatus, error) {
	var st OutboxStatus
	var updated string
	err := s.r.QueryRowContext(ctx, `SELECT state, attempts, last_error, updated FROM outbox WHERE message_id = ?`,
		id).Scan(&st.State, &st.Attempts, &st.LastError, &updated)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading the outbox state of %s: %w", id, err)
	}
	st.Updated = parseTime(updated)
	return &st, nil
}
