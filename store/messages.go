package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
)

// Cursor returns a source's stored position ("" if none).
func (s *Store) Cursor(ctx context.Context, source string) (string, error) {
	var c string
	err := s.r.QueryRowContext(ctx, `SELECT cursor FROM cursors WHERE source = ?`, source).Scan(&c)
	if errors.Is(err, sql.ErrNoRows) {
		return "", nil
	}
	return c, err
}

// SetCursor moves a source's cursor, inside the transaction that acts on
// the mail just before it.
func (t *Tx) SetCursor(ctx context.Context, source, cursor string) error {
	return setCursor(ctx, t.r, source, cursor)
}

func setCursor(ctx context.Context, r runner, source, cursor string) error {
	if _, err := r.ExecContext(ctx, `INSERT INTO cursors (source, cursor, updated) VALUES (?, ?, ?)
		ON CONFLICT(source) DO UPDATE SET cursor = excluded.cursor, updated = excluded.updated`,
		source, cursor, now()); err != nil {
		return fmt.Errorf("saving cursor of %s: %w", source, err)
	}
	return nil
}

// SaveMessage keeps a mail and moves its source's cursor past it, in one
// transaction, so that after a crash the mail is either kept and passed, or
// neither.
func (s *Store) SaveMessage(ctx context.Context, source, cursor, messageID, threadID string, raw []byte) error {
	return s.Update(ctx, func(tx *Tx) error {
		if _, err := tx.SaveMessage(ctx, source, messageID, threadID, raw); err != nil {
			return err
		}
		return tx.SetCursor(ctx, source, cursor)
	})
}

// SaveMessage keeps a mail and says whether it is new: false when a mail
// with its Message-ID was kept before, from this source or another (two
// sources for one list), so that the caller acts on a mail once. A mail
// without a Message-ID is not kept and is never new.
func (t *Tx) SaveMessage(ctx context.Context, source, messageID, threadID string, raw []byte) (bool, error) {
	return saveMessage(ctx, t.r, source, messageID, threadID, raw)
}

func saveMessage(ctx context.Context, r runner, source, messageID, threadID string, raw []byte) (bool, error) {
	if messageID == "" {
		return false, nil
	}
	res, err := r.ExecContext(ctx, `INSERT INTO messages (message_id, source, thread_id, raw, seen)
		VALUES (?, ?, ?, ?, ?) ON CONFLICT(message_id) DO NOTHING`, messageID, source, threadID, raw, now())
	if err != nil {
		return false, fmt.Errorf("saving message %s: %w", messageID, err)
	}
	n, _ := res.RowsAffected()
	return n == 1, nil
}

// StoredMessage is a kept mail and the source it was first read from.
type StoredMessage struct {
	MessageID string
	Source    string
	Raw       []byte
	// Attestation is who sent it as verified when it was kept (the
	// mailbox's Attestation as JSON); empty when not recorded.
	Attestation []byte
}

// SetAttestation records who sent a kept mail, as verified when it came.
func (t *Tx) SetAttestation(ctx context.Context, messageID string, attestation []byte) error {
	if _, err := t.r.ExecContext(ctx, `UPDATE messages SET attestation = ? WHERE message_id = ?`,
		string(attestation), messageID); err != nil {
		return fmt.Errorf("saving the attestation of %s: %w", messageID, err)
	}
	return nil
}

// ThreadMessages returns the raw mails kept for a thread, in the order seen.
func (s *Store) ThreadMessages(ctx context.Context, threadID string) ([][]byte, error) {
	ms, err := threadMessages(ctx, s.r, threadID)
	if err != nil {
		return nil, err
	}
	out := make([][]byte, len(ms))
	for i, m := range ms {
		out[i] = m.Raw
	}
	return out, nil
}

// Thread returns the mails kept for a thread with their sources, in the
// order seen, as the transaction sees them.
func (t *Tx) Thread(ctx context.Context, threadID string) ([]StoredMessage, error) {
	return threadMessages(ctx, t.r, threadID)
}

func threadMessages(ctx context.Context, r runner, threadID string) ([]StoredMessage, error) {
	return queryAll(ctx, r, "reading thread "+threadID, func(rows *sql.Rows) (m StoredMessage, err error) {
		var att string
		if err := rows.Scan(&m.MessageID, &m.Source, &m.Raw, &att); err != nil {
			return m, err
		}
		if att != "" {
			m.Attestation = []byte(att)
		}
		return m, nil
	}, `SELECT message_id, source, raw, attestation FROM messages WHERE thread_id = ? ORDER BY `+r.d.insertOrder, threadID)
}

// HasMessage says whether a mail was seen already.
func (s *Store) HasMessage(ctx context.Context, messageID string) (bool, error) {
	var n int
	err := s.r.QueryRowContext(ctx, `SELECT count(*) FROM messages WHERE message_id = ?`, messageID).Scan(&n)
	return n > 0, err
}
