package service

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/patchbot/patchbot/mailbox"
	"github.com/patchbot/patchbot/store"
	"github.com/patchbot/patchbot/web"
)

// NewDashboard is the dashboard of a config's state: its runs, the
// store's queue, the form (when the config names a token file) feeding
// q, and progress from the daemon when there is one (nil otherwise).
func NewDashboard(cfg Config, st *store.Store, q web.Queue, d *Daemon, log *slog.Logger) (http.Handler, error) {
	o := web.Options{Store: st, StateDir: cfg.StateDir, BaseURL: cfg.Dashboard.BaseURL, LoreURL: cfg.Dashboard.LoreURL,
		LoreHosts: cfg.Dashboard.LoreHosts, MaxUpload: int64(cfg.Dashboard.MaxUploadMiB) << 20, Log: log}
	if cfg.Dashboard.TokenFile != "" {
		tok, err := mailbox.ReadSecret(cfg.Dashboard.TokenFile)
		if err != nil {
			return nil, fmt.Errorf("dashboard token: %w", err)
		}
		if len(tok) < 16 {
			return nil, fmt.Errorf("dashboard token in %s is shorter than 16 characters", cfg.Dashboard.TokenFile)
		}
		o.Token, o.Queue = tok, q
	}
	if d != nil {
		o.Progress = d.progressOf
	}
	if st != nil {
		o.Workers = func() []web.WorkerStatus {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			now := time.Now()
			at, err := st.Now(ctx)
			var ws []web.WorkerStatus
			if err == nil {
				ws, err = WorkerStatuses(ctx, st, cfg.Fleet.Lease, at, now)
			}
			if err != nil {
				log.Warn("dashboard: listing workers", "err", err)
				return []web.WorkerStatus{}
			}
			return ws
		}
	}
	return web.New(o)
}

// Submitter queues the runs asked for on the dashboard's form: the same
// queue as mail and email commands. A dashboard run's reply is kept with
// the run and shown on its page, and mailed to nobody: the person with the
// token is not the series' author.
type Submitter struct {
	Config Config
	Store  *store.Store
	// Wake, if set, tells the worker a job is waiting.
	Wake func()
}

var _ web.Queue = (*Submitter)(nil)

// Submit reads the series a submission names, chooses the version to test
// as `patchbot run` does, and queues it.
func (s *Submitter) Submit(ctx context.Context, sub web.Submission) (int64, error) {
	var sc mailbox.SourceConfig
	var msgs []*mailbox.Message
	switch {
	case len(sub.Mbox) > 0:
		err := mailbox.ReadMbox(bytes.NewReader(sub.Mbox), func(raw []byte, _ int64) error {
			if m, err := mailbox.ParseBytes(raw); err == nil {
				msgs = append(msgs, m)
			}
			return nil
		})
		if err != nil {
			return 0, fmt.Errorf("reading the uploaded mbox: %v: %w", err, web.ErrRefused)
		}
	case sub.LoreURL != "":
		sc.Lore = sub.LoreURL
	case sub.MessageID != "":
		list := s.Config.Dashboard.LoreURL
		if list == "" {
			list = "https://lore.kernel.org/all/"
		}
		sc.Lore = strings.TrimSuffix(list, "/") + "/" + url.PathEscape(strings.Trim(sub.MessageID, "<> ")) + "/"
	default:
		return 0, fmt.Errorf("the submission names no series: %w", web.ErrRefused)
	}
	if sc.Lore != "" {
		src, err := mailbox.Open(sc, slog.Default())
		if err != nil {
			return 0, fmt.Errorf("%v: %w", err, web.ErrRefused)
		}
		if msgs, err = mailbox.Collect(ctx, src); err != nil {
			return 0, err // lore did not answer: ours, a 500
		}
	}
	series, _, err := mailbox.Choose(mailbox.AssembleVersions(msgs), 0)
	if err != nil {
		return 0, fmt.Errorf("%v: %w", err, web.ErrRefused)
	}
	req := NewRequest(series, s.Config.Suites, ReplyTarget(series))
	req.Suites = sub.Suites
	if sub.Profile != "" {
		req.Profile = sub.Profile
	}
	req.NoMail = true
	if _, err := req.SuiteNames(); err != nil {
		return 0, fmt.Errorf("%v: %w", err, web.ErrRefused)
	}
	data, err := json.Marshal(req)
	if err != nil {
		return 0, err
	}
	h := sha256.Sum256(data)
	key := fmt.Sprintf("web:%s:%d", hex.EncodeToString(h[:8]), time.Now().UnixNano())
	names, _ := req.SuiteNames()
	who := sub.Submitter
	if who == "" {
		who = "dashboard"
	}
	id, _, err := s.Store.AddJob(ctx, store.Job{Dedupe: key, Trigger: "web", Title: req.Title, Request: data,
		Source: "dashboard", Sender: who, Needs: needsOf(s.Config, names)})
	if err != nil {
		return 0, err
	}
	if s.Wake != nil {
		s.Wake()
	}
	return id, nil
}
