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
// config's sender, drawn from budget ("" or store.BudgetUnverified),
// and counts and logs it. A mail that cannot be
// addressed (or whose recipients all opted out) is dropped and logged: it
// would be the same on every retry.
func putReply(ctx context.Context, tx *store.Tx, ob *outbox.Outbox, cfg Config, m *Metrics, log *slog.Logger,
	r *reports.Reply, thread, budget string) (bool, string, error) {
	q, err := queueReply(ctx, tx, ob, cfg.Reply.From, r, thread, budget)
	if err != nil {
		return false, "", err
	}
	ok, why := q.record(ctx, m, log.With("message_id", r.Header.MessageID))
	return ok, why, nil
}

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
	added bool     // new in the outbox; false when it was there already
	to    []string // its recipients, as addressed
	drop  *dropped // not queued, and why
}

// dropped says why a mail was not queued: what happened, the metric's
// label, the reason to record.
type dropped struct {
	what, label, why string
	err              error // nil when nothing went wrong (every recipient opted out)
}

// queueReply puts a rendered mail in ob's outbox within tx, from the
// sender from (an address, or "Name <address>") to its To and Cc,
// threaded under thread, drawn from budget. A mail that cannot be encoded
// or addressed is not queued (queued.drop says why); the rest is
// queueMail's.
func queueReply(ctx context.Context, tx *store.Tx, ob *outbox.Outbox, from string, r *reports.Reply,
	thread, budget string) (queued, error) {
	raw, err := r.Bytes()
	var to []string
	if err == nil {
		to, err = r.Recipients()
	}
	if err != nil {
		return queued{drop: &dropped{"it cannot be encoded or addressed", "unaddressable", err.Error(), err}}, nil
	}
	return queueMail(ctx, tx, ob, outbox.Message{MessageID: r.Header.MessageID,
		From: mailbox.AddrOf(from), To: to, Raw: raw, ThreadID: thread, Budget: budget})
}

// queueMail is the one way a mail reaches the outbox, from the daemon, a
// worker's collected run or a command: within tx, never twice for one
// Message-ID; a mail whose recipients all opted out, or too many, is not
// queued (queued.drop says why).
func queueMail(ctx context.Context, tx *store.Tx, ob *outbox.Outbox, msg outbox.Message) (q queued, err error) {
	q.to = msg.To
	q.added, err = ob.PutTx(ctx, tx, msg)
	switch {
	case errors.Is(err, outbox.ErrNoRecipients):
		q.drop = &dropped{"every recipient opted out", "opted-out", "every recipient opted out", nil}
	case errors.Is(err, outbox.ErrTooManyRecipients):
		q.drop = &dropped{"too many recipients", "unaddressable", err.Error(), err}
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
func Deliver(ctx context.Context, cfg Config, st *store.Store, r *reports.Reply, log *slog.Logger) (added, sending bool, err error) {
	ob, err := NewOutbox(cfg, st, log)
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

// checkIncomplete runs an incomplete-series job: nothing to say when the
// series was completed meanwhile (its own job tests it), else the answer,
// to the author alone, within the quotas.
func (d *Daemon) checkIncomplete(ctx context.Context, j *store.Job, req *Request) error {
	c := req.Incomplete
	// What the archive shows is fetched first: the series may be whole.
	d.fetchMissing(ctx, j.Source, c)
	return d.Store.Update(ctx, func(tx *store.Tx) error {
		in := &ingest{d: d, tx: tx, thread: c.ThreadID, now: time.Now(), log: d.Log.With("job", j.ID)}
		view, err := in.threadSeries(ctx, "", false)
		if err != nil {
			return err
		}
		for _, s := range view.series {
			if s.Title != c.Title || s.Version != c.Version || mailbox.AddrOf(s.Author) != c.Author ||
				c.Identity != "" && s.Identity.Key() != c.Identity {
				continue
			}
			if s.Complete {
				in.log.Info("series completed while waiting; its own job tests it", "series", s.Subject)
				return nil
			}
			missing := make([]string, len(s.Missing))
			for i, m := range s.Missing {
				missing[i] = fmt.Sprintf("%d/%d", m, s.Total)
			}
			// An unverified author may be anyone's name: the answer comes
			// from the unverified budget.
			sent, why, err := in.answer(ctx, reports.Answer{Kind: reports.AnswerIncomplete, Thread: req.Thread,
				MessageID: jobReplyID(d.Config, j), Missing: missing, Waited: humanDuration(d.Config.IncompleteAfter), Reason: s.Reason,
				Stranger: c.Unverified})
			if err == nil && !sent {
				in.log.Info("incomplete-series answer not sent", "why", why)
			}
			return err
		}
		return nil
	})
}

// humanDuration writes 6h0m0s as "6 hours" and 90m as "1h30m0s".
func humanDuration(d time.Duration) string {
	switch {
	case d%time.Hour == 0 && d > time.Hour:
		return fmt.Sprintf("%d hours", d/time.Hour)
	case d == time.Hour:
		return "an hour"
	case d%time.Minute == 0 && d < time.Hour:
		return fmt.Sprintf("%d minutes", d/time.Minute)
	}
	return d.String()
}

// threadRoot is the Message-ID that starts a reply's thread: the first of
// its References, else the mail it answers.
func threadRoot(t reports.Thread) string {
	if len(t.References) > 0 {
		return strings.Trim(t.References[0], "<> ")
	}
	return strings.Trim(t.MessageID, "<> ")
}

// answer puts a short answer in the outbox, inside the mail's
// transaction, if the quotas allow one more mail and its one recipient
// has not opted out. It says whether it did, and why not.
func (in *ingest) answer(ctx context.Context, a reports.Answer) (bool, string, error) {
	d := in.d
	if ok, why, err := d.mayMail(ctx, in.tx, in.thread, a.Stranger, in.now); err != nil || !ok {
		if err == nil {
			d.Metrics.Dropped.WithLabelValues("quota").Inc()
		}
		return false, why, err
	}
	if out, err := in.optedOut(ctx, a.Thread.Author); err != nil || out {
		return false, "the asker opted out", err
	}
	ok, why, err := d.putAnswer(ctx, in.tx, a, in.thread)
	if ok {
		in.answers++
	}
	return ok, why, err
}
