package service

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"

	"github.com/patchbot/patchbot/config"
	"github.com/patchbot/patchbot/images"
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

// NewDaemon wires a daemon from a config: the state database, the
// pipeline (when it runs jobs itself), the sources and the outbox. The
// caller closes d.Store.
func NewDaemon(cfg config.Config, log *slog.Logger) (*Daemon, error) {
	st, err := cfg.OpenStore()
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
	srcs, err := cfg.OpenSources(log)
	if err != nil {
		return fail(err)
	}
	ob, err := cfg.Outbox(st, log)
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
// what this host can run (config.Config.Caps; only the suites named, when some
// are). A worker that connects to PostgreSQL as a worker role
// (store.WorkerRole) holds jobs in its role's name: name defaults to it,
// and another name is refused. The caller closes w.Store.
func NewWorker(cfg config.Config, log *slog.Logger, name string, only []string) (*Worker, error) {
	if err := suites.Check(only, ""); err != nil {
		return nil, err
	}
	st, err := cfg.OpenWorkerStore()
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
	caps := cfg.Caps(only)
	return &Worker{Config: cfg, Store: st, Pipeline: p, Name: name, Caps: &caps, Log: log, Metrics: NewMetrics()}, nil
}
