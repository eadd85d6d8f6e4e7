package service

import (
	"context"
	"fmt"
	"time"

	"github.com/patchbot/patchbot/mailbox"
)

// fetchTrees keeps the configured trees fresh until ctx ends: the stale
// ones at start, then every tree each trees.fetch_every. A failure is
// logged; the next round tries again, and a job whose tree is stale
// fetches it itself.
func (d *Daemon) fetchTrees(ctx context.Context) {
	t := d.Pipeline.Trees
	if t == nil || len(t.Config.List) == 0 || t.Config.FetchEvery <= 0 {
		return
	}
	names := t.Stale(time.Now())
	for ctx.Err() == nil {
		if len(names) > 0 {
			if err := t.Fetch(ctx, names...); err != nil && ctx.Err() == nil {
				d.Log.Warn("fetching trees", "err", err)
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

// withOptions applies a test command's base= and patches= to a request
// for series s, or says why they cannot be.
func withOptions(req *Request, c mailbox.Command, s *mailbox.Series) error {
	req.BaseOverride = c.Base
	if c.First == 0 {
		return nil
	}
	if n := len(s.Patches); c.Last > n {
		return fmt.Errorf("patches=%d-%d: the series has %d patch(es)", c.First, c.Last, n)
	}
	req.First, req.Last = c.First, c.Last
	return nil
}
