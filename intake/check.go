package intake

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/patchbot/patchbot/reports"
)

// Recheck decides on an incomplete series' check once its wait is over:
// nothing when the series was completed meanwhile (its own job tests it),
// else the answer, to the author alone, within the quotas; an unverified
// author's from the unverified budget, saying nothing the mail said.
// replyID is the answer's Message-ID (the job's own).
func (d *Desk) Recheck(ctx context.Context, known Known, c *Check, replyID string, now time.Time) (*Decision, error) {
	t := &turn{Desk: d, known: known, mail: Mail{Thread: c.Series.ThreadID, At: now}, dec: &Decision{}}
	view, err := t.thread(ctx, "", false)
	if err != nil {
		return nil, err
	}
	for _, s := range view.series {
		if !c.Series.Is(s) {
			continue
		}
		if s.Complete {
			t.note(slog.LevelInfo, "series completed while waiting; its own job tests it", "series", s.Subject)
			return t.dec, nil
		}
		missing := make([]string, len(s.Missing))
		for i, m := range s.Missing {
			missing[i] = fmt.Sprintf("%d/%d", m, s.Total)
		}
		sent, why, err := t.answer(ctx, reports.Answer{Kind: reports.AnswerIncomplete, Thread: c.Thread, MessageID: replyID,
			Missing: missing, Waited: humanDuration(d.IncompleteAfter), Reason: s.Reason, Stranger: c.Series.Unverified})
		if err == nil && !sent {
			t.note(slog.LevelInfo, "incomplete-series answer not sent", "why", why)
		}
		return t.dec, err
	}
	return t.dec, nil
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
