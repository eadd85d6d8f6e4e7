package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"strings"

	"github.com/patchbot/patchbot/config"
	"github.com/patchbot/patchbot/reports"
	"github.com/patchbot/patchbot/reports/publish"
	"github.com/patchbot/patchbot/service"
)

func init() {
	register(&command{
		name:       "reply",
		positional: true,
		summary:    "render a finished run's reply again, queue it, and send it if the config says so",
		usage:      "reply RUN_DIR [--config FILE] [--state DIR]",
		desc: `Renders the reply of a run directory (run.json, base.json, patched.json) with
patchbot.yaml's reply options, publishes the directory first when the config
has publish:, writes reply.eml, and queues the reply in the state directory's
outbox: the same outbox 'patchbot watch' sends from. It is sent at once when
smtp.enabled is on. A reply already in the outbox (same Message-ID) is not
queued twice.`,
		example: `patchbot reply /var/lib/patchbot/runs/job-12 --config /etc/patchbot/patchbot.yaml`,
		flags: func(fs *flag.FlagSet) func(context.Context, []string) error {
			var conf configFlags
			conf.declare(fs)
			return func(ctx context.Context, args []string) error {
				if len(args) != 1 {
					return usagef("want one run directory, got %d arguments", len(args))
				}
				cfg, err := conf.load()
				if err != nil {
					return err
				}
				return runReply(ctx, cfg, args[0])
			}
		},
	})
}

func runReply(ctx context.Context, cfg config.Config, dir string) error {
	run, err := reports.LoadRun(dir)
	if err != nil {
		return err
	}
	if cfg.Publish != nil && run.ResultsURL == "" {
		p, err := publish.New(*cfg.Publish, nil)
		if err != nil {
			return err
		}
		if err := reports.PublishRun(ctx, dir, run, p); err != nil {
			return err
		}
	}
	reply, raw, err := reports.WriteReply(dir, run, cfg.Reply)
	if err != nil {
		return err
	}
	io.WriteString(stdout, strings.ReplaceAll(string(raw), "\r\n", "\n"))

	st, err := cfg.OpenStore()
	if err != nil {
		return err
	}
	defer st.Close()
	added, sending, err := service.Deliver(ctx, cfg, st, reply, slog.New(slog.NewTextHandler(stderr, nil)))
	if err != nil {
		return err
	}
	db := filepath.Join(cfg.StateDir, "state.db")
	if !added {
		fmt.Fprintf(stderr, "patchbot reply: %s was already in the outbox %s\n", reply.Header.MessageID, db)
	}
	if !sending {
		fmt.Fprintf(stderr, "patchbot reply: queued in %s; sending is off (smtp.enabled in the config)\n", db)
	}
	return nil
}
