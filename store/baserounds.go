package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"
)

// PutBaseRounds keeps a base kernel's rounds (a suites.Result as JSON)
// under key (suites/invm.BaseKey), replacing what was kept before.
func (s *Store) PutBaseRounds(ctx context.Context, key string, result []byte, saved time.Time) error {
	_, err := s.r.ExecContext(ctx, `INSERT INTO base_rounds (key, result, saved) VALUES (?, ?, ?)
		ON CONFLICT(key) DO UPDATE SET result = excluded.result, saved = excluded.saved`,
		key, result, saved.UTC().Format(time.RFC3339Nano))
	if err != nil {
		return fmt.Errorf("keeping base rounds %s: %w", key, err)
	}
	return nil
}

// BaseRounds returns the base rounds kept under key and when they were
// kept; ok is false when none are.
func (s *Store) BaseRounds(ctx context.Context, key string) (result []byte, saved time.Time, ok bool, err error) {
	var at string
	err = s.r.QueryRowContext(ctx, `SELECT result, saved FROM base_rounds WHERE key = ?`, key).Scan(&result, &at)
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
