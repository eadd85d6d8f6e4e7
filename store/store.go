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
	"errors"
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
		-- dedupe makes a job unique: a job whose key is queued already
		-- is not queued again. The keys' forms are the front desk's
		-- (intake.Dedupe).
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
	// 7: who sent it, as verified. A mail keeps its attestation (the DKIM
	// signatures patchbot checked, JSON), so that a thread assembled again
	// later keys its series by verified senders without asking DNS again.
	// A command records whether its sender was verified, and an outbox
	// row the budget it was drawn from ("unverified" for an answer to an
	// unverified sender, "" otherwise), so that strangers' mail is counted
	// apart and never uses up what verified senders may have. An opt-out
	// records whether its "stop" was verified: one in a forged mail stops
	// mail to the address, not the testing of its owner's verified series.
	// Rows logged before count as verified: nobody gains by the upgrade.
	{sql: `
	ALTER TABLE messages ADD COLUMN attestation TEXT NOT NULL DEFAULT '';
	ALTER TABLE commands ADD COLUMN verified INTEGER NOT NULL DEFAULT 1;
	ALTER TABLE optouts ADD COLUMN verified INTEGER NOT NULL DEFAULT 1;
	ALTER TABLE outbox ADD COLUMN budget TEXT NOT NULL DEFAULT '';
	CREATE INDEX outbox_budget ON outbox(budget, created);
	CREATE INDEX commands_verified ON commands(sender, verified, at);`},
	// 8: least privilege for a fleet's workers. A worker reports its
	// job's reply in job_replies, beside the run's files, and the
	// coordinator checks it and puts it in the outbox: workers no longer
	// write the outbox. On PostgreSQL, workers connect as login roles
	// that are members of patchbot_worker (docs/fleet.md), which may
	// claim, renew and end jobs, and report runs and replies, and nothing
	// else; row-level security keeps each to its own rows (the login
	// role's name is the worker's name). The coordinator's role owns
	// the schema and applies this; patchbot_worker is made here when that
	// role may make roles, else a superuser makes it first.
	{sql: replyStep, postgres: translate(replyStep) + workerRoleStep},
	// 9: base kernels' rounds, kept so that the next series on the same
	// base, config, suite, profile, VM shape and host reuses them
	// (suites/invm's Reuse): one suites.Result as JSON per key. A fleet's
	// workers read and write them (each worker's key holds its host).
	{sql: baseRoundsStep, postgres: translate(baseRoundsStep) + `
	GRANT SELECT, INSERT, UPDATE ON base_rounds TO patchbot_worker;`},
	// 10: a worker is a stranger to the coordinator. Base kernels' rounds
	// are kept by who saved them; on PostgreSQL a worker's role loses
	// every table grant and row policy, and does what a worker does
	// through functions that check its name, its hold on the job and the
	// sizes of what it writes (holder.go).
	{sql: ownedBaseRoundsStep, postgres: translate(ownedBaseRoundsStep) + holderStep},
	// 11: mail whose ingest failed. A try that ended in an error (not a
	// death) is counted apart with its error, so that a mail that fails
	// every time is set aside with the reason, and its source reads on.
	{sql: `
	ALTER TABLE ingests ADD COLUMN failures INTEGER NOT NULL DEFAULT 0;
	ALTER TABLE ingests ADD COLUMN last_error TEXT NOT NULL DEFAULT '';`},
}

const baseRoundsStep = `
	CREATE TABLE base_rounds (
		key    TEXT PRIMARY KEY,
		result BLOB NOT NULL,
		saved  TEXT NOT NULL
	);`

const replyStep = `
	CREATE TABLE job_replies (
		job_id     BIGINT PRIMARY KEY,
		message_id TEXT NOT NULL,
		recipients TEXT NOT NULL, -- JSON array of addresses
		raw        BLOB NOT NULL
	);`

// WorkerRole is the PostgreSQL role whose members are a fleet's workers.
const WorkerRole = "patchbot_worker"

// workerRoleStep grants patchbot_worker what a worker does, and no more:
//
//   - jobs: read the queued and running jobs (a claim ranks them) and its
//     own; update a queued job (claim it) or a job it runs (renew, stage,
//     end, give back), only the columns a worker changes, and only so
//     that the job stays its own or goes back to the queue unowned;
//   - job_suites: read; served: the claims' fairness record;
//   - workers: its own row;
//   - run_files, job_replies: a finished job of its own;
//   - schema_version: read (a worker never migrates).
//
// Nothing of the outbox, the mail, the commands, the cursors or the
// opt-outs. The schema's owner bypasses row-level security.
const workerRoleStep = `
	DO $$
	BEGIN
		IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'patchbot_worker') THEN
			IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = current_user AND (rolsuper OR rolcreaterole)) THEN
				RAISE EXCEPTION 'the role patchbot_worker does not exist, and % may not create it: as a superuser, run CREATE ROLE patchbot_worker NOLOGIN (docs/fleet.md)', current_user;
			END IF;
			BEGIN
				CREATE ROLE patchbot_worker NOLOGIN;
			EXCEPTION WHEN duplicate_object OR unique_violation THEN
				NULL; -- made meanwhile, for another database of the cluster
			END;
		END IF;
	END $$;
	GRANT USAGE ON SCHEMA public TO patchbot_worker;
	GRANT SELECT ON schema_version, jobs, job_suites TO patchbot_worker;
	GRANT UPDATE (state, stage, blame, error, attempts, crashes, not_before, run_dir, owner, lease_until, started, updated)
		ON jobs TO patchbot_worker;
	GRANT SELECT, INSERT, UPDATE ON served, workers TO patchbot_worker;
	GRANT SELECT, INSERT, DELETE ON run_files, job_replies TO patchbot_worker;
	ALTER TABLE jobs ENABLE ROW LEVEL SECURITY;
	CREATE POLICY worker_reads ON jobs FOR SELECT TO patchbot_worker
		USING (state IN ('queued', 'running') OR owner = current_user);
	CREATE POLICY worker_writes ON jobs FOR UPDATE TO patchbot_worker
		USING (state = 'queued' OR (state = 'running' AND owner = current_user))
		WITH CHECK (owner = current_user OR (state = 'queued' AND owner = ''));
	ALTER TABLE workers ENABLE ROW LEVEL SECURITY;
	CREATE POLICY worker_own ON workers TO patchbot_worker
		USING (name = current_user) WITH CHECK (name = current_user);
	ALTER TABLE run_files ENABLE ROW LEVEL SECURITY;
	CREATE POLICY worker_own ON run_files TO patchbot_worker
		USING (job_id IN (SELECT id FROM jobs WHERE owner = current_user))
		WITH CHECK (job_id IN (SELECT id FROM jobs WHERE owner = current_user AND state = 'done'));
	ALTER TABLE job_replies ENABLE ROW LEVEL SECURITY;
	CREATE POLICY worker_own ON job_replies TO patchbot_worker
		USING (job_id IN (SELECT id FROM jobs WHERE owner = current_user))
		WITH CHECK (job_id IN (SELECT id FROM jobs WHERE owner = current_user AND state = 'done'));`

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
	// worker: the connection's role is one of a fleet's workers
	// (OpenWorker), which act on the database's clock alone.
	worker bool
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

// ErrSchema means a worker found the database's schema at another version
// than its own: the coordinator migrates, and is upgraded first.
var ErrSchema = errors.New("the database's schema is not this patchbot's")

// OpenWorker opens the database as a fleet's worker does: on PostgreSQL
// it never migrates (a worker's role may not, and the coordinator owns
// the schema) and fails with ErrSchema unless the schema is exactly this
// patchbot's. A SQLite file is opened as Open does.
func OpenWorker(name string) (*Store, error) {
	if !IsPostgres(name) {
		return Open(name)
	}
	where := redact(name)
	db, err := sql.Open("pgx", name)
	if err != nil {
		return nil, fmt.Errorf("opening store %s: %w", where, err)
	}
	s := &Store{db: db, r: runner{q: db, d: pgDialect}}
	v, err := s.Version(context.Background())
	if err != nil {
		db.Close()
		return nil, fmt.Errorf("opening store %s: reading the schema's version (has the coordinator started?): %w", where, err)
	}
	if v != len(migrations) {
		db.Close()
		if v < len(migrations) {
			return nil, fmt.Errorf("opening store %s: schema version %d, this worker needs %d: start (or upgrade) the coordinator first: %w",
				where, v, len(migrations), ErrSchema)
		}
		return nil, fmt.Errorf("opening store %s: schema version %d is newer than this worker knows (%d): upgrade the worker: %w",
			where, v, len(migrations), ErrSchema)
	}
	if _, s.worker, err = s.Role(context.Background()); err != nil {
		db.Close()
		return nil, fmt.Errorf("opening store %s: %w", where, err)
	}
	return s, nil
}

// Role is whom the store's connection is as the database sees it: its
// role's name, and whether that role is one of a fleet's workers (a member
// of WorkerRole, restricted to its own rows). On SQLite, "" and false.
func (s *Store) Role(ctx context.Context) (name string, worker bool, err error) {
	if !s.r.d.postgres() {
		return "", false, nil
	}
	// A superuser counts as a member of every role, and bypasses
	// row-level security: not a restricted worker.
	err = s.r.QueryRowContext(ctx, `SELECT current_user,
		coalesce((SELECT pg_has_role(current_user, oid, 'MEMBER') FROM pg_roles WHERE rolname = ?), false)
		AND NOT (SELECT rolsuper OR rolbypassrls FROM pg_roles WHERE rolname = current_user)`,
		WorkerRole).Scan(&name, &worker)
	if err != nil {
		return "", false, fmt.Errorf("reading the database role: %w", err)
	}
	return name, worker, nil
}

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
	return migrated(db, sqliteDialect, steps, path)
}

// migrated is the store over an open database, its schema brought up to
// date; the database is closed when that fails.
func migrated(db *sql.DB, d *dialect, steps []step, where string) (*Store, error) {
	s := &Store{db: db, r: runner{q: db, d: d}}
	if err := s.migrate(context.Background(), steps); err != nil {
		db.Close()
		return nil, fmt.Errorf("opening store %s: %w", where, err)
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
	return migrated(db, pgDialect, steps, where)
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
