package store

import (
	"context"
	"database/sql"
	"fmt"
)

// queryAll runs query and makes one value of each row with scan: every
// list the store returns. what names the list in an error.
func queryAll[T any](ctx context.Context, r runner, what string, scan func(*sql.Rows) (T, error),
	query string, args ...any) ([]T, error) {
	rows, err := r.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	defer rows.Close()
	var out []T
	for rows.Next() {
		v, err := scan(rows)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", what, err)
		}
		out = append(out, v)
	}
	return out, rows.Err()
}

// countByState counts the rows of a table (jobs, outbox) by their state,
// for /metrics.
func countByState[S ~string](ctx context.Context, r runner, table string) (map[S]int, error) {
	type count struct {
		state S
		n     int
	}
	counts, err := queryAll(ctx, r, "counting "+table, func(rows *sql.Rows) (c count, err error) {
		var st string
		err = rows.Scan(&st, &c.n)
		c.state = S(st)
		return c, err
	}, `SELECT state, count(*) FROM `+table+` GROUP BY state`)
	out := map[S]int{}
	for _, c := range counts {
		out[c.state] = c.n
	}
	return out, err
}
