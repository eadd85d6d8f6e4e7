package service

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"time"

	"github.com/patchbot/patchbot/intake"
	"github.com/patchbot/patchbot/mailbox"
	"github.com/patchbot/patchbot/reports"
	"github.com/patchbot/patchbot/store"
)

// Ingest keeps one mail and acts on it as the front desk decides
// (intake.Desk.Decide): a complete series that touches the watched paths
// becomes a job, an email command is answered. The mail, the source's
// cursor, and the decision's jobs, answers, opt-outs and commands are
// stored in one transaction: after a kill -9 anywhere, either all of it is
// there or none, and the source reads the mail again. A mail already kept
// (a second source for the same list) only moves this source's cursor.
//
// Only the store's errors are returned (the source then reads the mail
// again later); a mail that patchbot cannot act on is logged and passed,
// and one whose ingest died or failed a few times is set aside, so that
// one bad mail cannot stop a source.
func (d *Daemon) Ingest(ctx context.Context, source string, m *mailbox.Message, cur string) error {
	if d.wake == nil {
		d.defaults()
	}
	d.step(StepIngestRead)
	d.Metrics.Messages.Inc()
	key := intake.KeyOf(m)
	// Counted before acting and forgotten after: a mail the daemon died on
	// twice, or failed on a few times, is set aside with its reason, not
	// read again at every start or poll, and its source reads on.
	tries, err := d.Store.BeginIngest(ctx, key)
	if err != nil {
		return err
	}
	if reason := d.asideReason(tries); reason != "" {
		d.Log.Error("mail set aside: acting on it did not end; it will not be read again",
			"source", source, "message_id", m.MessageID, "reason", reason)
		return d.Store.Update(ctx, func(tx *store.Tx) error {
			if err := tx.SetAside(ctx, key, reason); err != nil {
				return err
			}
			return setCursor(ctx, tx, source, cur)
		})
	}
	// Who sent it, verified before the transaction (DNS is no business
	// of a write lock), and kept with the mail.
	if m.Attestation == nil {
		m.Attestation = d.Verifier.Verify(ctx, m)
	}
	if d.sources[source].Trusted {
		m.Attestation.Source = source
	}
	attestation, err := json.Marshal(m.Attestation)
	if err != nil {
		return err
	}
	var jobs, answers int
	err = d.Store.Update(ctx, func(tx *store.Tx) error {
		jobs, answers = 0, 0
		known := intake.View{Tx: tx, Parsed: d.parsed}
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
			d.Log.Info("an uncertain reply came back on a source: it was delivered", "source", source, "message_id", m.MessageID)
		}
		dec, err := d.desk().Decide(ctx, known, intake.Mail{Message: m, Key: key, Source: source, Thread: thread, At: time.Now()})
		if err != nil {
			return err
		}
		if jobs, answers, err = d.apply(ctx, tx, dec); err != nil {
			return err
		}
		d.step(StepIngestWritten)
		return nil
	})
	if err != nil {
		if ctx.Err() == nil {
			if ferr := d.Store.FailIngest(ctx, key, err.Error()); ferr != nil {
				d.Log.Error("recording a failed ingest", "message_id", m.MessageID, "err", ferr)
			}
		}
		return err
	}
	if err := d.Store.EndIngest(ctx, key); err != nil {
		return err
	}
	d.step(StepIngestCommitted)
	if jobs > 0 {
		d.Wake()
	}
	if answers > 0 {
		d.Outbox.Wake()
	}
	return nil
}

// desk is the front desk with the daemon's config as it stands.
func (d *Daemon) desk() *intake.Desk { return deskOf(d.Config) }

// deskOf is the front desk of a config.
func deskOf(cfg Config) *intake.Desk {
	srcs := map[string]mailbox.SourceConfig{}
	for i, s := range cfg.Sources {
		srcs[SourceName(i, s)] = s
	}
	return &intake.Desk{Config: cfg.Config, Sources: srcs, Reply: cfg.Reply}
}

// findingOf is what the run collected into dir found, read from its
// results by the coordinator itself; "" (the reply goes where it did
// before: to the whole thread) when they cannot be read.
func findingOf(dir string, log *slog.Logger) reports.Finding {
	run, err := reports.LoadRun(dir)
	if err == nil {
		var f reports.Finding
		if f, err = reports.FindingOf(run); err == nil {
			return f
		}
	}
	log.Error("reading what a collected run found", "run_dir", dir, "err", err)
	return ""
}

// apply carries out a front desk's decision within tx: the answers into
// the outbox (a "stop" is confirmed before it takes effect), the
// opt-outs, the jobs into the queue, the commands into their log; it logs the decision's notes and counts its figures, and
// says how many jobs and answers it queued.
func (d *Daemon) apply(ctx context.Context, tx *store.Tx, dec *intake.Decision) (jobs, answers int, err error) {
	for _, n := range dec.Notes {
		d.Log.Log(ctx, n.Level, n.Msg, n.Args...)
	}
	for outcome, n := range dec.Tally.Commands {
		d.Metrics.Commands.WithLabelValues(string(outcome)).Add(float64(n))
	}
	for why, n := range dec.Tally.Dropped {
		d.Metrics.Dropped.WithLabelValues(why).Add(float64(n))
	}
	for _, a := range dec.Answers {
		q, err := queueReply(ctx, tx, d.Outbox, d.Config.Reply.From, a.Reply, a.Thread, a.Budget)
		if err != nil {
			return 0, 0, err
		}
		if ok, _ := q.record(ctx, d.Metrics, d.Log.With("message_id", a.Reply.Header.MessageID)); ok {
			answers++
		}
	}
	for _, o := range dec.OptOuts {
		if _, err := tx.OptOut(ctx, o.Address, o.Reason, o.Verified); err != nil {
			return 0, 0, err
		}
	}
	for _, j := range dec.Jobs {
		row := store.Job{Dedupe: string(j.Dedupe), Kind: store.KindTest, Trigger: j.Trigger, Title: j.Title,
			Source: j.Source, Sender: j.Sender, NotBefore: j.NotBefore}
		var data any = j.Test
		if j.Check != nil {
			row.Kind, data = store.KindCheck, j.Check
		} else {
			row.Needs = needsOf(d.Config, j.Suites)
		}
		if row.Request, err = json.Marshal(data); err != nil {
			return 0, 0, err
		}
		id, added, err := tx.AddJob(ctx, row)
		if err != nil {
			return 0, 0, err
		}
		if added {
			jobs++
			d.Log.Info("job queued", "job", id, "trigger", j.Trigger, "title", j.Title)
		}
	}
	for _, c := range dec.Commands {
		if _, err := tx.LogCommand(ctx, c); err != nil {
			return 0, 0, err
		}
	}
	return jobs, answers, nil
}

// maxIngestFailures is how many tries of a mail may end in an error before
// it is set aside: a few, so that a database that went away for a moment
// sets nothing aside, and one mail that fails every time cannot hold its
// source for longer than a few polls.
const maxIngestFailures = 3

// asideReason says why a mail is set aside instead of acted on again, or
// "": the daemon died while acting on it MaxCrashes times, or acting on
// it failed maxIngestFailures times.
func (d *Daemon) asideReason(tries store.Ingest) string {
	maxDeaths := d.MaxCrashes
	if maxDeaths <= 0 {
		maxDeaths = 2
	}
	switch {
	case tries.Deaths() >= maxDeaths:
		return fmt.Sprintf("the daemon died %d times while acting on this mail", tries.Deaths())
	case tries.Failures >= maxIngestFailures:
		return fmt.Sprintf("acting on this mail failed %d times; the last error: %s", tries.Failures, tries.LastError)
	}
	return ""
}
