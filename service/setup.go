package service

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"os"
	"path/filepath"

	"github.com/patchbot/patchbot/config"
	"github.com/patchbot/patchbot/images"
	"github.com/patchbot/patchbot/mailbox"
	"github.com/patchbot/patchbot/reports"
	"github.com/patchbot/patchbot/reports/publish"
	"github.com/patchbot/patchbot/store"
	"github.com/patchbot/patchbot/suites"
	"github.com/patchbot/patchbot/suites/invm"
)

// NewPipeline wires the real stages from a config: images.Kernels for the
// base's choice among the configured trees and the builds, invm.Tester for
// VMs of the configured shape, and the reply options. The caller that has
// a store sets History.
func NewPipeline(cfg config.Config, progress io.Writer) (*Pipeline, error) {
	if cfg.DryRun != nil {
		return newDryRun(cfg, progress)
	}
	k, err := images.NewKernels(cfg.Kernel, cfg.Trees, progress)
	if err != nil {
		return nil, err
	}
	p := newPipeline(cfg, progress)
	p.Builder, p.Trees, p.Tester = k, k.Trees, &invm.Tester{VM: cfg.VM}
	if cfg.Publish != nil {
		pub, err := publish.New(*cfg.Publish, nil)
		if err != nil {
			return nil, err
		}
		p.Publish = pub
	}
	return p, nil
}

// newDryRun is the pipeline of a dry run: images.DryRun "builds" into the
// cache's dry-run directory, invm.DryRunTester "measures".
func newDryRun(cfg config.Config, progress io.Writer) (*Pipeline, error) {
	cache, err := images.CacheDir()
	if err != nil {
		return nil, err
	}
	p := newPipeline(cfg, progress)
	p.Builder = &images.DryRun{Dir: filepath.Join(cache, "dry-run"), Delay: cfg.DryRun.Build}
	p.Tester = invm.DryRunTester{Round: cfg.DryRun.Round}
	return p, nil
}

// newPipeline is what every pipeline takes from the config whatever its
// stages: the reply's options, the VM shape and the base tree for the
// reproduce commands, and the dashboard's link to a run.
func newPipeline(cfg config.Config, progress io.Writer) *Pipeline {
	p := &Pipeline{Reply: cfg.Reply, Progress: progress, VM: cfg.VM, Tree: cfg.Kernel}
	if base := cfg.Dashboard.BaseURL; base != "" {
		p.ResultsURL = func(runDir string) string { return reports.RunURL(base, filepath.Base(runDir)) }
	}
	return p
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
func OpenStore(cfg config.Config) (*store.Store, error) { return openStore(cfg, store.Open) }

// openStore is OpenStore with the store's opener: store.Open for the
// coordinator (which migrates), store.OpenWorker for a worker.
func openStore(cfg config.Config, open func(string) (*store.Store, error)) (*store.Store, error) {
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
	return open(dsn)
}

// OpenSources opens every configured source to be watched, by the name
// its cursor is stored under; a lore list's git mirror defaults to
// STATE_DIR/lore/NAME.
func OpenSources(cfg config.Config, log *slog.Logger) (map[string]mailbox.Source, error) {
	out := map[string]mailbox.Source{}
	for i, s := range cfg.Sources {
		name := config.SourceName(i, s)
		s.Follow = true
		if s.Mirror == "" && s.Lore != "" {
			if l, err := mailbox.NewLore(s.Lore); err == nil && l.MessageID == "" {
				s.Mirror = filepath.Join(cfg.StateDir, "lore", name)
			}
		}
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
func NewDaemon(cfg config.Config, log *slog.Logger) (*Daemon, error) {
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
	if why := cfg.UnverifiedTLS(); why != "" {
		log.Warn(why)
	}
	d := &Daemon{Config: cfg, Store: st, Pipeline: p, Sources: srcs, Outbox: ob, Log: log, Metrics: NewMetrics()}
	return d, nil
}

// NewWorker wires a worker from a config: the state database (opened
// without migrating: the coordinator owns the schema), the pipeline, and
// what this host can run (DetectCaps; only the suites named, when some
// are). A worker that connects to PostgreSQL as a worker role
// (store.WorkerRole) holds jobs in its role's name: name defaults to it,
// and another name is refused. The caller closes w.Store.
func NewWorker(cfg config.Config, log *slog.Logger, name string, only []string) (*Worker, error) {
	if err := suites.Check(only, ""); err != nil {
		return nil, err
	}
	st, err := openStore(cfg, store.OpenWorker)
	if err != nil {
		return nil, err
	}
	fail := func(err error) (*Worker, error) {
		st.Close()
		return nil, err
	}
	role, restricted, err := st.Role(context.Background())
	if err != nil {
		return fail(err)
	}
	if restricted {
		if name == "" {
			name = role
		}
		if name != role {
			return fail(fmt.Errorf("worker name %q: this worker connects to the database as role %q, which may hold jobs "+
				"only in its own name: run it with --name %s, or give it a role of that name", name, role, role))
		}
	}
	if why := cfg.UnverifiedTLS(); why != "" {
		log.Warn(why)
	}
	p, err := NewPipeline(cfg, nil)
	if err != nil {
		return fail(err)
	}
	caps := DetectCaps(cfg, only)
	return &Worker{Config: cfg, Store: st, Pipeline: p, Name: name, Caps: &caps, Log: log, Metrics: NewMetrics()}, nil
}
