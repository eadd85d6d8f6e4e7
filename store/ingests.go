package store

import (
	"context"
	"database/sql"
	"fmt"
)

// Ingest is what is known of the tries to act on one mail.
type Ingest struct {
	Attempts int // tries begun, this one included
	// Failures are the tries that ended in an error (FailIngest): the
	// others before this one ended in a death of the process.
	Failures  int
	LastError string // the last failure's error
}

// Deaths are the earlier tries that neither committed nor failed: the
// process died while acting on the mail.
func (i Ingest) Deaths() int { return i.Attempts - 1 - i.Failures }

// BeginIngest counts an attempt to act on a mail and returns what is
// known of its tries, this one included. It commits on its own, before the
// mail is acted on, so that a crash while acting leaves the count behind.
func (s *Store) BeginIngest(ctx context.Context, messageID string) (Ingest, error) {
	var in Ingest
	err := s.r.QueryRowContext(ctx, `INSERT INTO ingests (message_id, attempts, updated) VALUES (?, 1, ?)
		ON CONFLICT(message_id) DO UPDATE SET attempts = ingests.attempts + 1, updated = excluded.updated
		RETURNING attempts, failures, last_error`, messageID, now()).Scan(&in.Attempts, &in.Failures, &in.LastError)
	if err != nil {
		return in, fmt.Errorf("counting the ingest of %s: %w", messageID, err)
	}
	return in, nil
}

// FailIngest records that acting on a mail ended in an error: the try
// begun last is a failure, not a death.
func (s *Store) FailIngest(ctx context.Context, messageID, reason string) error {
	if _, err := s.r.ExecContext(ctx, `UPDATE ingests SET failures = failures + 1, last_error = ?, updated = ?
		WHERE message_id = ?`, reason, now(), messageID); err != nil {
		return fmt.Errorf("recording the failed ingest of %s: %w", messageID, err)
	}
	return nil
}

// StopIngest takes back the try begun last on a mail: the process was
// stopped while acting on it, which is neither a failure nor a death, so
// that a mail the daemon was stopped on, however often, is read again and
// never set aside for it.
func (s *Store) StopIngest(ctx context.Context, messageID string) error {
	if _, err := s.r.ExecContext(ctx, `UPDATE ingests SET attempts = attempts - 1, updated = ?
		WHERE message_id = ? AND aside = 0 AND attempts > failures`, now(), messageID); err != nil {
		return fmt.Errorf("taking back the ingest of %s: %w", messageID, err)
	}
	return nil
}

// EndIngest forgets a mail's count once acting on it committed.
func (s *Store) EndIngest(ctx context.Context, messageID string) error {
	if _, err := s.r.ExecContext(ctx, `DELETE FROM ingests WHERE message_id = ? AND aside = 0`, messageID); err != nil {
		return fmt.Errorf("ending the ingest of %s: %w", messageID, err)
	}
	return nil
}

// SetAside marks a mail the daemon died on, or failed on, as not to be
// acted on; the caller moves its source's cursor past it in the same
// transaction.
func (t *Tx) SetAside(ctx context.Context, messageID, reason string) error {
	if _, err := t.r.ExecContext(ctx, `UPDATE ingests SET aside = 1, reason = ?, updated = ? WHERE message_id = ?`,
		reason, now(), messageID); err != nil {
		return fmt.Errorf("setting %s aside: %w", messageID, err)
	}
	return nil
}

// Aside is a mail set aside and why.
type Aside struct {
	MessageID string
	Attempts  int
	Reason    string
	Updated   string
}

// SetAsideMail lists the mails set aside, for the operator.
func (s *Store) SetAsideMail(ctx context.Context) ([]Aside, error) {
	return queryAll(ctx, s.r, "listing mail set aside", func(rows *sql.Rows) (a Aside, err error) {
		return a, rows.Scan(&a.MessageID, &a.Attempts, &a.Reason, &a.Updated)
	}, `SELECT message_id, attempts, reason, updated FROM ingests WHERE aside = 1 ORDER BY updated`)
}

// ThreadOf is the thread of the first of ids that is a kept mail, in the
// order given (a reply's In-Reply-To first, then its References), or ""
// when none is kept.
func (t *Tx) ThreadOf(ctx context.Context, ids []string) (string, error) {
	for _, id := range ids {
		if id == "" {
			continue
		}
		var th string
		err := t.r.QueryRowContext(ctx, `SELECT thread_id FROM messages WHERE message_id = ?`, id).Scan(&th)
		if err == nil && th != "" {
			return th, nil
		}
	}
	return "", nil
}

// Rehome moves the mails kept under thread from to thread to: a reply
// that came before its parent was kept under the parent's Message-ID.
func (t *Tx) Rehome(ctx context.Context, from, to string) error {
	if from == to || from == "" {
		return nil
	}
	if _, err := t.r.ExecContext(ctx, `UPDATE messages SET thread_id = ? WHERE thread_id = ?`, to, from); err != nil {
		return fmt.Errorf("joining thread %s to %s: %w", from, to, err)
	}
	return nil
}
