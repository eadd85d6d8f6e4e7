package service

import (
	"context"
	"time"

	"github.com/patchbot/patchbot/intake"
	"github.com/patchbot/patchbot/mailbox"
	"github.com/patchbot/patchbot/store"
)

// checkIncomplete runs an incomplete series' check: the mail the archive
// has of it is fetched first (the series may be whole now), then the
// front desk decides (intake.Desk.Recheck) and its answer, if any, is
// queued.
func (in *ingester) checkIncomplete(ctx context.Context, j *store.Job, c *intake.Check) error {
	in.fetchMissing(ctx, j.Source, c)
	return in.store.Update(ctx, func(tx *store.Tx) error {
		known, desk := intake.View{Tx: tx, Parsed: in.parsed}, in.cfg.Desk()
		dec, err := desk.Recheck(ctx, known, c, desk.ReplyID(j.ID, j.Dedupe), time.Now())
		if err != nil {
			return err
		}
		_, _, err = in.apply(ctx, tx, dec)
		return err
	})
}

// fetchMissing asks the source an incomplete series came from for the
// mails it still lacks, when the source can fetch by Message-ID (a lore
// archive), before its author is told they never came. Each mail found
// is ingested as if read (a completed series is queued then), leaving
// the source's cursor alone: when the source reaches the mail, it is
// known. A failure is logged; the check goes on with what is kept.
func (in *ingester) fetchMissing(ctx context.Context, source string, c *intake.Check) {
	f, ok := in.sources[source].(mailbox.Fetcher)
	if !ok {
		return
	}
	log := in.log.With("source", source, "title", c.Series.Title, "version", c.Series.Version)
	var kept []intake.Kept
	err := in.store.Update(ctx, func(tx *store.Tx) (err error) {
		kept, err = intake.View{Tx: tx, Parsed: in.parsed}.KeptMail(ctx, c.Series.ThreadID)
		return err
	})
	if err != nil {
		log.Error("reading the thread of an incomplete series", "err", err)
		return
	}
	var msgs []*mailbox.Message
	for _, k := range kept {
		msgs = append(msgs, k.Message)
	}
	for _, s := range mailbox.Assemble(msgs) {
		if !c.Series.Is(s) || s.Complete {
			continue
		}
		n := 0
		err := f.FetchMissing(ctx, s, func(m *mailbox.Message) error {
			n++
			return in.ingest(ctx, source, m, fetchedCursor)
		})
		if err != nil {
			log.Warn("fetching the missing mail of a series from the archive", "err", err)
		}
		log.Info("asked the archive for the mail an incomplete series lacks", "missing", s.Missing, "fetched", n)
	}
}
