package main

import (
	"context"
	"flag"
	"log/slog"

	"github.com/patchbot/patchbot/service"
)

func init() {
	register(&command{
		name:    "watch",
		summary: "run the daemon: watch lists, test series, answer commands",
		usage:   "watch --config FILE",
		desc: `Watches the config's sources (IMAP, lore, mbox, Maildir), tests every complete
series that touches a watched path, answers email commands in the threads, and
sends the replies from the outbox. All state is in the state directory, so a
restart (or a kill -9) resumes where it was. Logs are JSON on standard error;
with http: set it serves /healthz, /metrics and the dashboard. See
patchbot.example.yaml.

On one host watch runs the jobs itself, with its state in SQLite. For a fleet,
the config names a PostgreSQL database and turns fleet.local_worker off: watch
then coordinates (mail, queue, collected results, replies, dashboard) and
'patchbot worker' on each test host runs the jobs.`,
		example: `patchbot watch --config /etc/patchbot/patchbot.yaml`,
		flags: func(fs *flag.FlagSet) func(context.Context, []string) error {
			configPath := fs.String("config", "patchbot.yaml", "the daemon's config `file`")
			return func(ctx context.Context, args []string) error {
				cfg, err := loadConfig(*configPath)
				if err != nil {
					return err
				}
				// A daemon logs quietly and structured: no progress lines.
				log := slog.New(slog.NewJSONHandler(stderr, nil))
				slog.SetDefault(log)
				d, err := service.NewDaemon(cfg, log)
				if err != nil {
					return err
				}
				defer d.Store.Close()
				if cfg.HTTP != "" {
					dash, err := dashboard(cfg, d.Store, d.Wake, d.Progress, log)
					if err != nil {
						return err
					}
					go func() {
						if err := d.Metrics.Serve(ctx, cfg.HTTP, log, dash); err != nil {
							log.Error("http", "err", err)
						}
					}()
				}
				log.Info("watching", "sources", len(d.Sources), "state", cfg.StateDir, "database", d.Store.Engine(),
					"local_worker", cfg.Fleet.LocalWorker, "sending", d.Outbox.Sender != nil)
				return d.Run(ctx)
			}
		},
	})
}
