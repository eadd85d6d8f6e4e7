package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"
)

// Base kernels' rounds are kept by who saved them: on PostgreSQL the
// database role of the worker (or coordinator) that measured them, so
// that no worker reads or replaces another host's; on SQLite, one host's,
// by nobody in particular ("").

// PutBaseRounds keeps a base kernel's rounds (a suites.Result as JSON)
// under key (suites/invm.BaseKey), replacing what was kept before.
func (s *Store) PutBaseRounds(ctx context.Context, key string, result []byte, saved time.Time) error {
	if len(key) > MaxBaseKey || len(result) > MaxBaseRounds {
		return fmt.Errorf("keeping base rounds %.128s: %d bytes under a key of %d (at most %d and %d)",
			key, len(result), len(key), MaxBaseRounds, MaxBaseKey)
	}
	at := saved.UTC().Format(time.RFC3339Nano)
	var err error
	if s.r.d.postgres() {
		_, err = s.r.ExecContext(ctx, `SELECT patchbot_put_base_rounds(?, ?, ?)`, key, result, at)
	} else {
		_, err = s.r.ExecContext(ctx, `INSERT INTO base_rounds (owner, key, result, saved) VALUES ('', ?, ?, ?)
			ON CONFLICT(owner, key) DO UPDATE SET result = excluded.result, saved = excluded.saved`, key, result, at)
	}
	if err != nil {
		return fmt.Errorf("keeping base rounds %s: %w", key, err)
	}
	return nil
}

// BaseRounds returns the base rounds kept under key and when they were
// kept; ok is false when none are.
func (s *Store) BaseRounds(ctx context.Context, key string) (result []byte, saved time.Time, ok bool, err error) {
	var at string
	q := `SELECT result, saved FROM base_rounds WHERE owner = '' AND key = ?`
	if s.r.d.postgres() {
		q = `SELECT result, saved FROM patchbot_base_rounds(?)`
	}
	err = s.r.QueryRowContext(ctx, q, key).Scan(&result, &at)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, time.Time{}, false, nil
	}
	if err != nil {
		return nil, time.Time{}, false, fmt.Errorf("reading base rounds %s: %w", key, err)
	}
	saved, err = time.Parse(time.RFC3339Nano, at)
	if err != nil {
		return nil, time.Time{}, false, fmt.Errorf("base rounds %s: saved at %q: %w", key, at, err)
	}
	return result, saved, true, nil
}
