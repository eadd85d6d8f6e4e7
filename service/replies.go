package service

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/patchbot/patchbot/config"
	"github.com/patchbot/patchbot/mailbox"
	"github.com/patchbot/patchbot/mailbox/outbox"
	"github.com/patchbot/patchbot/reports"
	"github.com/patchbot/patchbot/store"
)

// record logs and counts what became of a mail: queued, there already, or
// dropped (and why, which it returns).
func (q queued) record(ctx context.Context, m *Metrics, log *slog.Logger) (bool, string) {
	if q.drop != nil {
		level, args := slog.LevelInfo, []any{}
		if q.drop.err != nil {
			level, args = slog.LevelError, append(args, "err", q.drop.err)
		}
		log.Log(ctx, level, "mail not sent: "+q.drop.what, args...)
		m.Dropped.WithLabelValues(q.drop.label).Inc()
		return false, q.drop.why
	}
	if q.added {
		m.Replies.Inc()
		log.Info("reply in the outbox", "to", q.to)
	}
	return true, ""
}

// queued is what became of a mail handed to the outbox.
type queued struct {
	added bool       // new in the outbox; false when it was there already
	to    []string   // its recipients, as addressed
	drop  *notQueued // not queued, and why
}

// notQueued says why a mail was not queued: what happened, the metric's
// label, the reason to record.
type notQueued struct {
	what, label, why string
	err              error // nil when nothing went wrong (every recipient opted out)
}

// queueReply is the one way a mail reaches the outbox (from the front
// desk, a worker's collected run, or a run by hand): the rendered mail r
// within tx, from the sender from (an address, or "Name <address>") to its
// To and Cc, threaded under thread, drawn from budget, never twice for one
// Message-ID. A mail that cannot be encoded or addressed, or whose
// recipients all opted out, or too many, is not queued (queued.drop says
// why).
func queueReply(ctx context.Context, tx *store.Tx, ob *outbox.Outbox, from string, r *reports.Reply,
	thread, budget string) (q queued, err error) {
	raw, err := r.Bytes()
	if err == nil {
		q.to, err = r.Recipients()
	}
	if err != nil {
		return queued{drop: &notQueued{"it cannot be encoded or addressed", "unaddressable", err.Error(), err}}, nil
	}
	q.added, err = ob.PutTx(ctx, tx, outbox.Message{MessageID: r.Header.MessageID,
		From: mailbox.AddrOf(from), To: q.to, Raw: raw, ThreadID: thread, Budget: budget})
	switch {
	case errors.Is(err, outbox.ErrNoRecipients):
		q.drop = &notQueued{"every recipient opted out", "opted-out", "every recipient opted out", nil}
	case errors.Is(err, outbox.ErrTooManyRecipients):
		q.drop = &notQueued{"too many recipients", "unaddressable", err.Error(), err}
	case err != nil:
		return q, fmt.Errorf("writing the reply to the outbox: %w", err)
	}
	return q, nil
}

// Deliver queues a run's reply in the state database's outbox, from the
// configured sender to the reply's To and Cc, and sends the outbox at once
// when the config sends (smtp.enabled): how `patchbot run` and `patchbot
// reply` end. added is false when the reply was queued already; sending
// says whether it was sent (or tried) now.
func Deliver(ctx context.Context, cfg config.Config, st *store.Store, r *reports.Reply, log *slog.Logger) (added, sending bool, err error) {
	ob, err := cfg.Outbox(st, log)
	if err != nil {
		return false, false, err
	}
	err = st.Update(ctx, func(tx *store.Tx) error {
		q, err := queueReply(ctx, tx, ob, cfg.Reply.From, r, "", "")
		if q.drop != nil {
			return fmt.Errorf("the reply is not queued: %s", q.drop.why)
		}
		added = q.added
		return err
	})
	if err != nil || ob.Sender == nil {
		return added, false, err
	}
	_, err = ob.Flush(ctx)
	return added, true, err
}
