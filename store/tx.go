package store

import (
	"context"
	"fmt"
)

// Tx is one write transaction. The daemon handles a mail in one: the mail,
// its source's cursor, the commands it gave, the jobs and the answers they
// made commit together or not at all, so that a kill -9 at any point
// neither loses the mail's effects nor repeats them (the source reads the
// mail again from the old cursor). A worker ends a job in one: the job's
// state, its run's files and its reply.
type Tx struct {
	r runner
}

// writeLock is the PostgreSQL advisory lock every Update holds: as SQLite's
// BEGIN IMMEDIATE does, it lets one write transaction run at a time, so
// that what a transaction read (a quota's count, a thread's mail) is still
// true when it commits. Claims and heartbeats do not take it: they are
// single rows, locked by PostgreSQL itself.
const writeLock = 0x70617464

// Update runs fn in one write transaction and commits it when fn returns
// nil; any error rolls everything back. The transaction holds the write
// lock from its start (see Open and writeLock), so keep fn short and free
// of network I/O: sending happens after the commit.
func (s *Store) Update(ctx context.Context, fn func(*Tx) error) error {
	return s.inTx(ctx, true, func(r runner) error { return fn(&Tx{r: r}) })
}

// UpdateHeld runs fn in one transaction as Update does, but without the
// write lock: for a worker's writes to the rows it holds (its job's end
// and its run's files, EndJob on SQLite), which depend on no read another writer
// could change before the commit, only on the job's row itself, which
// PostgreSQL locks. Ending a job does not wait, then, for every other
// write of the fleet; a fleet's workers end jobs side by side.
func (s *Store) UpdateHeld(ctx context.Context, fn func(*Tx) error) error {
	return s.inTx(ctx, false, func(r runner) error { return fn(&Tx{r: r}) })
}

// inTx runs fn in a transaction, serialized with every Update when
// exclusive (always so on SQLite, whose transactions all take the write
// lock first).
func (s *Store) inTx(ctx context.Context, exclusive bool, fn func(runner) error) error {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("beginning a transaction: %w", err)
	}
	r := runner{q: tx, d: s.r.d}
	if exclusive && r.d.postgres() {
		if _, err := tx.ExecContext(ctx, fmt.Sprintf("SELECT pg_advisory_xact_lock(%d)", writeLock)); err != nil {
			tx.Rollback()
			return fmt.Errorf("taking the write lock: %w", err)
		}
	}
	if err := fn(r); err != nil {
		tx.Rollback()
		return err
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("committing: %w", err)
	}
	return nil
}
