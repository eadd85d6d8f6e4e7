package store

import (
	"context"
	"database/sql"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// dialect is what differs between the two engines. Queries are written
// once, for SQLite, with ? placeholders; the few words that differ are
// asked of the dialect, and rebind numbers the placeholders for
// PostgreSQL.
type dialect struct {
	name string // "sqlite" or "postgres"
	// numbered placeholders ($1, $2 …) instead of ?.
	numbered bool
	// insertOrder is the column that orders rows by insertion, for a
	// table without an integer key (SQLite's implicit rowid; a BIGSERIAL
	// column in PostgreSQL).
	insertOrder string
	// skipLocked ends a SELECT that picks a row to claim: PostgreSQL locks
	// the row and skips those other claimers hold, so that concurrent
	// claims neither wait on each other nor take the same row. SQLite has
	// one writer at a time, so the claim's UPDATE alone is atomic.
	skipLocked func(table string) string
}

var (
	sqliteDialect = &dialect{name: "sqlite", insertOrder: "rowid", skipLocked: func(string) string { return "" }}
	pgDialect     = &dialect{name: "postgres", numbered: true, insertOrder: "seq",
		skipLocked: func(table string) string { return " FOR UPDATE OF " + table + " SKIP LOCKED" }}
)

func (d *dialect) postgres() bool { return d == pgDialect }

// pgClock is PostgreSQL's clock as a stored time (timeFormat: microseconds,
// padded to nanoseconds), plus a number of seconds.
const pgClock = `to_char((statement_timestamp() + make_interval(secs => ?)) AT TIME ZONE 'UTC', ` +
	`'YYYY-MM-DD"T"HH24:MI:SS.US"000Z"')`

// at is a stored time in a statement, as SQL and its one argument: at plus
// d, or, when at is zero, the database's clock plus d. A fleet's leases
// and heartbeats are stamped and judged by the database's clock, never by
// a worker's: a host whose clock is minutes off neither loses every job it
// claims nor holds a dead worker's jobs for minutes. SQLite serves one
// host, whose clock is the database's.
func (d *dialect) at(at time.Time, plus time.Duration) (string, any) {
	if at.IsZero() {
		if d.postgres() {
			return pgClock, plus.Seconds()
		}
		at = time.Now()
	}
	return "?", fmtTime(at.Add(plus))
}

// rebind turns ? placeholders into $1, $2 … for PostgreSQL. A ? inside a
// quoted string literal is left alone.
func (d *dialect) rebind(q string) string {
	if !d.numbered || !strings.Contains(q, "?") {
		return q
	}
	var b strings.Builder
	b.Grow(len(q) + 16)
	n, quoted := 0, false
	for i := 0; i < len(q); i++ {
		switch c := q[i]; {
		case c == '\'':
			quoted = !quoted // '' inside a literal toggles twice
			b.WriteByte(c)
		case c == '?' && !quoted:
			n++
			b.WriteByte('$')
			b.WriteString(strconv.Itoa(n))
		default:
			b.WriteByte(c)
		}
	}
	return b.String()
}

var (
	integerKey = regexp.MustCompile(`\bINTEGER PRIMARY KEY\b`)
	blobType   = regexp.MustCompile(`\bBLOB\b`)
)

// translate is the mechanical translation of SQLite DDL to PostgreSQL's:
// an INTEGER PRIMARY KEY (SQLite's rowid alias, assigned on insert) is a
// BIGSERIAL, a BLOB a BYTEA. Everything else the migrations use is
// spelled the same in both.
func translate(ddl string) string {
	return blobType.ReplaceAllString(integerKey.ReplaceAllString(ddl, "BIGSERIAL PRIMARY KEY"), "BYTEA")
}

// querier is what the store's operations run on: the database, or one
// transaction.
type querier interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// runner runs the store's queries on a querier in one dialect, every
// string argument in the form the store keeps (Text).
type runner struct {
	q querier
	d *dialect
}

func (r runner) ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error) {
	return r.q.ExecContext(ctx, r.d.rebind(query), textArgs(args)...)
}

func (r runner) QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error) {
	return r.q.QueryContext(ctx, r.d.rebind(query), textArgs(args)...)
}

func (r runner) QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row {
	return r.q.QueryRowContext(ctx, r.d.rebind(query), textArgs(args)...)
}

// insertID runs an INSERT … ON CONFLICT DO NOTHING RETURNING id (both
// engines have RETURNING; PostgreSQL's driver has no LastInsertId) and
// says whether a row was inserted.
func (r runner) insertID(ctx context.Context, query string, args ...any) (int64, bool, error) {
	var id int64
	err := r.QueryRowContext(ctx, query+" RETURNING id", args...).Scan(&id)
	if err == sql.ErrNoRows {
		return 0, false, nil
	}
	return id, err == nil, err
}
