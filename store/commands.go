package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"
)

// CommandOutcome is what came of one email command.
type CommandOutcome string

const (
	CommandAccepted CommandOutcome = "accepted" // a job was queued
	CommandAnswered CommandOutcome = "answered" // help, a malformed or invalid command, no series, stop: answered
	CommandRefused  CommandOutcome = "refused"  // refused, and the refusal answered
	CommandDropped  CommandOutcome = "dropped"  // refused or over a limit, and nothing sent
)

// Command is one email command as logged.
type Command struct {
	Key      string // "<message-id>#<n>": the n-th command of a mail
	Sender   string // bare address
	ThreadID string
	At       time.Time
	Outcome  CommandOutcome
	// Unverified: the sender's address was not proven (no aligned DKIM
	// signature, no trusted source). Such commands are counted apart.
	Unverified bool
}

// LogCommand records an email command; a command seen before is not
// recorded twice. It returns whether it was new.
func (t *Tx) LogCommand(ctx context.Context, c Command) (bool, error) { return logCommand(ctx, t.r, c) }

func logCommand(ctx context.Context, r runner, c Command) (bool, error) {
	res, err := r.ExecContext(ctx, `INSERT INTO commands (message_id, sender, thread_id, at, accepted, outcome, verified)
		VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT(message_id) DO NOTHING`,
		c.Key, c.Sender, c.ThreadID, fmtTime(c.At), boolInt(c.Outcome == CommandAccepted), string(c.Outcome), boolInt(!c.Unverified))
	if err != nil {
		return false, fmt.Errorf("logging command %s: %w", c.Key, err)
	}
	n, _ := res.RowsAffected()
	return n == 1, nil
}

// CommandCounts are a sender's commands since a time.
type CommandCounts struct {
	Counted  int // those that count against the per-sender limit: every one that made a job or a mail
	Refusals int // refusals answered
}

// CommandCounts counts a sender's commands since a time, those of the
// verified sender or those of mail only claiming the address: the two are
// counted apart, so that a stranger writing in someone's name cannot use
// up that person's limit.
func (s *Store) CommandCounts(ctx context.Context, sender string, verified bool, since time.Time) (CommandCounts, error) {
	return commandCounts(ctx, s.r, sender, verified, since)
}

// CommandCounts is Store.CommandCounts inside the transaction.
func (t *Tx) CommandCounts(ctx context.Context, sender string, verified bool, since time.Time) (CommandCounts, error) {
	return commandCounts(ctx, t.r, sender, verified, since)
}

func commandCounts(ctx context.Context, r runner, sender string, verified bool, since time.Time) (CommandCounts, error) {
	var c CommandCounts
	err := r.QueryRowContext(ctx, `SELECT
		coalesce(sum(CASE WHEN outcome IN (?, ?, ?) THEN 1 ELSE 0 END), 0),
		coalesce(sum(CASE WHEN outcome = ? THEN 1 ELSE 0 END), 0)
		FROM commands WHERE sender = ? AND verified = ? AND at >= ?`,
		CommandAccepted, CommandAnswered, CommandRefused, CommandRefused,
		sender, boolInt(verified), fmtTime(since)).Scan(&c.Counted, &c.Refusals)
	if err != nil {
		return c, fmt.Errorf("counting commands of %s: %w", sender, err)
	}
	return c, nil
}

// OptOut records that an address asked never to be mailed again, in a
// mail whose sender was verified or not (a verified "stop" later makes it
// verified). It returns whether the address was new.
func (t *Tx) OptOut(ctx context.Context, address, reason string, verified bool) (bool, error) {
	return optOut(ctx, t.r, address, reason, verified)
}

func optOut(ctx context.Context, r runner, address, reason string, verified bool) (bool, error) {
	res, err := r.ExecContext(ctx, `INSERT INTO optouts (address, reason, at, verified) VALUES (?, ?, ?, ?)
		ON CONFLICT(address) DO NOTHING`, strings.ToLower(address), reason, now(), boolInt(verified))
	if err != nil {
		return false, fmt.Errorf("recording the opt-out of %s: %w", address, err)
	}
	n, _ := res.RowsAffected()
	if n == 0 && verified {
		if _, err := r.ExecContext(ctx, `UPDATE optouts SET verified = 1 WHERE address = ?`, strings.ToLower(address)); err != nil {
			return false, fmt.Errorf("recording the opt-out of %s: %w", address, err)
		}
	}
	return n == 1, nil
}

// OptOutOf says whether an address opted out, and whether any of its
// "stop"s was verified.
func (t *Tx) OptOutOf(ctx context.Context, address string) (out, verified bool, err error) {
	var v int
	err = t.r.QueryRowContext(ctx, `SELECT verified FROM optouts WHERE address = ?`, strings.ToLower(address)).Scan(&v)
	if errors.Is(err, sql.ErrNoRows) {
		return false, false, nil
	}
	if err != nil {
		return false, false, fmt.Errorf("reading the opt-outs: %w", err)
	}
	return true, v == 1, nil
}

// OptedOut says whether an address asked never to be mailed again.
func (s *Store) OptedOut(ctx context.Context, address string) (bool, error) {
	return optedOut(ctx, s.r, address)
}

// OptedOut is Store.OptedOut inside the transaction.
func (t *Tx) OptedOut(ctx context.Context, address string) (bool, error) {
	return optedOut(ctx, t.r, address)
}

func optedOut(ctx context.Context, r runner, address string) (bool, error) {
	var one int
	err := r.QueryRowContext(ctx, `SELECT 1 FROM optouts WHERE address = ?`, strings.ToLower(address)).Scan(&one)
	if errors.Is(err, sql.ErrNoRows) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("reading the opt-outs: %w", err)
	}
	return true, nil
}

// OptIn removes an opt-out, for a person acting on the address owner's
// request.
func (s *Store) OptIn(ctx context.Context, address string) error {
	_, err := s.r.ExecContext(ctx, `DELETE FROM optouts WHERE address = ?`, strings.ToLower(address))
	return err
}
