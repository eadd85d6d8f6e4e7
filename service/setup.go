package service

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"os"
	"path/filepath"

	"github.com/patchbot/patchbot/images"
	"github.com/patchbot/patchbot/mailbox"
	"github.com/patchbot/patchbot/mailbox/outbox"
	"github.com/patchbot/patchbot/mailbox/sender"
	"github.com/patchbot/patchbot/reports"
	"github.com/patchbot/patchbot/reports/publish"
	"github.com/patchbot/patchbot/store"
	"github.com/patchbot/patchbot/suites/invm"
	"github.com/patchbot/patchbot/web"
)

// NewPipeline wires the real stages from a config: images.Kernels for the
// base's choice among the configured trees and the builds, invm.Tester for
// VMs of the configured shape, and the reply options. The caller that has
// a store sets History.
func NewPipeline(cfg Config, progress io.Writer) (*Pipeline, error) {
	b, err := images.DefaultBuilder(progress)
	if err != nil {
		return nil, err
	}
	trees := images.NewTrees(cfg.Trees, b.Cache)
	trees.Progress = progress
	p := &Pipeline{
		Builder:  &images.Kernels{Builder: b, Tree: cfg.Kernel, Trees: trees, Progress: progress},
		Trees:    trees,
		Tester:   &invm.Tester{VM: cfg.VM},
		Reply:    cfg.Reply,
		Progress: progress,
		VM:       cfg.VM,
		Tree:     cfg.Kernel,
	}
	if base := cfg.Dashboard.BaseURL; base != "" {
		p.ResultsURL = func(runDir string) string { return web.RunURL(base, filepath.Base(runDir)) }
	}
	if cfg.Publish != nil {
		pub, err := publish.New(*cfg.Publish, nil)
		if err != nil {
			return nil, err
		}
		p.Publish = func(ctx context.Context, runDir, title string) (string, error) {
			name := filepath.Base(runDir)
			return pub.Publish(ctx, runDir, name, "run "+name+": "+title)
		}
	}
	return p, nil
}

// UseStore gives the pipeline what it keeps across runs in the store: the
// earlier versions' runs (History) and the base kernels' rounds that the
// tester reuses for the next series on the same base (invm.Bases).
func (p *Pipeline) UseStore(st *store.Store) {
	p.History = st
	if t, ok := p.Tester.(*invm.Tester); ok {
		t.Bases = st
	}
}

// OpenStore opens the state database: the config's PostgreSQL server when
// it names one (with the password from its file), else state.db in the
// state directory. It creates the state directory 0700 either way: the
// runs and the secrets' copies in it are patchbot's alone.
func OpenStore(cfg Config) (*store.Store, error) {
	if err := os.MkdirAll(cfg.StateDir, 0o700); err != nil {
		return nil, fmt.Errorf("creating state directory: %w", err)
	}
	if err := os.Chmod(cfg.StateDir, 0o700); err != nil {
		return nil, fmt.Errorf("closing the state directory to others: %w", err)
	}
	if cfg.Database == "" {
		return store.Open(filepath.Join(cfg.StateDir, "state.db"))
	}
	dsn := cfg.Database
	if cfg.DatabasePasswordFile != "" {
		pw, err := mailbox.ReadSecret(cfg.DatabasePasswordFile)
		if err != nil {
			return nil, fmt.Errorf("database password: %w", err)
		}
		u, err := url.Parse(dsn)
		if err != nil {
			return nil, fmt.Errorf("database: %w", err)
		}
		u.User = url.UserPassword(u.User.Username(), pw)
		dsn = u.String()
	}
	return store.Open(dsn)
}

// NewOutbox is the outbox of st, sending through the configured SMTP
// server when smtp.enabled is on (otherwise replies are only queued).
func NewOutbox(cfg Config, st *store.Store, log *slog.Logger) (*outbox.Outbox, error) {
	o := &outbox.Outbox{Store: st, Log: log, MaxRecipients: cfg.Limits.MaxRecipients, OptOut: optOutAddrs(cfg.Limits)}
	if !cfg.SMTP.Enabled {
		return o, nil
	}
	sc := cfg.SMTP
	if sc.From == "" {
		sc.From = mailbox.AddrOf(cfg.Reply.From)
	}
	tr, err := sender.NewSMTP(sc)
	if err != nil {
		return nil, err
	}
	o.Sender = tr
	return o, nil
}

// OpenSources opens every configured source, by the name its cursor is
// stored under.
func OpenSources(cfg Config, log *slog.Logger) (map[string]mailbox.Source, error) {
	out := map[string]mailbox.Source{}
	for i, s := range cfg.Sources {
		name := SourceName(i, s)
		src, err := mailbox.Open(s, log)
		if err != nil {
			return nil, fmt.Errorf("source %s: %w", name, err)
		}
		out[name] = src
	}
	return out, nil
}

// NewDaemon wires a daemon from a config: the state database, the
// pipeline (when it runs jobs itself), the sources and the outbox. The
// caller closes d.Store.
func NewDaemon(cfg Config, log *slog.Logger) (*Daemon, error) {
	st, err := OpenStore(cfg)
	if err != nil {
		return nil, err
	}
	fail := func(err error) (*Daemon, error) {
		st.Close()
		return nil, err
	}
	// A coordinator that runs no jobs itself needs no build tools.
	var p *Pipeline
	if cfg.Fleet.LocalWorker {
		if p, err = NewPipeline(cfg, nil); err != nil {
			return fail(err)
		}
		p.UseStore(st)
	}
	srcs, err := OpenSources(cfg, log)
	if err != nil {
		return fail(err)
	}
	ob, err := NewOutbox(cfg, st, log)
	if err != nil {
		return fail(err)
	}
	d := &Daemon{Config: cfg, Store: st, Pipeline: p, Sources: srcs, Outbox: ob, Log: log, Metrics: NewMetrics()}
	return d, nil
}

// PutReply puts a rendered reply in the outbox, from the configured
// sender to the reply's To and Cc. It reports whether the reply was new
// (a reply with the same Message-ID is never queued twice).
func PutReply(ctx context.Context, ob *outbox.Outbox, opt reports.ReplyOptions, r *reports.Reply) (bool, error) {
	raw, err := r.Bytes()
	if err != nil {
		return false, err
	}
	rcpt, err := r.Recipients()
	if err != nil {
		return false, err
	}
	added, err := ob.Put(ctx, outbox.Message{MessageID: r.Header.MessageID, From: mailbox.AddrOf(opt.From), To: rcpt, Raw: raw})
	if err != nil {
		return false, fmt.Errorf("writing the reply to the outbox: %w", err)
	}
	return added, nil
}

// NewWorker wires a worker from a config: the state database, the
// pipeline, and what this host can run (DetectCaps; only the suites
// named, when some are). The caller closes w.Store.
func NewWorker(cfg Config, log *slog.Logger, name string, suites []string) (*Worker, error) {
	if err := CheckSuites(suites, ""); err != nil {
		return nil, err
	}
	st, err := OpenStore(cfg)
	if err != nil {
		return nil, err
	}
	p, err := NewPipeline(cfg, nil)
	if err != nil {
		st.Close()
		return nil, err
	}
	caps := DetectCaps(cfg, suites)
	return &Worker{Config: cfg, Store: st, Pipeline: p, Name: name, Caps: &caps, Log: log, Metrics: NewMetrics()}, nil
}
