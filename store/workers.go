package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"time"
)

// WorkerInfo is one worker as the workers table knows it: what it can run,
// what it is running, and when it last said it was alive.
type WorkerInfo struct {
	Name      string
	Host      string
	Caps      Caps
	JobID     int64     // the job it holds, 0 when idle
	Started   time.Time // this run of the worker
	Since     time.Time // when it took its job, or became idle
	Heartbeat time.Time
	Stopped   time.Time // a clean stop; zero while it runs (or after it died)
}

// RegisterWorker records a worker that starts, with what it can run; a
// worker of the same name (its previous run) is replaced.
func (s *Store) RegisterWorker(ctx context.Context, w WorkerInfo) error {
	caps, err := json.Marshal(w.Caps)
	if err != nil {
		return err
	}
	t := now()
	if _, err := s.r.ExecContext(ctx, `INSERT INTO workers (name, host, caps, job_id, started, since, heartbeat, stopped)
		VALUES (?, ?, ?, 0, ?, ?, ?, '')
		ON CONFLICT(name) DO UPDATE SET host = excluded.host, caps = excluded.caps, job_id = 0,
			started = excluded.started, since = excluded.since, heartbeat = excluded.heartbeat, stopped = ''`,
		w.Name, w.Host, string(caps), t, t, t); err != nil {
		return fmt.Errorf("registering worker %s: %w", w.Name, err)
	}
	return nil
}

// StopWorker records a worker's clean stop.
func (s *Store) StopWorker(ctx context.Context, name string) error {
	t := now()
	_, err := s.r.ExecContext(ctx, `UPDATE workers SET stopped = ?, heartbeat = ?, since = ?, job_id = 0 WHERE name = ?`,
		t, t, t, name)
	return err
}

// Workers lists the workers heard from since a time, by name.
func (s *Store) Workers(ctx context.Context, since time.Time) ([]WorkerInfo, error) {
	return queryAll(ctx, s.r, "listing workers", func(rows *sql.Rows) (w WorkerInfo, err error) {
		var caps, started, since, hb, stopped string
		if err := rows.Scan(&w.Name, &w.Host, &caps, &w.JobID, &started, &since, &hb, &stopped); err != nil {
			return w, err
		}
		if err := json.Unmarshal([]byte(caps), &w.Caps); err != nil {
			return w, fmt.Errorf("worker %s: capabilities: %w", w.Name, err)
		}
		w.Started, w.Since, w.Heartbeat, w.Stopped = parseTime(started), parseTime(since), parseTime(hb), parseTime(stopped)
		return w, nil
	}, `SELECT name, host, caps, job_id, started, since, heartbeat, stopped
		FROM workers WHERE heartbeat >= ? ORDER BY name`, fmtTime(since))
}
