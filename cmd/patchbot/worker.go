package main

import (
	"context"
	"flag"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"regexp"
	"syscall"

	"github.com/patchbot/patchbot/service"
	"github.com/patchbot/patchbot/suites"
)

// workerName is what a worker may be called: it owns the worker's claims
// and shows on the dashboard.
var workerName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._:@/-]{0,127}$`)

func init() {
	register(&command{
		name:    "worker",
		summary: "run jobs for a fleet: claim, build, boot, measure, store the results",
		usage:   "worker --config FILE [--name NAME] [--suites a,b] [--http ADDR]",
		desc: `Runs on each test host of a fleet. It claims, from the config's database (the
PostgreSQL server that 'patchbot watch' coordinates), the queued job that
fits this host best (KVM or TCG, CPUs, memory, the suites it supports), holds
it by a lease that it renews while the job runs, builds the base and patched
kernels, runs the suites in VMs, and stores the run's results and reply in the
database in one transaction. The coordinator writes the run into its state
directory for the dashboard and sends the reply. A worker killed mid-job loses
its lease, and the job runs on another worker; a job that lost its worker
twice is parked. Workers read no mail and send none.

The name owns the worker's claims: give each worker its own, and keep it
across restarts, so that a restarted worker takes back the job it held at
once. A worker that connects as a PostgreSQL worker role is named after the
role. Logs are JSON on standard error; with --http it serves /healthz and
/metrics.

SIGTERM stops at once: the running job's stage is abandoned and the job goes
back to the queue. SIGHUP drains: the running job runs to its end, no new one
is taken, and the worker exits 0. See docs/fleet.md.`,
		example: `patchbot worker --config /etc/patchbot/patchbot.yaml --name kvm-lab7
patchbot worker --config patchbot.yaml --suites cache-contention,readahead --http 127.0.0.1:9188`,
		flags: func(fs *flag.FlagSet) func(context.Context, []string) error {
			configPath := fs.String("config", "patchbot.yaml", "the fleet's config `file` (the same as the coordinator's)")
			name := fs.String("name", "", "this worker's `name`, unique in the fleet (default: its database role's, else the host name)")
			var only suitesFlag
			fs.Var(&only, "suites", "the suites this host's kernels support, `a,b` (default: all)")
			addr := fs.String("http", "", "serve /healthz and /metrics on this `address`")
			return func(ctx context.Context, args []string) error {
				if *name != "" && !workerName.MatchString(*name) {
					return usagef("--name %q: want letters, digits and ._:@/- (at most 128)", *name)
				}
				if *addr != "" {
					if _, _, err := net.SplitHostPort(*addr); err != nil {
						return usagef("--http %q: want host:port", *addr)
					}
				}
				if err := suites.Check(only, ""); err != nil {
					return usagef("--suites: %v", err)
				}
				cfg, err := loadConfig(*configPath)
				if err != nil {
					return err
				}
				log := slog.New(slog.NewJSONHandler(stderr, nil))
				slog.SetDefault(log)
				w, err := service.NewWorker(cfg, log, *name, only)
				if err != nil {
					return err
				}
				defer w.Store.Close()
				if *addr != "" {
					go func() {
						if err := w.Metrics.Serve(ctx, *addr, log, nil); err != nil {
							log.Error("http", "err", err)
						}
					}()
				}
				hup := make(chan os.Signal, 1)
				signal.Notify(hup, syscall.SIGHUP)
				defer signal.Stop(hup)
				go func() {
					select {
					case <-hup:
						w.Drain()
					case <-ctx.Done():
					}
				}()
				return w.Run(ctx)
			}
		},
	})
}
