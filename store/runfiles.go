package store

import (
	"context"
	"fmt"
)

// RunFile is one file of a finished run's directory (results, logs,
// artifacts, the reply), on its way from the worker that ran the job to
// the coordinator, which keeps run directories for the dashboard. It
// travels in the database, in the transaction that ends the job, so that a
// job is never done without its results, nor its reply sent without them.
type RunFile struct {
	Name string // a slash-separated path inside the run directory
	Data []byte
}

// PutRunFiles stores the files of job's run, replacing any stored before.
func (t *Tx) PutRunFiles(ctx context.Context, jobID int64, files []RunFile) error {
	if _, err := t.r.ExecContext(ctx, `DELETE FROM run_files WHERE job_id = ?`, jobID); err != nil {
		return fmt.Errorf("storing the run of job %d: %w", jobID, err)
	}
	for _, f := range files {
		if _, err := t.r.ExecContext(ctx, `INSERT INTO run_files (job_id, name, data) VALUES (?, ?, ?)`,
			jobID, f.Name, f.Data); err != nil {
			return fmt.Errorf("storing %s of job %d: %w", f.Name, jobID, err)
		}
	}
	return nil
}

// PendingRuns lists up to limit jobs whose run files wait to be written
// into the run directories, oldest first.
func (s *Store) PendingRuns(ctx context.Context, limit int) ([]int64, error) {
	rows, err := s.r.QueryContext(ctx, `SELECT DISTINCT job_id FROM run_files ORDER BY job_id LIMIT ?`, limit)
	if err != nil {
		return nil, fmt.Errorf("listing stored runs: %w", err)
	}
	defer rows.Close()
	var out []int64
	for rows.Next() {
		var id int64
		if err := rows.Scan(&id); err != nil {
			return nil, err
		}
		out = append(out, id)
	}
	return out, rows.Err()
}

// RunFiles returns the stored files of job's run, by name.
func (s *Store) RunFiles(ctx context.Context, jobID int64) ([]RunFile, error) {
	rows, err := s.r.QueryContext(ctx, `SELECT name, data FROM run_files WHERE job_id = ? ORDER BY name`, jobID)
	if err != nil {
		return nil, fmt.Errorf("reading the run of job %d: %w", jobID, err)
	}
	defer rows.Close()
	var out []RunFile
	for rows.Next() {
		var f RunFile
		if err := rows.Scan(&f.Name, &f.Data); err != nil {
			return nil, err
		}
		out = append(out, f)
	}
	return out, rows.Err()
}

// DeleteRunFiles forgets job's stored run, once it is written out.
func (s *Store) DeleteRunFiles(ctx context.Context, jobID int64) error {
	if _, err := s.r.ExecContext(ctx, `DELETE FROM run_files WHERE job_id = ?`, jobID); err != nil {
		return fmt.Errorf("forgetting the stored run of job %d: %w", jobID, err)
	}
	return nil
}
