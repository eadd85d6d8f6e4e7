package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"time"
)

// OutboxState is how far sending a reply got. The states exist so that a
// crash at any point neither loses a reply nor sends it twice:
//
//	queued ──► sending ──► delivering ──► sent
//	   ▲          │
//	   └──────────┘ (a failed attempt, or a crash: the server never
//	                 received the final "." so it delivered nothing)
//
// "delivering" is recorded just before the end of the SMTP DATA: from then
// on the server may have the mail, so a crash leaves it for a person to
// check (Uncertain) rather than sending it again.
type OutboxState string

const (
	Queued     OutboxState = "queued"
	Sending    OutboxState = "sending"
	Delivering OutboxState = "delivering"
	Sent       OutboxState = "sent"
	Failed     OutboxState = "failed" // rejected for good by the server
)

// OutboxMessage is one reply in the outbox.
type OutboxMessage struct {
	ID         int64
	MessageID  string // the mail's Message-ID: one outbox entry per mail
	From       string // envelope sender
	Recipients []string
	Raw        []byte // the whole RFC 5322 message
	State      OutboxState
	Attempts   int
	LastError  string
	Created    time.Time
	Updated    time.Time
}

// ErrStateChanged means another sender moved the message first.
var ErrStateChanged = errors.New("outbox message changed state meanwhile")

// Enqueue writes m to the outbox as queued. A message whose Message-ID is
// already there is not added again: enqueueing is idempotent, so a job
// re-run after a crash cannot queue its reply twice. It returns the id
// and whether the message was new.
func (s *Store) Enqueue(ctx context.Context, m OutboxMessage) (id int64, added bool, err error) {
	if m.MessageID == "" || m.From == "" || len(m.Recipients) == 0 || len(m.Raw) == 0 {
		return 0, false, errors.New("enqueueing reply: Message-ID, sender, recipients and body are required")
	}
	rcpt, err := json.Marshal(m.Recipients)
	if err != nil {
		return 0, false, fmt.Errorf("enqueueing reply: %w", err)
	}
	now := time.Now().UTC().Format(time.RFC3339Nano)
	res, err := s.db.ExecContext(ctx, `INSERT INTO outbox
		(message_id, sender, recipients, raw, state, created, updated)
		VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT(message_id) DO NOTHING`,
		m.MessageID, m.From, string(rcpt), m.Raw, string(Queued), now, now)
	if err != nil {
		return 0, false, fmt.Errorf("enqueueing reply %s: %w", m.MessageID, err)
	}
	if n, _ := res.RowsAffected(); n == 1 {
		id, err = res.LastInsertId()
		return id, true, err
	}
	err = s.db.QueryRowContext(ctx, `SELECT id FROM outbox WHERE message_id = ?`, m.MessageID).Scan(&id)
	if err != nil {
		return 0, false, fmt.Errorf("enqueueing reply %s: %w", m.MessageID, err)
	}
	return id, false, nil
}

// Transition moves message id from state from to state to, and fails with
// ErrStateChanged if it is no longer in from: a compare-and-set, so that two
// senders cannot both claim a message. Moving to Sending counts an attempt;
// errText is recorded as the last error.
func (s *Store) Transition(ctx context.Context, id int64, from, to OutboxState, errText string) error {
	attempt := 0
	if to == Sending {
		attempt = 1
	}
	res, err := s.db.ExecContext(ctx, `UPDATE outbox SET state = ?, attempts = attempts + ?,
		last_error = ?, updated = ? WHERE id = ? AND state = ?`,
		string(to), attempt, errText, time.Now().UTC().Format(time.RFC3339Nano), id, string(from))
	if err != nil {
		return fmt.Errorf("outbox message %d %s -> %s: %w", id, from, to, err)
	}
	if n, _ := res.RowsAffected(); n != 1 {
		return fmt.Errorf("outbox message %d %s -> %s: %w", id, from, to, ErrStateChanged)
	}
	return nil
}

// Pending lists the messages that may be sent: queued ones, and ones left
// in "sending" by a crash (their SMTP transaction never completed).
func (s *Store) Pending(ctx context.Context) ([]OutboxMessage, error) {
	return s.list(ctx, `state IN ('queued', 'sending')`)
}

// Uncertain lists messages that a crash left while the server was
// completing delivery: they may or may not have gone out, and are never
// resent automatically.
func (s *Store) Uncertain(ctx context.Context) ([]OutboxMessage, error) {
	return s.list(ctx, `state = 'delivering'`)
}

// Message returns one outbox message by id.
func (s *Store) Message(ctx context.Context, id int64) (*OutboxMessage, error) {
	ms, err := s.list(ctx, `id = ?`, id)
	if err != nil {
		return nil, err
	}
	if len(ms) == 0 {
		return nil, fmt.Errorf("outbox message %d: %w", id, sql.ErrNoRows)
	}
	return &ms[0], nil
}

func (s *Store) list(ctx context.Context, where string, args ...any) ([]OutboxMessage, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT id, message_id, sender, recipients, raw, state,
		attempts, last_error, created, updated FROM outbox WHERE `+where+` ORDER BY id`, args...)
	if err != nil {
		return nil, fmt.Errorf("listing outbox: %w", err)
	}
	defer rows.Close()
	var out []OutboxMessage
	for rows.Next() {
		var m OutboxMessage
		var rcpt, state, created, updated string
		if err := rows.Scan(&m.ID, &m.MessageID, &m.From, &rcpt, &m.Raw, &state,
			&m.Attempts, &m.LastError, &created, &updated); err != nil {
			return nil, fmt.Errorf("listing outbox: %w", err)
		}
		if err := json.Unmarshal([]byte(rcpt), &m.Recipients); err != nil {
			return nil, fmt.Errorf("outbox message %d: recipients: %w", m.ID, err)
		}
		m.State = OutboxState(state)
		m.Created, _ = time.Parse(time.RFC3339Nano, created)
		m.Updated, _ = time.Parse(time.RFC3339Nano, updated)
		out = append(out, m)
	}
	return out, rows.Err()
}
