package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
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

// JobReply is a finished job's reply on its way from the worker that ran
// the job to the coordinator, which checks it against the job and puts it
// in the outbox: a worker never writes the outbox. It travels with the
// run's files, in the transaction that ends the job.
type JobReply struct {
	JobID      int64
	MessageID  string
	Recipients []string // the envelope the worker asks for
	Raw        []byte
}

// PutJobReply stores the reply of a job's run, replacing any stored
// before.
func (t *Tx) PutJobReply(ctx context.Context, r JobReply) error {
	rcpt, err := json.Marshal(r.Recipients)
	if err != nil {
		return err
	}
	if _, err := t.r.ExecContext(ctx, `DELETE FROM job_replies WHERE job_id = ?`, r.JobID); err != nil {
		return fmt.Errorf("storing the reply of job %d: %w", r.JobID, err)
	}
	if _, err := t.r.ExecContext(ctx, `INSERT INTO job_replies (job_id, message_id, recipients, raw) VALUES (?, ?, ?, ?)`,
		r.JobID, r.MessageID, string(rcpt), r.Raw); err != nil {
		return fmt.Errorf("storing the reply of job %d: %w", r.JobID, err)
	}
	return nil
}

// JobReply returns the stored reply of a job's run, or nil when there is
// none.
func (s *Store) JobReply(ctx context.Context, jobID int64) (*JobReply, error) {
	r := JobReply{JobID: jobID}
	var rcpt string
	err := s.r.QueryRowContext(ctx, `SELECT message_id, recipients, raw FROM job_replies WHERE job_id = ?`, jobID).
		Scan(&r.MessageID, &rcpt, &r.Raw)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, nil
	}
	if err == nil {
		err = json.Unmarshal([]byte(rcpt), &r.Recipients)
	}
	if err != nil {
		return nil, fmt.Errorf("reading the reply of job %d: %w", jobID, err)
	}
	return &r, nil
}

// DeleteRun forgets a job's stored run and reply, once they are written
// out and queued.
func (t *Tx) DeleteRun(ctx context.Context, jobID int64) error {
	for _, q := range []string{`DELETE FROM run_files WHERE job_id = ?`, `DELETE FROM job_replies WHERE job_id = ?`} {
		if _, err := t.r.ExecContext(ctx, q, jobID); err != nil {
			return fmt.Errorf("forgetting the stored run of job %d: %w", jobID, err)
		}
	}
	return nil
}

// PendingRuns lists up to limit jobs whose run files (or reply) wait to
// be written into the run directories (or the outbox), oldest first.
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

// DeleteRunFiles forgets job's stored run and reply, once they are
// written out.
func (s *Store) DeleteRunFiles(ctx context.Context, jobID int64) error {
	return s.Update(ctx, func(tx *Tx) error { return tx.DeleteRun(ctx, jobID) })
}
