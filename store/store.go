// Package store keeps patchbot's durable state in one SQLite database
// (modernc.org/sqlite, no cgo): mail seen and the sources' cursors, jobs,
// email commands, opt-outs and the outbox of replies.
//
// Each operation is one function over a querier (the database, or one
// transaction), wrapped by a method of Store and, where the daemon needs it
// inside a transaction, of Tx: a second backend writes one function per
// operation.
package store

import (
	"context"
	"database/sql"
	"fmt"
	"net/url"
	"strings"

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
	// 3: outbox claims. A sender holds a message by owner and lease, so
	// that two senders never deliver it both, and a sender that died
	// mid-transaction loses it when the lease runs out; a transient failure
	// waits until not_before.
	`
	ALTER TABLE outbox ADD COLUMN owner TEXT NOT NULL DEFAULT '';
	ALTER TABLE outbox ADD COLUMN lease_until TEXT NOT NULL DEFAULT '';
	ALTER TABLE outbox ADD COLUMN not_before TEXT NOT NULL DEFAULT '';`,
	// 4: what keeps strangers from making patchbot mail anyone, and a job
	// that kills the daemon from running forever. Every command is logged
	// with its outcome (help, refusals and dropped ones too: they count
	// against the sender's limit); a job counts the crashes it was running
	// in (parked after two); an outbox row names its thread (for the
	// per-thread quota); addresses that asked never to be mailed again.
	`
	ALTER TABLE commands ADD COLUMN outcome TEXT NOT NULL DEFAULT '';
	UPDATE commands SET outcome = CASE accepted WHEN 1 THEN 'accepted' ELSE 'refused' END;
	ALTER TABLE commands ADD COLUMN thread_id TEXT NOT NULL DEFAULT '';
	ALTER TABLE jobs ADD COLUMN crashes INTEGER NOT NULL DEFAULT 0;
	ALTER TABLE outbox ADD COLUMN thread_id TEXT NOT NULL DEFAULT '';
	CREATE INDEX outbox_thread ON outbox(thread_id, created);
	CREATE INDEX outbox_created ON outbox(created);
	CREATE TABLE optouts (
		address TEXT PRIMARY KEY, -- bare, lower case
		reason  TEXT NOT NULL,
		at      TEXT NOT NULL
	);`,
	// 5: mail that the daemon died on. Each mail's ingest is counted
	// before it is acted on and forgotten once it committed; a mail whose
	// count passes two was being acted on when the daemon died twice, and
	// is set aside with its reason instead of read again at every start.
	`
	CREATE TABLE ingests (
		message_id TEXT PRIMARY KEY,
		attempts   INTEGER NOT NULL,
		aside      INTEGER NOT NULL DEFAULT 0,
		reason     TEXT NOT NULL DEFAULT '',
		updated    TEXT NOT NULL
	);`,
}

var uriPath = strings.NewReplacer("%", "%25", "?", "%3F", "#", "%23")

// Store is an open database.
type Store struct {
	db *sql.DB
}

// Open opens (creating if needed) the database at path and brings its
// schema up to date.
func Open(path string) (*Store, error) {
	// WAL with synchronous=FULL: a committed state change survives a crash
	// of the process or the machine, which the outbox depends on.
	q := url.Values{}
	q.Add("_pragma", "busy_timeout(10000)")
	q.Add("_pragma", "journal_mode(WAL)")
	q.Add("_pragma", "synchronous(FULL)")
	q.Add("_pragma", "foreign_keys(ON)")
	// Every transaction takes the write lock when it begins: one that
	// read first and wrote later could fail halfway with SQLITE_BUSY when
	// another connection wrote in between, and busy_timeout cannot help.
	q.Add("_txlock", "immediate")
	// The path goes in a file: URI, where "?" starts the query and "#" a
	// fragment: escaped, a state directory named "a#b" is that directory,
	// not a database called "a" shared by everyone.
	db, err := sql.Open("sqlite", "file:"+uriPath.Replace(path)+"?"+q.Encode())
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
