package service

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"

	"github.com/patchbot/patchbot/images"
	"github.com/patchbot/patchbot/mailbox/sender"
	"github.com/patchbot/patchbot/store"
	"github.com/patchbot/patchbot/vmrunner"
)

// NewPipeline wires the real stages from a config: images/ for builds,
// VMs of the configured backend for the suites, the reference model's
// predictions, and the reply options.
func NewPipeline(cfg Config, progress io.Writer, log *slog.Logger) (*Pipeline, error) {
	b, err := images.DefaultBuilder(progress)
	if err != nil {
		return nil, err
	}
	pool := vmrunner.Config{Limit: cfg.VM.Concurrency, Log: log}
	if len(cfg.VM.URIs) > 0 {
		pool.URI = cfg.VM.URIs[0]
	}
	return &Pipeline{
		Builder:  &KernelBuilder{Builder: b, Tree: cfg.Kernel.Tree, Ref: cfg.Kernel.Base, Progress: progress},
		Tester:   &VMTester{Backend: cfg.VM.Backend, CPUs: cfg.VM.CPUs, MemMiB: cfg.VM.MemMiB, Pool: pool},
		Model:    ModelFromNotes,
		Reply:    cfg.Reply,
		Progress: progress,
		Commands: ReproCommands,
	}, nil
}

// ReproCommands are the lines a reader runs to repeat a test with patchbot.
func ReproCommands(req *Request, runDir string) []string {
	suites := ""
	if len(req.Suites) > 0 {
		suites = " --suites " + strings.Join(req.Suites, ",")
	}
	id := strings.Trim(req.Thread.MessageID, "<>")
	return []string{
		fmt.Sprintf("b4 am -o - '%s' > series.mbox", id),
		fmt.Sprintf("patchbot run --mbox series.mbox%s --profile %s --runs %d", suites, req.Profile, req.Runs),
	}
}

// OpenStore opens the state database in the config's state directory.
func OpenStore(cfg Config) (*store.Store, error) {
	if err := os.MkdirAll(cfg.StateDir, 0o755); err != nil {
		return nil, fmt.Errorf("creating state directory: %w", err)
	}
	return store.Open(filepath.Join(cfg.StateDir, "state.db"))
}

// NewFlush returns what sends the outbox, or nil when sending is off.
func NewFlush(cfg Config, st *store.Store, log *slog.Logger) (func(context.Context) error, error) {
	if !cfg.SMTP.Enabled {
		return nil, nil
	}
	tr, err := sender.NewSMTP(cfg.SMTP)
	if err != nil {
		return nil, err
	}
	ob := &sender.Outbox{Store: st, Transport: tr, Log: log}
	return func(ctx context.Context) error {
		_, err := ob.Flush(ctx)
		return err
	}, nil
}
