package service

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"time"

	"github.com/patchbot/patchbot/config"
	"github.com/patchbot/patchbot/intake"
	"github.com/patchbot/patchbot/mailbox"
	"github.com/patchbot/patchbot/mailbox/outbox"
	"github.com/patchbot/patchbot/store"
)

// ingester keeps the mail a source reads and applies what the front desk
// decides about it (intake.Desk.Decide), for the daemon (Daemon.Ingest).
type ingester struct {
	cfg      *config.Config // the daemon's, as it stands
	store    *store.Store
	verifier *mailbox.Verifier
	outbox   *outbox.Outbox
	metrics  *Metrics
	log      *slog.Logger
	sources  map[string]mailbox.Source // for fetching a series' missing mail
	parsed   *intake.ParseCache        // kept mail, parsed once
	// maxDeaths sets a mail aside after the daemon died on it this often.
	maxDeaths int
	step      func(Step)
	woken     func() // jobs were queued
}

// fetchedCursor is the cursor ingest is given for a mail that was fetched
// out of its source's order (a mailbox.Fetcher): it leaves the source's
// cursor where it is. No source's cursor holds a NUL byte.
const fetchedCursor = "\x00fetched"

func setCursor(ctx context.Context, tx *store.Tx, source, cur string) error {
	if cur == fetchedCursor {
		return nil
	}
	return tx.SetCursor(ctx, source, cur)
}

// ingest keeps one mail and acts on it as the front desk decides: the mail,
// the source's cursor, and the decision's answers, opt-outs, jobs and
// commands are stored in one transaction. After a kill -9 anywhere, either
// all of it is there or none, and the source reads the mail again. A mail
// already kept (a second source for the same list) only moves this
// source's cursor.
//
// Only the store's errors are returned (the source then reads the mail
// again later); a mail that patchbot cannot act on is logged and passed,
// and one whose ingest died or failed a few times is set aside, so that
// one bad mail cannot stop a source.
func (in *ingester) ingest(ctx context.Context, source string, m *mailbox.Message, cur string) error {
	in.step(StepIngestRead)
	in.metrics.Messages.Inc()
	key := intake.KeyOf(m)
	// Counted before acting and forgotten after: a mail the daemon died on
	// twice, or failed on a few times, is set aside with its reason, not
	// read again at every start or poll, and its source reads on.
	tries, err := in.store.BeginIngest(ctx, key)
	if err != nil {
		return err
	}
	if reason := in.asideReason(tries); reason != "" {
		in.log.Error("mail set aside: acting on it did not end; it will not be read again",
			"source", source, "message_id", m.MessageID, "reason", reason)
		return in.store.Update(ctx, func(tx *store.Tx) error {
			if err := tx.SetAside(ctx, key, reason); err != nil {
				return err
			}
			return setCursor(ctx, tx, source, cur)
		})
	}
	// Who sent it, verified before the transaction (DNS is no business
	// of a write lock), and kept with the mail.
	if m.Attestation == nil {
		m.Attestation = in.verifier.Verify(ctx, m)
	}
	if in.source(source).Trusted {
		m.Attestation.Source = source
	}
	attestation, err := json.Marshal(m.Attestation)
	if err != nil {
		return err
	}
	var jobs, answers int
	err = in.store.Update(ctx, func(tx *store.Tx) error {
		jobs, answers = 0, 0
		known := intake.View{Tx: tx, Parsed: in.parsed}
		thread, err := intake.ThreadOf(ctx, known, m)
		if err != nil {
			return err
		}
		fresh, err := tx.SaveMessage(ctx, source, key, thread, m.Raw)
		if err != nil {
			return err
		}
		if err := setCursor(ctx, tx, source, cur); err != nil {
			return err
		}
		if !fresh {
			return nil // acted on when it was first kept
		}
		if err := tx.SetAttestation(ctx, key, attestation); err != nil {
			return err
		}
		// Replies that came before this mail were kept under its ID.
		if err := tx.Rehome(ctx, key, thread); err != nil {
			return err
		}
		if ok, err := tx.SeenOutbox(ctx, m.MessageID); err != nil {
			return err
		} else if ok {
			in.log.Info("an uncertain reply came back on a source: it was delivered", "source", source, "message_id", m.MessageID)
		}
		dec, err := in.cfg.Desk().Decide(ctx, known, intake.Mail{Message: m, Key: key, Source: source, Thread: thread, At: time.Now()})
		if err != nil {
			return err
		}
		if jobs, answers, err = in.apply(ctx, tx, dec); err != nil {
			return err
		}
		in.step(StepIngestWritten)
		return nil
	})
	if err != nil {
		if ctx.Err() != nil {
			// A stop, not a failure nor a death: the try is taken back,
			// and the mail read again at the next start.
			in.forget(ctx, in.store.StopIngest, m)
			return err
		}
		if ferr := in.store.FailIngest(ctx, key, err.Error()); ferr != nil {
			in.log.Error("recording a failed ingest", "message_id", m.MessageID, "err", ferr)
		}
		return err
	}
	// Committed: the count is forgotten, a stop meanwhile or not.
	in.forget(ctx, in.store.EndIngest, m)
	if ctx.Err() != nil {
		return ctx.Err()
	}
	in.step(StepIngestCommitted)
	if jobs > 0 {
		in.woken()
	}
	if answers > 0 {
		in.outbox.Wake()
	}
	return nil
}

// forget ends the count of tries of a mail (how: EndIngest, StopIngest)
// even when the daemon is stopping, within a short wait; a count left
// behind only counts one death too many.
func (in *ingester) forget(ctx context.Context, how func(context.Context, string) error, m *mailbox.Message) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if err := how(ctx, intake.KeyOf(m)); err != nil {
		in.log.Warn("the count of tries of a mail is left behind", "message_id", m.MessageID, "err", err)
	}
}

// source is a source's config by the name its cursor is kept under.
func (in *ingester) source(name string) mailbox.SourceConfig { return in.cfg.Desk().Sources[name] }

// apply carries out a front desk's decision within tx (intake.Desk.Apply),
// its answers into the outbox; it logs the decision's notes and counts its
// figures, and says how many jobs and answers it queued.
func (in *ingester) apply(ctx context.Context, tx *store.Tx, dec *intake.Decision) (jobs, answers int, err error) {
	jobs, answers, err = in.cfg.Desk().Apply(ctx, tx, dec, func(a intake.Answer) (bool, error) {
		q, err := queueReply(ctx, tx, in.outbox, in.cfg.Reply.From, a.Reply, a.Thread, a.Budget)
		if err != nil {
			return false, err
		}
		ok, _ := q.record(ctx, in.metrics, in.log.With("message_id", a.Reply.Header.MessageID))
		return ok, nil
	})
	if err != nil {
		return 0, 0, err
	}
	for _, n := range dec.Notes {
		in.log.Log(ctx, n.Level, n.Msg, n.Args...)
	}
	for outcome, n := range dec.Tally.Commands {
		in.metrics.Commands.WithLabelValues(string(outcome)).Add(float64(n))
	}
	for why, n := range dec.Tally.Dropped {
		in.metrics.Dropped.WithLabelValues(why).Add(float64(n))
	}
	return jobs, answers, nil
}

// maxIngestFailures is how many tries of a mail may end in an error before
// it is set aside: a few, so that a database that went away for a moment
// sets nothing aside, and one mail that fails every time cannot hold its
// source for longer than a few polls.
const maxIngestFailures = 3

// asideReason says why a mail is set aside instead of acted on again, or
// "": the daemon died while acting on it maxDeaths times, or acting on it
// failed maxIngestFailures times.
func (in *ingester) asideReason(tries store.Ingest) string {
	switch {
	case tries.Deaths() >= in.maxDeaths:
		return fmt.Sprintf("the daemon died %d times while acting on this mail", tries.Deaths())
	case tries.Failures >= maxIngestFailures:
		return fmt.Sprintf("acting on this mail failed %d times; the last error: %s", tries.Failures, tries.LastError)
	}
	return ""
}
