// Package store keeps patchbot's durable state in one SQLite database
// (modernc.org/sqlite, no cgo): the outbox of replies today, and the tables
// of other components as they add migrations.
package store

import (
	"context"
	"database/sql"
	"fmt"
	"net/url"
	"os"
	"syscall"

	_ "modernc.org/sqlite" // registers the "sqlite" driver
)

// migrations build the schema, one step each, applied in order and
// recorded in PRAGMA user_version. Append only: a released step is never
// edited, because databases in the field have already run it. A component
// that needs tables (messages seen, series, jobs, results) adds a step.
var migrations = []string{
	// 1: the outbox. A reply is written here before any attempt to send it,
	// and its state says how far sending got (see outbox.go).
	`CREATE TABLE outbox (
		id          INTEGER PRIMARY KEY,
		message_id  TEXT NOT NULL UNIQUE,
		sender      TEXT NOT NULL,
		recipients  TEXT NOT NULL, -- JSON array of addresses
		raw         BLOB NOT NULL,
		state       TEXT NOT NULL,
		attempts    INTEGER NOT NULL DEFAULT 0,
		last_error  TEXT NOT NULL DEFAULT '',
		created     TEXT NOT NULL,
		updated     TEXT NOT NULL
	);
	CREATE INDEX outbox_state ON outbox(state);`,
	// 2: the daemon's tables: where each source got to, the mail seen (kept
	// so that a series can be assembled again after a restart), jobs, and
	// the email commands given (for the per-sender rate limit).
	`
	CREATE TABLE cursors (
		source  TEXT PRIMARY KEY,
		cursor  TEXT NOT NULL,
		updated TEXT NOT NULL
	);
	CREATE TABLE messages (
		message_id  TEXT PRIMARY KEY,
		source      TEXT NOT NULL,
		thread_id   TEXT NOT NULL DEFAULT '',
		raw         BLOB NOT NULL,
		seen        TEXT NOT NULL
	);
	CREATE INDEX messages_thread ON messages(thread_id);
	CREATE TABLE jobs (
		id         INTEGER PRIMARY KEY,
		-- dedupe makes a job unique: "series:<key>:v<N>" for a series seen
		-- on a list (a version is tested once, a reroll is a new job), or
		-- "command:<message-id>" for an email command.
		dedupe     TEXT NOT NULL UNIQUE,
		trigger    TEXT NOT NULL,
		title      TEXT NOT NULL,
		request    BLOB NOT NULL, -- JSON, the service's job request
		state      TEXT NOT NULL,
		stage      TEXT NOT NULL DEFAULT '',
		blame      TEXT NOT NULL DEFAULT '',
		error      TEXT NOT NULL DEFAULT '',
		attempts   INTEGER NOT NULL DEFAULT 0,
		not_before TEXT NOT NULL,
		run_dir    TEXT NOT NULL DEFAULT '',
		created    TEXT NOT NULL,
		updated    TEXT NOT NULL
	);
	CREATE INDEX jobs_state ON jobs(state, not_before);
	CREATE TABLE commands (
		message_id TEXT PRIMARY KEY,
		sender     TEXT NOT NULL,
		at         TEXT NOT NULL,
		accepted   INTEGER NOT NULL
	);
	CREATE INDEX commands_sender ON commands(sender, at);`,
}

// Store is an open database.
type Store struct {
	db *sql.DB
}

// Open opens (creating if needed) the database at path and brings its
// schema up to date. The database holds mail, outbox rows and job history:
// it is made 0600, and an existing one (and its -wal and -shm files) open
// to others is closed to them.
func Open(path string) (*Store, error) {
	if err := private(path); err != nil {
		return nil, fmt.Errorf("opening store %s: %w", path, err)
	}
	// WAL with synchronous=FULL: a committed state change survives a crash
	// of the process or the machine, which the outbox depends on.
	q := url.Values{}
	q.Add("_pragma", "busy_timeout(10000)")
	q.Add("_pragma", "journal_mode(WAL)")
	q.Add("_pragma", "synchronous(FULL)")
	q.Add("_pragma", "foreign_keys(ON)")
	db, err := sql.Open("sqlite", "file:"+path+"?"+q.Encode())
	if err != nil {
		return nil, fmt.Errorf("opening store %s: %w", path, err)
	}
	s := &Store{db: db}
	if err := s.migrate(context.Background(), migrations); err != nil {
		db.Close()
		return nil, fmt.Errorf("opening store %s: %w", path, err)
	}
	return s, nil
}

// private creates the database file 0600 before SQLite does (SQLite would
// make it 0644, and its -wal and -shm files after it), and takes group and
// other access away from the files that exist.
func private(path string) error {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|syscall.O_NOFOLLOW, 0o600)
	if err != nil {
		return err
	}
	f.Close()
	for _, p := range []string{path, path + "-wal", path + "-shm"} {
		fi, err := os.Lstat(p)
		if err != nil || !fi.Mode().IsRegular() || fi.Mode().Perm()&0o077 == 0 {
			continue
		}
		if err := os.Chmod(p, fi.Mode().Perm()&0o700); err != nil {
			return err
		}
	}
	return nil
}

// DB is the database, for components that keep their own tables here.
func (s *Store) DB() *sql.DB { return s.db }

// Close closes the database.
func (s *Store) Close() error { return s.db.Close() }

// Version is the number of migrations applied.
func (s *Store) Version(ctx context.Context) (int, error) {
	var v int
	err := s.db.QueryRowContext(ctx, "PRAGMA user_version").Scan(&v)
	return v, err
}

func (s *Store) migrate(ctx context.Context, steps []string) error {
	conn, err := s.db.Conn(ctx)
	if err != nil {
		return err
	}
	defer conn.Close()
	// BEGIN IMMEDIATE takes the write lock first, so that two processes
	// opening a fresh database do not both run step 1.
	if _, err := conn.ExecContext(ctx, "BEGIN IMMEDIATE"); err != nil {
		return fmt.Errorf("locking for migration: %w", err)
	}
	var version int
	if err := conn.QueryRowContext(ctx, "PRAGMA user_version").Scan(&version); err != nil {
		conn.ExecContext(ctx, "ROLLBACK")
		return fmt.Errorf("reading schema version: %w", err)
	}
	if version > len(steps) {
		conn.ExecContext(ctx, "ROLLBACK")
		return fmt.Errorf("schema version %d is newer than this patchbot knows (%d)", version, len(steps))
	}
	for i := version; i < len(steps); i++ {
		if _, err := conn.ExecContext(ctx, steps[i]); err != nil {
			conn.ExecContext(ctx, "ROLLBACK")
			return fmt.Errorf("migration %d: %w", i+1, err)
		}
	}
	if _, err := conn.ExecContext(ctx, fmt.Sprintf("PRAGMA user_version = %d", len(steps))); err != nil {
		conn.ExecContext(ctx, "ROLLBACK")
		return fmt.Errorf("recording schema version: %w", err)
	}
	if _, err := conn.ExecContext(ctx, "COMMIT"); err != nil {
		return fmt.Errorf("committing migration: %w", err)
	}
	return nil
}
