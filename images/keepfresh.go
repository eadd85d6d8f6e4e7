package images

import (
	"context"
	"log/slog"
	"time"
)

// KeepFresh keeps the configured trees fresh until ctx ends: the stale
// ones at once, then every tree each fetch_every (nothing when no tree is
// configured or fetch_every is 0). A failure is logged; the next round
// tries again, and a job whose tree is stale fetches it itself.
func (t *Trees) KeepFresh(ctx context.Context, log *slog.Logger) {
	if len(t.Config.List) == 0 || t.Config.FetchEvery <= 0 {
		return
	}
	names := t.Stale(time.Now())
	for ctx.Err() == nil {
		if len(names) > 0 {
			if err := t.Fetch(ctx, names...); err != nil && ctx.Err() == nil {
				log.Warn("fetching trees", "err", err)
			}
		}
		select {
		case <-ctx.Done():
		case <-time.After(t.Config.FetchEvery):
		}
		names = names[:0]
		for _, tr := range t.Config.List {
			names = append(names, tr.Name)
		}
	}
}
