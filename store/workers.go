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
	Heartbeat time.Time // by the database's clock
	Stopped   time.Time // a clean stop; zero while it runs (or after it died)
	// Stage and LeaseUntil are the held job's (Workers): its stage, and
	// when its lease runs out unless renewed; empty when the worker holds
	// no running job.
	Stage      string
	LeaseUntil time.Time
}

// RegisterWorker records a worker that starts, with what it can run; a
// worker of the same name (its previous run) is replaced.
func (s *Store) RegisterWorker(ctx context.Context, w WorkerInfo) error {
	caps, err := json.Marshal(w.Caps)
	if err != nil {
		return err
	}
	if len(caps) > MaxCaps || len(w.Host) > MaxHost || len(w.Name) > MaxWorkerName {
		return fmt.Errorf("registering worker %.128s: its name, host or capabilities are over their size", w.Name)
	}
	if s.r.d.postgres() {
		if _, err := s.r.ExecContext(ctx, `SELECT patchbot_register(?, ?, ?)`, w.Name, w.Host, string(caps)); err != nil {
			return fmt.Errorf("registering worker %s: %w", w.Name, err)
		}
		return nil
	}
	t, ta := s.r.d.at(time.Time{}, 0)
	if _, err := s.r.ExecContext(ctx, `INSERT INTO workers (name, host, caps, job_id, started, since, heartbeat, stopped)
		VALUES (?, ?, ?, 0, `+t+`, `+t+`, `+t+`, '')
		ON CONFLICT(name) DO UPDATE SET host = excluded.host, caps = excluded.caps, job_id = 0,
			started = excluded.started, since = excluded.since, heartbeat = excluded.heartbeat, stopped = ''`,
		w.Name, w.Host, string(caps), ta, ta, ta); err != nil {
		return fmt.Errorf("registering worker %s: %w", w.Name, err)
	}
	return nil
}

// StopWorker records a worker's clean stop.
func (s *Store) StopWorker(ctx context.Context, name string) error {
	if s.r.d.postgres() {
		_, err := s.r.ExecContext(ctx, `SELECT patchbot_stop_worker(?)`, name)
		return err
	}
	t, ta := s.r.d.at(time.Time{}, 0)
	_, err := s.r.ExecContext(ctx, `UPDATE workers SET stopped = `+t+`, heartbeat = `+t+`, since = `+t+`, job_id = 0
		WHERE name = ?`, ta, ta, ta, name)
	return err
}

// Workers lists the workers heard from since a time, by name, with the
// stage and lease of the job each holds.
func (s *Store) Workers(ctx context.Context, since time.Time) ([]WorkerInfo, error) {
	return queryAll(ctx, s.r, "listing workers", func(rows *sql.Rows) (w WorkerInfo, err error) {
		var caps, started, since, hb, stopped, lease string
		if err := rows.Scan(&w.Name, &w.Host, &caps, &w.JobID, &started, &since, &hb, &stopped, &w.Stage, &lease); err != nil {
			return w, err
		}
		if err := json.Unmarshal([]byte(caps), &w.Caps); err != nil {
			return w, fmt.Errorf("worker %s: capabilities: %w", w.Name, err)
		}
		w.Started, w.Since, w.Heartbeat, w.Stopped = parseTime(started), parseTime(since), parseTime(hb), parseTime(stopped)
		w.LeaseUntil = parseTime(lease)
		return w, nil
	}, `SELECT w.name, w.host, w.caps, w.job_id, w.started, w.since, w.heartbeat, w.stopped,
			coalesce(j.stage, ''), coalesce(j.lease_until, '')
		FROM workers w LEFT JOIN jobs j ON j.id = w.job_id AND j.owner = w.name AND j.state = ?
		WHERE w.heartbeat >= ? ORDER BY w.name`, JobRunning, fmtTime(since))
}

// Now is the database's clock: PostgreSQL's for a fleet, the one host's
// for SQLite. Leases and heartbeats are stamped by it, so a worker's state
// is judged by it too.
func (s *Store) Now(ctx context.Context) (time.Time, error) {
	if !s.r.d.postgres() {
		return time.Now(), nil
	}
	var t time.Time
	if err := s.r.QueryRowContext(ctx, `SELECT statement_timestamp()`).Scan(&t); err != nil {
		return time.Time{}, fmt.Errorf("reading the database's clock: %w", err)
	}
	return t, nil
}
