package store

import (
	"context"
	"database/sql"
	"fmt"
)

// RunFile is one file of a finished run's directory (results, logs,
// artifacts), on its way from the worker that ran the job to
// the coordinator, which keeps run directories for the dashboard. It
// travels in the database, in the transaction that ends the job, so that a
// job is never done without its results, nor its reply sent without them.
type RunFile struct {
	Name string // a slash-separated path inside the run directory
	Data []byte
}

// putRunFiles stores the files of job's run, replacing any stored before
// (EndJob).
func putRunFiles(ctx context.Context, r runner, jobID int64, files []RunFile) error {
	if _, err := r.ExecContext(ctx, `DELETE FROM run_files WHERE job_id = ?`, jobID); err != nil {
		return fmt.Errorf("storing the run of job %d: %w", jobID, err)
	}
	for _, f := range files {
		if _, err := r.ExecContext(ctx, `INSERT INTO run_files (job_id, name, data) VALUES (?, ?, ?)`,
			jobID, f.Name, f.Data); err != nil {
			return fmt.Errorf("storing %s of job %d: %w", f.Name, jobID, err)
		}
	}
	return nil
}

// SetRunDir records where the coordinator wrote a job's run: a worker's
// word on it is not taken.
func (t *Tx) SetRunDir(ctx context.Context, jobID int64, dir string) error {
	if _, err := t.r.ExecContext(ctx, `UPDATE jobs SET run_dir = ? WHERE id = ?`, dir, jobID); err != nil {
		return fmt.Errorf("recording the run directory of job %d: %w", jobID, err)
	}
	return nil
}

// DeleteRun forgets a job's stored run, once it is written out and its
// reply queued (and a reply an older worker stored: job_replies, no longer
// read).
func (t *Tx) DeleteRun(ctx context.Context, jobID int64) error {
	for _, q := range []string{`DELETE FROM run_files WHERE job_id = ?`, `DELETE FROM job_replies WHERE job_id = ?`} {
		if _, err := t.r.ExecContext(ctx, q, jobID); err != nil {
			return fmt.Errorf("forgetting the stored run of job %d: %w", jobID, err)
		}
	}
	return nil
}

// PendingRuns lists up to limit jobs whose run files wait to be written
// into the run directories (and their replies rendered), oldest first.
func (s *Store) PendingRuns(ctx context.Context, limit int) ([]int64, error) {
	return queryAll(ctx, s.r, "listing stored runs", func(rows *sql.Rows) (id int64, err error) {
		return id, rows.Scan(&id)
	}, `SELECT job_id FROM run_files UNION SELECT job_id FROM job_replies ORDER BY job_id LIMIT ?`, limit)
}

// RunFiles returns the stored files of job's run, by name.
func (s *Store) RunFiles(ctx context.Context, jobID int64) ([]RunFile, error) {
	return queryAll(ctx, s.r, fmt.Sprintf("reading the run of job %d", jobID), func(rows *sql.Rows) (f RunFile, err error) {
		return f, rows.Scan(&f.Name, &f.Data)
	}, `SELECT name, data FROM run_files WHERE job_id = ? ORDER BY name`, jobID)
}

// DeleteRunFiles forgets job's stored run, once it is written out.
func (s *Store) DeleteRunFiles(ctx context.Context, jobID int64) error {
	return s.Update(ctx, func(tx *Tx) error { return tx.DeleteRun(ctx, jobID) })
}
