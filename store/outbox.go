package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"time"
)

// OutboxState is how far sending a reply got. The rules for moving between
// states are the outbox package's (mailbox/outbox); the store keeps them
// durable and makes each move a compare-and-set on state and owner.
type OutboxState string

const (
	Queued     OutboxState = "queued"
	Sending    OutboxState = "sending"    // claimed by Owner until LeaseUntil; the final "." not yet sent
	Delivering OutboxState = "delivering" // the final "." may have reached the server
	Sent       OutboxState = "sent"
	Failed     OutboxState = "failed" // rejected for good by the server
	// Uncertain: the final "." may have reached the server, and the
	// sender that knew is gone (its lease ran out) or its link broke
	// before the answer. It is never resent on its own: a person checks,
	// or the mail is seen coming back on a watched source (SeenOutbox).
	Uncertain OutboxState = "uncertain"
)

// OutboxStates are all states, for listings and gauges.
var OutboxStates = []OutboxState{Queued, Sending, Delivering, Sent, Failed, Uncertain}

// OutboxMessage is one reply in the outbox.
type OutboxMessage struct {
	ID         int64
	MessageID  string // the mail's Message-ID: one outbox entry per mail
	From       string // envelope sender
	Recipients []string
	Raw        []byte // the whole RFC 5322 message
	ThreadID   string // the thread it answers in, for the per-thread quota ("" for none)
	// Budget is the quota the mail was drawn from: "" (verified senders,
	// job replies) or BudgetUnverified.
	Budget     string
	State      OutboxState
	Attempts   int
	LastError  string
	Owner      string    // who holds the claim ("" when none)
	LeaseUntil time.Time // the claim's end
	NotBefore  time.Time // a retry waits until then
	Created    time.Time
	Updated    time.Time
}

// BudgetUnverified is the budget of answers to unverified senders, counted
// apart from everyone else's.
const BudgetUnverified = "unverified"

// ErrStateChanged means the message is no longer in the state (or held by
// the owner) that a move expected: another sender moved it first.
var ErrStateChanged = errors.New("outbox message changed state meanwhile")

// ErrNoMessage means no outbox message is ready to be sent.
var ErrNoMessage = errors.New("no outbox message ready")

// Enqueue writes m to the outbox as queued. A message whose Message-ID is
// already there is not added again: enqueueing is idempotent, so a job
// re-run after a crash cannot queue its reply twice. It returns the id
// and whether the message was new.
func (s *Store) Enqueue(ctx context.Context, m OutboxMessage) (id int64, added bool, err error) {
	return enqueue(ctx, s.r, m)
}

// Enqueue is Store.Enqueue inside the transaction.
func (t *Tx) Enqueue(ctx context.Context, m OutboxMessage) (id int64, added bool, err error) {
	return enqueue(ctx, t.r, m)
}

func enqueue(ctx context.Context, r runner, m OutboxMessage) (id int64, added bool, err error) {
	if m.MessageID == "" || m.From == "" || len(m.Recipients) == 0 || len(m.Raw) == 0 {
		return 0, false, errors.New("enqueueing reply: Message-ID, sender, recipients and body are required")
	}
	rcpt, err := json.Marshal(m.Recipients)
	if err != nil {
		return 0, false, fmt.Errorf("enqueueing reply: %w", err)
	}
	t := now()
	id, added, err = r.insertID(ctx, `INSERT INTO outbox
		(message_id, sender, recipients, raw, state, thread_id, budget, created, updated)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT(message_id) DO NOTHING`,
		m.MessageID, m.From, string(rcpt), m.Raw, string(Queued), m.ThreadID, m.Budget, t, t)
	if err != nil {
		return 0, false, fmt.Errorf("enqueueing reply %s: %w", m.MessageID, err)
	}
	if added {
		return id, true, nil
	}
	err = r.QueryRowContext(ctx, `SELECT id FROM outbox WHERE message_id = ?`, m.MessageID).Scan(&id)
	if err != nil {
		return 0, false, fmt.Errorf("enqueueing reply %s: %w", m.MessageID, err)
	}
	return id, false, nil
}

// ClaimOutbox gives owner the oldest message that may be sent now: a queued
// one whose retry time has come, or one left in "sending" whose lease ran
// out (its sender died before the final "." and the server delivered
// nothing). It is one UPDATE … RETURNING (its choice locked, and rows
// other senders hold skipped, on PostgreSQL), so two senders never get the
// same message. It counts an attempt; ErrNoMessage when there is nothing to send.
func (s *Store) ClaimOutbox(ctx context.Context, owner string, lease time.Duration, now time.Time) (*OutboxMessage, error) {
	t := fmtTime(now)
	rows, err := s.r.QueryContext(ctx, `UPDATE outbox SET state = ?, owner = ?, lease_until = ?,
		attempts = attempts + 1, updated = ?
		WHERE ((state = ? AND not_before <= ?) OR (state = ? AND lease_until < ?)) AND id = (SELECT id FROM outbox
			WHERE (state = ? AND not_before <= ?) OR (state = ? AND lease_until < ?)
			ORDER BY id LIMIT 1`+s.r.d.skipLocked("outbox")+`)
		RETURNING `+outboxColumns,
		string(Sending), owner, fmtTime(now.Add(lease)), t,
		string(Queued), t, string(Sending), t, string(Queued), t, string(Sending), t)
	if err != nil {
		return nil, fmt.Errorf("claiming an outbox message: %w", err)
	}
	ms, err := scanOutbox(rows)
	if err != nil {
		return nil, fmt.Errorf("claiming an outbox message: %w", err)
	}
	if len(ms) == 0 {
		return nil, ErrNoMessage
	}
	return &ms[0], nil
}

// MoveOutbox moves message id, held by owner, from state from to state to,
// recording errText as its last error and, for a retry, the time before
// which it is not sent again. It fails with ErrStateChanged when the
// message is not in from or not held by owner (its lease ran out and
// another sender has it). Leaving Sending or Delivering ends the claim.
func (s *Store) MoveOutbox(ctx context.Context, id int64, owner string, from, to OutboxState, errText string, notBefore time.Time) error {
	nb := ""
	if !notBefore.IsZero() {
		nb = fmtTime(notBefore)
	}
	newOwner := owner
	if to != Sending && to != Delivering {
		newOwner = ""
	}
	res, err := s.r.ExecContext(ctx, `UPDATE outbox SET state = ?, owner = ?, last_error = ?, not_before = ?,
		updated = ? WHERE id = ? AND state = ? AND owner = ?`,
		string(to), newOwner, errText, nb, fmtTime(time.Now()), id, string(from), owner)
	if err != nil {
		return fmt.Errorf("outbox message %d %s -> %s: %w", id, from, to, err)
	}
	if n, _ := res.RowsAffected(); n != 1 {
		return fmt.Errorf("outbox message %d %s -> %s: %w", id, from, to, ErrStateChanged)
	}
	return nil
}

// OutboxIn lists the messages in the given states, oldest first.
func (s *Store) OutboxIn(ctx context.Context, states ...OutboxState) ([]OutboxMessage, error) {
	if len(states) == 0 {
		return nil, nil
	}
	q := `SELECT ` + outboxColumns + ` FROM outbox WHERE state IN (?` + repeat(",?", len(states)-1) + `) ORDER BY id`
	args := make([]any, len(states))
	for i, st := range states {
		args[i] = string(st)
	}
	rows, err := s.r.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("listing outbox: %w", err)
	}
	return scanOutbox(rows)
}

// OutboxMessageByID returns one outbox message.
func (s *Store) OutboxMessageByID(ctx context.Context, id int64) (*OutboxMessage, error) {
	rows, err := s.r.QueryContext(ctx, `SELECT `+outboxColumns+` FROM outbox WHERE id = ?`, id)
	if err != nil {
		return nil, fmt.Errorf("reading outbox message %d: %w", id, err)
	}
	ms, err := scanOutbox(rows)
	if err != nil {
		return nil, err
	}
	if len(ms) == 0 {
		return nil, fmt.Errorf("outbox message %d: %w", id, sql.ErrNoRows)
	}
	return &ms[0], nil
}

const outboxColumns = `id, message_id, sender, recipients, raw, state, attempts, last_error,
	owner, lease_until, not_before, thread_id, budget, created, updated`

func scanOutbox(rows *sql.Rows) ([]OutboxMessage, error) {
	defer rows.Close()
	var out []OutboxMessage
	for rows.Next() {
		var m OutboxMessage
		var rcpt, state, lease, nb, created, updated string
		if err := rows.Scan(&m.ID, &m.MessageID, &m.From, &rcpt, &m.Raw, &state,
			&m.Attempts, &m.LastError, &m.Owner, &lease, &nb, &m.ThreadID, &m.Budget, &created, &updated); err != nil {
			return nil, fmt.Errorf("reading outbox: %w", err)
		}
		if err := json.Unmarshal([]byte(rcpt), &m.Recipients); err != nil {
			return nil, fmt.Errorf("outbox message %d: recipients: %w", m.ID, err)
		}
		m.State = OutboxState(state)
		m.LeaseUntil = parseTime(lease)
		m.NotBefore = parseTime(nb)
		m.Created = parseTime(created)
		m.Updated = parseTime(updated)
		out = append(out, m)
	}
	return out, rows.Err()
}

func repeat(s string, n int) string {
	out := ""
	for i := 0; i < n; i++ {
		out += s
	}
	return out
}

// OutboxSince counts the mails of one budget ("" or BudgetUnverified)
// queued since a time: in one thread, or in all when threadID is "".
// Quotas are counted here, where every mail patchbot writes goes.
func (t *Tx) OutboxSince(ctx context.Context, threadID, budget string, since time.Time) (int, error) {
	return outboxSince(ctx, t.r, threadID, budget, since)
}

func outboxSince(ctx context.Context, r runner, threadID, budget string, since time.Time) (int, error) {
	query, args := `SELECT count(*) FROM outbox WHERE budget = ? AND created >= ?`, []any{budget, fmtTime(since)}
	if threadID != "" {
		query, args = query+` AND thread_id = ?`, append(args, threadID)
	}
	var n int
	if err := r.QueryRowContext(ctx, query, args...).Scan(&n); err != nil {
		return 0, fmt.Errorf("counting the outbox: %w", err)
	}
	return n, nil
}

// MarkUncertain moves every message left "delivering" by a sender whose
// lease ran out to uncertain, and returns them: each is returned once, so
// that it is reported once. The owner stays, so that a slow sender that
// comes back with the server's answer can still record it.
func (s *Store) MarkUncertain(ctx context.Context, at time.Time) ([]OutboxMessage, error) {
	rows, err := s.r.QueryContext(ctx, `UPDATE outbox SET state = ?, last_error = ?, updated = ?
		WHERE state = ? AND lease_until < ? RETURNING `+outboxColumns,
		string(Uncertain), "the sender died after the final \".\" was asked for", now(),
		string(Delivering), fmtTime(at))
	if err != nil {
		return nil, fmt.Errorf("marking uncertain deliveries: %w", err)
	}
	return scanOutbox(rows)
}

// RecoverOutbox is a sender's first act after a restart under the owner
// name it had before (a coordinator's is stable): a message it left
// "sending" never had its final "." sent and is queued again at once,
// instead of when the dead claim's lease runs out; one it left
// "delivering" may have reached the server, and is uncertain (returned,
// to be reported once, and never resent on its own).
func (s *Store) RecoverOutbox(ctx context.Context, owner string) (requeued int, uncertain []OutboxMessage, err error) {
	err = s.Update(ctx, func(tx *Tx) error {
		res, err := tx.r.ExecContext(ctx, `UPDATE outbox SET state = ?, owner = '', lease_until = '', updated = ?
			WHERE state = ? AND owner = ?`, string(Queued), now(), string(Sending), owner)
		if err != nil {
			return err
		}
		n, _ := res.RowsAffected()
		requeued = int(n)
		rows, err := tx.r.QueryContext(ctx, `UPDATE outbox SET state = ?, last_error = ?, updated = ?
			WHERE state = ? AND owner = ? RETURNING `+outboxColumns,
			string(Uncertain), "the sender died after the final \".\" was asked for", now(), string(Delivering), owner)
		if err != nil {
			return err
		}
		uncertain, err = scanOutbox(rows)
		return err
	})
	if err != nil {
		return 0, nil, fmt.Errorf("recovering the outbox's claims of %s: %w", owner, err)
	}
	return requeued, uncertain, nil
}

// SeenOutbox records that a mail with this Message-ID came back on a
// watched source: if patchbot's delivery of it was uncertain (or still
// delivering), it was delivered. It returns whether a message changed.
func (t *Tx) SeenOutbox(ctx context.Context, messageID string) (bool, error) {
	res, err := t.r.ExecContext(ctx, `UPDATE outbox SET state = ?, last_error = ?, updated = ?
		WHERE message_id = ? AND state IN (?, ?)`,
		string(Sent), "delivery confirmed: seen on a watched source", now(),
		messageID, string(Delivering), string(Uncertain))
	if err != nil {
		return false, fmt.Errorf("confirming delivery of %s: %w", messageID, err)
	}
	n, _ := res.RowsAffected()
	return n == 1, nil
}

// RequeueUncertain queues an uncertain message again, for a person who
// checked that the server never delivered it.
func (s *Store) RequeueUncertain(ctx context.Context, id int64) error {
	res, err := s.r.ExecContext(ctx, `UPDATE outbox SET state = ?, owner = '', not_before = '', last_error = ?, updated = ?
		WHERE id = ? AND state = ?`, string(Queued), "requeued by hand after an uncertain delivery", now(), id, string(Uncertain))
	if err != nil {
		return fmt.Errorf("requeueing outbox message %d: %w", id, err)
	}
	if n, _ := res.RowsAffected(); n != 1 {
		return fmt.Errorf("requeueing outbox message %d: %w", id, ErrStateChanged)
	}
	return nil
}

// OutboxCounts counts the outbox by state, for /metrics.
func (s *Store) OutboxCounts(ctx context.Context) (map[OutboxState]int, error) {
	return countByState[OutboxState](ctx, s.r, "outbox")
}
