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
	"github.com/patchbot/patchbot/service"
	"github.com/patchbot/patchbot/store"
	"github.com/patchbot/patchbot/web"
)

// dashboard wires the dashboard (package web) of a config's state: its
// runs, the store's queue and workers, the form (when the config names a
// token file) feeding sub, and the live progress of the jobs this process
// runs (nil: none).
func dashboard(cfg config.Config, st *store.Store, sub *service.Submitter,
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
		if sub != nil {
			o.Queue = formQueue{sub: sub, lore: cfg.Dashboard.LoreURL}
		}
	}
	return web.New(o)
}

// formQueue hands the dashboard's form to the daemon's queue.
type formQueue struct {
	sub  *service.Submitter
	lore string // the list a Message-ID is looked up on
}

func (q formQueue) Submit(ctx context.Context, s web.Submission) (int64, error) {
	lore := s.LoreURL
	if s.MessageID != "" {
		lore = mailbox.ThreadURL(q.lore, s.MessageID)
	}
	id, err := q.sub.Submit(ctx, service.Submission{Mbox: s.Mbox, Lore: lore, Suites: s.Suites, Profile: s.Profile, Who: s.Submitter})
	if errors.Is(err, intake.ErrRefused) {
		return 0, refused{err}
	}
	return id, err
}

// refused is a refusal of the queue's, as the dashboard knows one.
type refused struct{ error }

func (r refused) Unwrap() []error { return []error{r.error, web.ErrRefused} }
