package intake

import (
	"context"
	"log/slog"

	"github.com/patchbot/patchbot/store"
)

// Writer is what applying a decision writes, within the mail's
// transaction (store.Tx).
type Writer interface {
	OptOut(ctx context.Context, address, reason string, verified bool) (bool, error)
	AddJob(ctx context.Context, j store.Job) (int64, bool, error)
	LogCommand(ctx context.Context, c store.Command) (bool, error)
}

var _ Writer = (*store.Tx)(nil)

// Apply carries out a decision through w: the answers first, each handed
// to send (the outbox, which says whether it queued it), so that a "stop"
// is confirmed before it takes effect; then the opt-outs, the jobs (Row),
// and the commands' log. Each job queued anew is noted on the decision. It
// says how many jobs and answers it queued.
func (d *Desk) Apply(ctx context.Context, w Writer, dec *Decision, send func(Answer) (bool, error)) (jobs, answers int, err error) {
	for _, a := range dec.Answers {
		ok, err := send(a)
		if err != nil {
			return 0, 0, err
		}
		if ok {
			answers++
		}
	}
	for _, o := range dec.OptOuts {
		if _, err := w.OptOut(ctx, o.Address, o.Reason, o.Verified); err != nil {
			return 0, 0, err
		}
	}
	for _, j := range dec.Jobs {
		row, err := d.Row(j)
		if err != nil {
			return 0, 0, err
		}
		id, added, err := w.AddJob(ctx, row)
		if err != nil {
			return 0, 0, err
		}
		if added {
			jobs++
			dec.note(slog.LevelInfo, "job queued", "job", id, "trigger", j.Trigger, "title", j.Title)
		}
	}
	for _, c := range dec.Commands {
		if _, err := w.LogCommand(ctx, c); err != nil {
			return 0, 0, err
		}
	}
	return jobs, answers, nil
}
