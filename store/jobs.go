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
	JobFailed  JobState = "failed" // gave up on an infrastructure failure
)

// Job is one test of one series.
type Job struct {
	ID        int64
	Dedupe    string
	Trigger   string // "list", "cli", "command"
	Title     string
	Request   []byte
	State     JobState
	Stage     string
	Blame     blame.Blame // whose fault the last failure was
	Error     string
	Attempts  int
	NotBefore time.Time
	RunDir    string
	Created   time.Time
	Updated   time.Time
}

const timeFormat = time.RFC3339Nano

// AddJob queues a job unless one with the same dedupe key exists. A job
// with a NotBefore waits until then. It returns the job's id and whether it
// was new.
func (s *Store) AddJob(ctx context.Context, j Job) (int64, bool, error) {
	now := time.Now().UTC().Format(timeFormat)
	notBefore := now
	if !j.NotBefore.IsZero() {
		notBefore = j.NotBefore.UTC().Format(timeFormat)
	}
	res, err := s.db.ExecContext(ctx, `INSERT INTO jobs
		(dedupe, trigger, title, request, state, not_before, created, updated)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT(dedupe) DO NOTHING`,
		j.Dedupe, j.Trigger, j.Title, j.Request, JobQueued, notBefore, now, now)
	if err != nil {
		return 0, false, fmt.Errorf("adding job %s: %w", j.Dedupe, err)
	}
	if n, _ := res.RowsAffected(); n == 1 {
		id, err := res.LastInsertId()
		return id, true, err
	}
	var id int64
	err = s.db.QueryRowContext(ctx, `SELECT id FROM jobs WHERE dedupe = ?`, j.Dedupe).Scan(&id)
	return id, false, err
}

const jobColumns = `id, dedupe, trigger, title, request, state, stage, blame, error,
	attempts, not_before, run_dir, created, updated`

func scanJob(row interface{ Scan(...any) error }) (*Job, error) {
	var j Job
	var nb, created, updated string
	if err := row.Scan(&j.ID, &j.Dedupe, &j.Trigger, &j.Title, &j.Request, &j.State, &j.Stage,
		&j.Blame, &j.Error, &j.Attempts, &nb, &j.RunDir, &created, &updated); err != nil {
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
// returns it, or ErrNoJob. It is one UPDATE … RETURNING statement: a
// read-then-write transaction can fail with SQLITE_BUSY when a source
// writes mail in between, which a single writing statement cannot.
func (s *Store) ClaimJob(ctx context.Context, now time.Time) (*Job, error) {
	j, err := scanJob(s.db.QueryRowContext(ctx, `UPDATE jobs SET state = ?, attempts = attempts + 1, updated = ?
		WHERE id = (SELECT id FROM jobs WHERE state = ? AND not_before <= ? ORDER BY id LIMIT 1)
		RETURNING `+jobColumns,
		JobRunning, time.Now().UTC().Format(timeFormat), JobQueued, now.UTC().Format(timeFormat)))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, ErrNoJob
	}
	if err != nil {
		return nil, fmt.Errorf("claiming a job: %w", err)
	}
	return j, nil
}

// UpdateJob records a job's progress or end: its state, stage, blame and
// error, the time before which it must not run again (for a retry), and its
// run directory.
func (s *Store) UpdateJob(ctx context.Context, j *Job) error {
	_, err := s.db.ExecContext(ctx, `UPDATE jobs SET state = ?, stage = ?, blame = ?, error = ?,
		not_before = ?, run_dir = ?, updated = ? WHERE id = ?`,
		j.State, j.Stage, j.Blame, j.Error, j.NotBefore.UTC().Format(timeFormat), j.RunDir,
		time.Now().UTC().Format(timeFormat), j.ID)
	if err != nil {
		return fmt.Errorf("updating job %d: %w", j.ID, err)
	}
	return nil
}

// RequeueInterrupted puts jobs left running by a crash back in the queue.
// It is called once at start, before any job is claimed.
func (s *Store) RequeueInterrupted(ctx context.Context) (int, error) {
	res, err := s.db.ExecContext(ctx, `UPDATE jobs SET state = ?, updated = ? WHERE state = ?`,
		JobQueued, time.Now().UTC().Format(timeFormat), JobRunning)
	if err != nil {
		return 0, fmt.Errorf("requeueing interrupted jobs: %w", err)
	}
	n, _ := res.RowsAffected()
	return int(n), nil
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

// Cursor returns a source's stored position ("" if none).
func (s *Store) Cursor(ctx context.Context, source string) (string, error) {
	var c string
	err := s.db.QueryRowContext(ctx, `SELECT cursor FROM cursors WHERE source = ?`, source).Scan(&c)
	if errors.Is(err, sql.ErrNoRows) {
		return "", nil
	}
	return c, err
}

// SaveMessage keeps a mail and moves its source's cursor past it, in one
// transaction, so that after a crash the mail is either kept and passed, or
// neither.
func (s *Store) SaveMessage(ctx context.Context, source, cursor, messageID, threadID string, raw []byte) error {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	now := time.Now().UTC().Format(timeFormat)
	if messageID != "" {
		if _, err := tx.ExecContext(ctx, `INSERT INTO messages (message_id, source, thread_id, raw, seen)
			VALUES (?, ?, ?, ?, ?) ON CONFLICT(message_id) DO NOTHING`, messageID, source, threadID, raw, now); err != nil {
			return fmt.Errorf("saving message %s: %w", messageID, err)
		}
	}
	if _, err := tx.ExecContext(ctx, `INSERT INTO cursors (source, cursor, updated) VALUES (?, ?, ?)
		ON CONFLICT(source) DO UPDATE SET cursor = excluded.cursor, updated = excluded.updated`,
		source, cursor, now); err != nil {
		return fmt.Errorf("saving cursor of %s: %w", source, err)
	}
	return tx.Commit()
}

// ThreadMessages returns the raw mails kept for a thread, in the order seen.
func (s *Store) ThreadMessages(ctx context.Context, threadID string) ([][]byte, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT raw FROM messages WHERE thread_id = ? ORDER BY rowid`, threadID)
	if err != nil {
		return nil, fmt.Errorf("reading thread %s: %w", threadID, err)
	}
	defer rows.Close()
	var out [][]byte
	for rows.Next() {
		var raw []byte
		if err := rows.Scan(&raw); err != nil {
			return nil, err
		}
		out = append(out, raw)
	}
	return out, rows.Err()
}

// HasMessage says whether a mail was seen already.
func (s *Store) HasMessage(ctx context.Context, messageID string) (bool, error) {
	var n int
	err := s.db.QueryRowContext(ctx, `SELECT count(*) FROM messages WHERE message_id = ?`, messageID).Scan(&n)
	return n > 0, err
}

// LogCommand records an email command; a command seen before is not
// recorded twice. It returns whether it was new.
func (s *Store) LogCommand(ctx context.Context, messageID, sender string, at time.Time, accepted bool) (bool, error) {
	res, err := s.db.ExecContext(ctx, `INSERT INTO commands (message_id, sender, at, accepted) VALUES (?, ?, ?, ?)
		ON CONFLICT(message_id) DO NOTHING`, messageID, sender, at.UTC().Format(timeFormat), accepted)
	if err != nil {
		return false, fmt.Errorf("logging command %s: %w", messageID, err)
	}
	n, _ := res.RowsAffected()
	return n == 1, nil
}

// CommandsSince counts the accepted commands a sender gave since a time.
func (s *Store) CommandsSince(sender string, since time.Time) (int, error) {
	var n int
	err := s.db.QueryRow(`SELECT count(*) FROM commands WHERE sender = ? AND accepted = 1 AND at >= ?`,
		sender, since.UTC().Format(timeFormat)).Scan(&n)
	return n, err
}
