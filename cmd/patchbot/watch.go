package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"

	"github.com/patchbot/patchbot/mailbox"
	"github.com/patchbot/patchbot/service"
)

func init() {
	register(command{
		name:  "watch",
		usage: "run the daemon: watch lists, test series, answer commands (--config patchbot.yaml)",
		run:   runWatch,
	})
}

func runWatch(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("watch", flag.ContinueOnError)
	configPath := fs.String("config", "patchbot.yaml", "the daemon's config `file`")
	if err := fs.Parse(args); err != nil || fs.NArg() > 0 {
		return exitError{2}
	}
	cfg, err := service.LoadConfig(*configPath)
	if err != nil {
		return err
	}
	// A daemon logs quietly and structured: no progress lines.
	log := slog.New(slog.NewJSONHandler(os.Stderr, nil))
	slog.SetDefault(log)
	st, err := service.OpenStore(cfg)
	if err != nil {
		return err
	}
	defer st.Close()
	p, err := service.NewPipeline(cfg, nil, log)
	if err != nil {
		return err
	}
	srcs, err := sources(cfg, log)
	if err != nil {
		return err
	}
	flush, err := service.NewFlush(cfg, st, log)
	if err != nil {
		return err
	}
	d := &service.Daemon{Config: cfg, Store: st, Pipeline: p, Sources: srcs, Flush: flush, Log: log,
		Metrics: service.NewMetrics()}
	if cfg.HTTP != "" {
		go func() {
			if err := d.Metrics.Serve(ctx, cfg.HTTP, log); err != nil {
				log.Error("http", "err", err)
			}
		}()
	}
	log.Info("watching", "sources", len(srcs), "state", cfg.StateDir, "sending", flush != nil)
	return d.Run(ctx)
}

// sources builds the configured sources, named for their stored cursors.
func sources(cfg service.Config, log *slog.Logger) (map[string]mailbox.Source, error) {
	out := map[string]mailbox.Source{}
	for i, s := range cfg.Sources {
		name := s.Name
		if name == "" {
			name = fmt.Sprintf("source-%d", i)
		}
		if _, dup := out[name]; dup {
			return nil, fmt.Errorf("two sources are named %q", name)
		}
		switch {
		case s.IMAP != nil:
			src := &mailbox.IMAP{Addr: s.IMAP.Addr, TLS: s.IMAP.TLS, User: s.IMAP.User, Password: s.IMAP.Password,
				Mailbox: s.IMAP.Mailbox, Logger: log, PollInterval: s.Poll}
			out[name] = src
		case s.Lore != "":
			src, err := mailbox.NewLore(s.Lore)
			if err != nil {
				return nil, fmt.Errorf("source %s: %w", name, err)
			}
			src.Logger = log
			out[name] = src
		case s.Mbox != "":
			out[name] = &mailbox.Mbox{Path: s.Mbox, Logger: log}
		case s.Maildir != "":
			out[name] = &mailbox.Maildir{Dir: s.Maildir, Logger: log}
		}
	}
	return out, nil
}
