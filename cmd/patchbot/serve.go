package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"github.com/patchbot/patchbot/store"
)

func init() {
	register(&command{
		name:    "serve",
		summary: "serve the dashboard of a config's or a state directory's runs",
		usage:   "serve [--config FILE | --state DIR] [--http ADDR]",
		desc: `Serves the dashboard (docs/dashboard.md) for the runs of a state directory:
the queue, every run with its comparison, plots and artifacts, the series, the
JSON API and the Atom feed, so that a 'patchbot run' on a laptop can be
browsed. It binds loopback (127.0.0.1:8080) unless --http names another
address. With a dashboard token file in the config, its form queues runs for
the daemon that shares the state directory.`,
		example: `patchbot serve --state ~/.local/state/patchbot
patchbot serve --config /etc/patchbot/patchbot.yaml --http 127.0.0.1:9000`,
		flags: func(fs *flag.FlagSet) func(context.Context, []string) error {
			var conf configFlags
			conf.declare(fs)
			addr := fs.String("http", "127.0.0.1:8080", "`address` to listen on")
			return func(ctx context.Context, args []string) error {
				if _, _, err := net.SplitHostPort(*addr); err != nil {
					return usagef("--http %q: want host:port", *addr)
				}
				cfg, err := conf.load()
				if err != nil {
					return err
				}
				if _, err := os.Stat(cfg.StateDir); err != nil {
					return fmt.Errorf("state directory: %w", err)
				}
				log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
				var st *store.Store
				if _, err := os.Stat(filepath.Join(cfg.StateDir, "state.db")); err == nil || cfg.Database != "" {
					if st, err = cfg.OpenStore(); err != nil {
						return err
					}
					defer st.Close()
				}
				h, err := dashboard(cfg, st, nil, nil, log)
				if err != nil {
					return err
				}
				srv := &http.Server{Addr: *addr, Handler: h, ReadHeaderTimeout: 10 * time.Second}
				go func() {
					<-ctx.Done()
					srv.Close()
				}()
				fmt.Fprintf(stderr, "serving the dashboard of %s on http://%s/\n", cfg.StateDir, *addr)
				if err := srv.ListenAndServe(); err != nil && !errors.Is(err, http.ErrServerClosed) {
					return err
				}
				return nil
			}
		},
	})
}
