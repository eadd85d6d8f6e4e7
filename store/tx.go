package store

import (
	"context"
	"database/sql"
	"fmt"
)

// querier is what the store's operations run on: the database, or one
// transaction.
type querier interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// Tx is one write transaction. The daemon handles a mail in one: the mail,
// its source's cursor, the commands it gave, the jobs and the answers they
// made commit together or not at all, so that a kill -9 at any point
// neither loses the mail's effects nor repeats them (the source reads the
// mail again from the old cursor).
type Tx struct {
	q *sql.Tx
}

// Update runs fn in one write transaction and commits it when fn returns
// nil; any error rolls everything back. The transaction holds the write
// lock from its start (see Open), so keep fn short and free of network
// I/O: sending happens after the commit.
func (s *Store) Update(ctx context.Context, fn func(*Tx) error) error {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("beginning a transaction: %w", err)
	}
	if err := fn(&Tx{q: tx}); err != nil {
		tx.Rollback()
		return err
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("committing: %w", err)
	}
	return nil
}
