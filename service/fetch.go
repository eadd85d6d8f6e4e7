package service

import (
	"context"

	"github.com/patchbot/patchbot/intake"
	"github.com/patchbot/patchbot/mailbox"
	"github.com/patchbot/patchbot/store"
)

// fetchedCursor is the cursor Ingest is given for a mail that was fetched
// out of its source's order (a mailbox.Fetcher): it leaves the source's
// cursor where it is. No source's cursor holds a NUL byte.
const fetchedCursor = "\x00fetched"

func setCursor(ctx context.Context, tx *store.Tx, source, cur string) error {
	if cur == fetchedCursor {
		return nil
	}
	return tx.SetCursor(ctx, source, cur)
}

// fetchMissing asks the source an incomplete series came from for the
// mails it still lacks, when the source can fetch by Message-ID (a lore
// archive), before its author is told they never came. Each mail found
// is ingested as if read (a completed series is queued then), leaving
// the source's cursor alone: when the source reaches the mail, it is
// known. A failure is logged; the check goes on with what is kept.
func (d *Daemon) fetchMissing(ctx context.Context, source string, c *intake.Check) {
	f, ok := d.Sources[source].(mailbox.Fetcher)
	if !ok {
		return
	}
	log := d.Log.With("source", source, "title", c.Series.Title, "version", c.Series.Version)
	var kept []intake.Kept
	err := d.Store.Update(ctx, func(tx *store.Tx) (err error) {
		kept, err = intake.View{Tx: tx, Parsed: d.parsed}.KeptMail(ctx, c.Series.ThreadID)
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
			return d.Ingest(ctx, source, m, fetchedCursor)
		})
		if err != nil {
			log.Warn("fetching the missing mail of a series from the archive", "err", err)
		}
		log.Info("asked the archive for the mail an incomplete series lacks", "missing", s.Missing, "fetched", n)
	}
}
