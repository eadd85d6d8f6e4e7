package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"

	"github.com/patchbot/patchbot/config"
	"github.com/patchbot/patchbot/intake"
	"github.com/patchbot/patchbot/mailbox"
	"github.com/patchbot/patchbot/store"
	"github.com/patchbot/patchbot/web"
)

// dashboard wires the dashboard (package web) of a config's state: its
// runs, the store's queue and workers, the form (when the config names a
// token file and there is a store to queue in; wake, if set, is told of
// each run queued), and the live progress of the jobs this process runs
// (nil: none).
func dashboard(cfg config.Config, st *store.Store, wake func(),
	progress func(jobID int64) (store.Progress, bool), log *slog.Logger) (http.Handler, error) {
	o := web.Options{Store: st, StateDir: cfg.StateDir, BaseURL: cfg.Dashboard.BaseURL, LoreURL: cfg.Dashboard.LoreURL,
		LoreHosts: cfg.Dashboard.LoreHosts, MaxUpload: int64(cfg.Dashboard.MaxUploadMiB) << 20,
		Lease: cfg.Fleet.Lease, Progress: progress, Log: log}
	if cfg.Dashboard.TokenFile != "" {
		tok, err := mailbox.ReadSecret(cfg.Dashboard.TokenFile)
		if err != nil {
			return nil, fmt.Errorf("dashboard token: %w", err)
		}
		if len(tok) < 16 {
			return nil, fmt.Errorf("dashboard token in %s is shorter than 16 characters", cfg.Dashboard.TokenFile)
		}
		o.Token = tok
		if st != nil {
			o.Queue = formQueue{desk: cfg.Desk(), st: st, verify: mailbox.NewVerifier(cfg.DKIM, cfg.Commands.AuthservIDs),
				lore: cfg.Dashboard.LoreURL, wake: wake}
		}
	}
	return web.New(o)
}

// formQueue hands the dashboard's form to the front desk, which queues
// its run in the daemon's queue (intake.Desk.Submit).
type formQueue struct {
	desk   *intake.Desk
	st     *store.Store
	verify *mailbox.Verifier
	lore   string // the list a Message-ID is looked up on
	wake   func()
}

func (q formQueue) Submit(ctx context.Context, s web.Submission) (int64, error) {
	lore := s.LoreURL
	if s.MessageID != "" {
		lore = mailbox.ThreadURL(q.lore, s.MessageID)
	}
	id, err := q.desk.Submit(ctx, q.st, q.verify, intake.Submission{Mbox: s.Mbox, Lore: lore, Suites: s.Suites,
		Profile: s.Profile, Who: s.Submitter})
	if errors.Is(err, intake.ErrRefused) {
		return 0, refused{err}
	}
	if err == nil && q.wake != nil {
		q.wake()
	}
	return id, err
}

// refused is a refusal of the queue's, as the dashboard knows one.
type refused struct{ error }

func (r refused) Unwrap() []error { return []error{r.error, web.ErrRefused} }
