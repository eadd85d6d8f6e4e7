package service

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/patchbot/patchbot/mailbox"
	"github.com/patchbot/patchbot/mailbox/outbox"
	"github.com/patchbot/patchbot/reports"
	"github.com/patchbot/patchbot/store"
)

// putAnswer renders an answer and puts it in the outbox within tx. A mail
// that cannot be rendered or addressed is dropped (logged), not an error:
// it would be the same on every retry.
func (d *Daemon) putAnswer(ctx context.Context, tx *store.Tx, a reports.Answer, thread string) (bool, string, error) {
	a.Date = time.Now()
	r, err := reports.RenderAnswer(a, d.Config.Reply)
	if err != nil {
		d.Log.Error("answer not sent: it does not render", "kind", a.Kind, "err", err)
		d.Metrics.Dropped.WithLabelValues("render").Inc()
		return false, "the answer does not render", nil
	}
	budget := ""
	if a.Stranger {
		budget = store.BudgetUnverified
	}
	return putReply(ctx, tx, d.Outbox, d.Config, d.Metrics, d.Log, r, thread, budget)
}

// putReply puts a rendered mail in ob's outbox within tx, from the
// config's sender, drawn from budget ("" or store.BudgetUnverified). A
// mail that cannot be addressed (or whose recipients all opted out) is
// dropped and logged: it would be the same on every retry.
func putReply(ctx context.Context, tx *store.Tx, ob *outbox.Outbox, cfg Config, m *Metrics, log *slog.Logger,
	r *reports.Reply, thread, budget string) (bool, string, error) {
	raw, err := r.Bytes()
	var rcpt []string
	if err == nil {
		rcpt, err = r.Recipients()
	}
	if err != nil {
		log.Error("mail not sent: it cannot be encoded or addressed", "message_id", r.Header.MessageID, "err", err)
		m.Dropped.WithLabelValues("unaddressable").Inc()
		return false, err.Error(), nil
	}
	added, err := ob.PutTx(ctx, tx, outbox.Message{MessageID: r.Header.MessageID,
		From: mailbox.AddrOf(cfg.Reply.From), To: rcpt, Raw: raw, ThreadID: thread, Budget: budget})
	switch {
	case errors.Is(err, outbox.ErrNoRecipients):
		log.Info("mail not sent: every recipient opted out", "message_id", r.Header.MessageID)
		m.Dropped.WithLabelValues("opted-out").Inc()
		return false, "every recipient opted out", nil
	case errors.Is(err, outbox.ErrTooManyRecipients):
		log.Error("mail not sent: too many recipients", "message_id", r.Header.MessageID, "err", err)
		m.Dropped.WithLabelValues("unaddressable").Inc()
		return false, err.Error(), nil
	case err != nil:
		return false, "", fmt.Errorf("writing the reply to the outbox: %w", err)
	}
	if added {
		m.Replies.Inc()
		log.Info("reply in the outbox", "message_id", r.Header.MessageID, "to", rcpt)
	}
	return true, "", nil
}

// jobReplyID is the Message-ID of a job's reply: one per job, whatever run
// of it, on whichever worker, produced the reply.
func jobReplyID(cfg Config, j *store.Job) string {
	return fmt.Sprintf("patchbot-job-%d-%s@%s", j.ID, shortHash(j.Dedupe), domainOf(cfg.Reply.From))
}

func shortHash(s string) string {
	h := sha256.Sum256([]byte(s))
	return hex.EncodeToString(h[:6])
}

func domainOf(from string) string {
	a := mailbox.AddrOf(from)
	if i := strings.LastIndex(a, "@"); i >= 0 {
		return a[i+1:]
	}
	return "patchbot.invalid"
}
