// Package store keeps patchbot's durable state in one database: mail seen
// and the sources' cursors, jobs and their leases, the workers of a fleet,
// email commands, opt-outs and the outbox of replies.
//
// There are two engines behind one code path (database/sql): SQLite
// (modernc.org/sqlite, no cgo), the embedded default, in a file of the
// state directory; and PostgreSQL (github.com/jackc/pgx/v5), for a fleet of
// workers on many hosts, named by a postgres:// URL. Queries are written
// once with ? placeholders and rebound for PostgreSQL (dialect.go).
//
// Each operation is one function over a runner (the database, or one
// transaction), wrapped by a method of Store and, where the daemon needs it
// inside a transaction, of Tx.
package store

import (
	"context"
	"database/sql"
	"fmt"
	"net/url"
	"os"
	"strings"
	"syscall"

	_ "github.com/jackc/pgx/v5/stdlib" // registers the "pgx" driver
	_ "modernc.org/sqlite"             // registers the "sqlite" driver
)

// step is one migration: its SQLite spelling, and PostgreSQL's when the
// mechanical translation (translate) is not it.
type step struct {
	sql      string
	postgres string
}

func (st step) in(d *dialect) string {
	if !d.postgres() {
		return st.sql
	}
	if st.postgres != "" {
		return st.postgres
	}
	return translate(st.sql)
}

var migrations = []step{
	// 1: the outbox. A reply is written here before any attempt to send it,
	// and its state says how far sending got (see outbox.go).
	{sql: `CREATE TABLE outbox (
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
	CREATE INDEX outbox_state ON outbox(state);`},
	// 2: the daemon's tables: where each source got to, the mail seen (kept
	// so that a series can be assembled again after a restart), jobs, and
	// the email commands given (for the per-sender rate limit).
	{sql: `
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
	CREATE INDEX commands_sender ON commands(sender, at);`},
	// 3: outbox claims. A sender holds a message by owner and lease, so
	// that two senders never deliver it both, and a sender that died
	// mid-transaction loses it when the lease runs out; a transient failure
	// waits until not_before.
	{sql: `
	ALTER TABLE outbox ADD COLUMN owner TEXT NOT NULL DEFAULT '';
	ALTER TABLE outbox ADD COLUMN lease_until TEXT NOT NULL DEFAULT '';
	ALTER TABLE outbox ADD COLUMN not_before TEXT NOT NULL DEFAULT '';`},
	// 4: what keeps strangers from making patchbot mail anyone, and a job
	// that kills the daemon from running forever. Every command is logged
	// with its outcome (help, refusals and dropped ones too: they count
	// against the sender's limit); a job counts the crashes it was running
	// in (parked after two); an outbox row names its thread (for the
	// per-thread quota); addresses that asked never to be mailed again.
	{sql: `
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
	);`},
	// 5: mail that the daemon died on. Each mail's ingest is counted
	// before it is acted on and forgotten once it committed; a mail whose
	// count passes two was being acted on when the daemon died twice, and
	// is set aside with its reason instead of read again at every start.
	{sql: `
	CREATE TABLE ingests (
		message_id TEXT PRIMARY KEY,
		attempts   INTEGER NOT NULL,
		aside      INTEGER NOT NULL DEFAULT 0,
		reason     TEXT NOT NULL DEFAULT '',
		updated    TEXT NOT NULL
	);`},
	// 6: the fleet. A job is held by a worker (owner) until lease_until,
	// which the worker renews while it runs; a job whose lease ran out is
	// claimable again and counts a crash. It names what it needs of a
	// worker (need_*, job_suites) and whom it is for (source, sender), so
	// that a claim takes only a job that fits, and the source and sender
	// served least are served first (served). kind tells the tests, which
	// workers run, from the coordinator's own checks. Workers say what
	// they can run, and send their heartbeat, in workers; a finished run's
	// files travel to the coordinator in run_files, in the transaction
	// that ends the job.
	{sql: fleetStep, postgres: translate(fleetStep) + `
	-- SQLite orders messages by their implicit rowid; PostgreSQL needs a column.
	ALTER TABLE messages ADD COLUMN seq BIGSERIAL;`},
	// 7: base kernels' rounds, kept so that the next series on the same
	// base, config, suite, profile, VM shape and host reuses them
	// (suites/invm's Reuse): one suites.Result as JSON per key.
	{sql: baseRoundsStep, postgres: translate(baseRoundsStep)},
}

const baseRoundsStep = `
	CREATE TABLE base_rounds (
		key    TEXT PRIMARY KEY,
		result BLOB NOT NULL,
		saved  TEXT NOT NULL
	);`

const fleetStep = `
	ALTER TABLE jobs ADD COLUMN kind TEXT NOT NULL DEFAULT 'test';
	UPDATE jobs SET kind = 'check' WHERE trigger = 'incomplete';
	ALTER TABLE jobs ADD COLUMN source TEXT NOT NULL DEFAULT '';
	ALTER TABLE jobs ADD COLUMN sender TEXT NOT NULL DEFAULT '';
	ALTER TABLE jobs ADD COLUMN need_kvm INTEGER NOT NULL DEFAULT 0;
	ALTER TABLE jobs ADD COLUMN need_cpus INTEGER NOT NULL DEFAULT 0;
	ALTER TABLE jobs ADD COLUMN need_mem_mib INTEGER NOT NULL DEFAULT 0;
	ALTER TABLE jobs ADD COLUMN owner TEXT NOT NULL DEFAULT '';
	ALTER TABLE jobs ADD COLUMN lease_until TEXT NOT NULL DEFAULT '';
	ALTER TABLE jobs ADD COLUMN started TEXT NOT NULL DEFAULT '';
	CREATE INDEX jobs_owner ON jobs(owner, state);
	CREATE INDEX jobs_queue ON jobs(state, source, sender, id);
	CREATE TABLE job_suites (
		job_id BIGINT NOT NULL,
		suite  TEXT NOT NULL,
		PRIMARY KEY (job_id, suite)
	);
	CREATE TABLE served (
		kind TEXT NOT NULL, -- source or sender
		name TEXT NOT NULL,
		last TEXT NOT NULL, -- when a job of it was last claimed
		PRIMARY KEY (kind, name)
	);
	CREATE TABLE workers (
		name      TEXT PRIMARY KEY,
		host      TEXT NOT NULL,
		caps      TEXT NOT NULL, -- JSON Caps
		job_id    BIGINT NOT NULL DEFAULT 0,
		started   TEXT NOT NULL, -- this run of the worker
		since     TEXT NOT NULL, -- when it took its job, or became idle
		heartbeat TEXT NOT NULL,
		stopped   TEXT NOT NULL DEFAULT ''
	);
	CREATE TABLE run_files (
		job_id BIGINT NOT NULL,
		name   TEXT NOT NULL, -- a path inside the run directory
		data   BLOB NOT NULL,
		PRIMARY KEY (job_id, name)
	);`

var uriPath = strings.NewReplacer("%", "%25", "?", "%3F", "#", "%23")

// Store is an open database.
type Store struct {
	db *sql.DB
	r  runner
}

// IsPostgres says whether a database name is a PostgreSQL URL
// (postgres:// or postgresql://) rather than a SQLite file's path.
func IsPostgres(name string) bool {
	return strings.HasPrefix(name, "postgres://") || strings.HasPrefix(name, "postgresql://")
}

// Open opens the database and brings its schema up to date: a PostgreSQL
// server when name is a postgres:// URL, else the SQLite file at path
// name (created if needed). The database holds mail, outbox rows and job
// history: a SQLite file is made 0600, and an existing one (and its -wal
// and -shm files) open to others is closed to them.
func Open(name string) (*Store, error) { return openSteps(name, migrations) }

// openSteps opens a database with its schema brought up to steps.
func openSteps(name string, steps []step) (*Store, error) {
	if IsPostgres(name) {
		return openPostgres(name, steps)
	}
	return openSQLite(name, steps)
}

func openSQLite(path string, steps []step) (*Store, error) {
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
	s := &Store{db: db, r: runner{q: db, d: sqliteDialect}}
	if err := s.migrate(context.Background(), steps); err != nil {
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

func openPostgres(dsn string, steps []step) (*Store, error) {
	where := redact(dsn)
	db, err := sql.Open("pgx", dsn)
	if err != nil {
		return nil, fmt.Errorf("opening store %s: %w", where, err)
	}
	s := &Store{db: db, r: runner{q: db, d: pgDialect}}
	if err := s.migrate(context.Background(), steps); err != nil {
		db.Close()
		return nil, fmt.Errorf("opening store %s: %w", where, err)
	}
	return s, nil
}

// redact is a PostgreSQL URL fit for a log: its host and database, no
// user or password.
func redact(dsn string) string {
	u, err := url.Parse(dsn)
	if err != nil {
		return "postgres://(unparsable URL)"
	}
	return u.Scheme + "://" + u.Host + u.Path
}

// Engine is "sqlite" or "postgres".
func (s *Store) Engine() string { return s.r.d.name }

// DB is the database, for components that keep their own tables here.
func (s *Store) DB() *sql.DB { return s.db }

// Close closes the database.
func (s *Store) Close() error { return s.db.Close() }

// Version is the number of migrations applied.
func (s *Store) Version(ctx context.Context) (int, error) {
	var v int
	if s.r.d.postgres() {
		err := s.db.QueryRowContext(ctx, "SELECT coalesce(max(version), 0) FROM schema_version").Scan(&v)
		return v, err
	}
	err := s.db.QueryRowContext(ctx, "PRAGMA user_version").Scan(&v)
	return v, err
}

// migrateLock is the PostgreSQL advisory lock that migrations hold, so
// that a coordinator and workers starting at once do not both run a step.
const migrateLock = 0x70617463 // "patc"

func (s *Store) migrate(ctx context.Context, steps []step) error {
	conn, err := s.db.Conn(ctx)
	if err != nil {
		return err
	}
	defer conn.Close()
	d := s.r.d
	// The lock first: BEGIN IMMEDIATE takes SQLite's write lock, the
	// advisory lock serializes PostgreSQL's migrations (DDL is
	// transactional there too, so a failed step leaves nothing).
	lock, readVersion, setVersion := "BEGIN IMMEDIATE", "PRAGMA user_version", "PRAGMA user_version = %d"
	if d.postgres() {
		lock = fmt.Sprintf("BEGIN; SELECT pg_advisory_xact_lock(%d); CREATE TABLE IF NOT EXISTS schema_version (version INTEGER NOT NULL)", migrateLock)
		readVersion = "SELECT coalesce(max(version), 0) FROM schema_version"
		setVersion = "DELETE FROM schema_version; INSERT INTO schema_version (version) VALUES (%d)"
	}
	if _, err := conn.ExecContext(ctx, lock); err != nil {
		conn.ExecContext(ctx, "ROLLBACK")
		return fmt.Errorf("locking for migration: %w", err)
	}
	var version int
	if err := conn.QueryRowContext(ctx, readVersion).Scan(&version); err != nil {
		conn.ExecContext(ctx, "ROLLBACK")
		return fmt.Errorf("reading schema version: %w", err)
	}
	if version > len(steps) {
		conn.ExecContext(ctx, "ROLLBACK")
		return fmt.Errorf("schema version %d is newer than this patchbot knows (%d)", version, len(steps))
	}
	for i := version; i < len(steps); i++ {
		if _, err := conn.ExecContext(ctx, steps[i].in(d)); err != nil {
			conn.ExecContext(ctx, "ROLLBACK")
			return fmt.Errorf("migration %d: %w", i+1, err)
		}
	}
	if _, err := conn.ExecContext(ctx, fmt.Sprintf(setVersion, len(steps))); err != nil {
		conn.ExecContext(ctx, "ROLLBACK")
		return fmt.Errorf("recording schema version: %w", err)
	}
	if _, err := conn.ExecContext(ctx, "COMMIT"); err != nil {
		return fmt.Errorf("committing migration: %w", err)
	}
	return nil
}
