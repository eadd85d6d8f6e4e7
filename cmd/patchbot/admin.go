package main

import (
	"context"
	"flag"
	"fmt"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/patchbot/patchbot/internal/inert"
	"github.com/patchbot/patchbot/store"
)

// The operator's commands over the state database: what the daemon parked
// or could not be sure it delivered, and putting it back.
func init() {
	register(&command{
		name:    "jobs",
		summary: "list the jobs of the state database",
		usage:   "jobs [--status queued|running|done|failed|parked] [--config FILE | --state DIR] [--json]",
		desc: `Lists the jobs, oldest first: their state (queued, running, done, failed, or
parked: the daemon died while running it twice, and it is not run again until
'patchbot jobs unpark'), what triggered them, their attempts and last error.`,
		example: `patchbot jobs --status parked`,
		flags: func(fs *flag.FlagSet) func(context.Context, []string) error {
			var conf configFlags
			conf.declare(fs)
			status := fs.String("status", "", "only jobs in this `status`: queued, running, done, failed or parked")
			asJSON := fs.Bool("json", false, "print JSON (schema 1)")
			return func(ctx context.Context, args []string) error {
				if *status != "" && !validJobState(*status) {
					return usagef("--status %q: want one of queued, running, done, failed, parked", *status)
				}
				return withStore(conf, func(st *store.Store) error {
					jobs, err := st.Jobs(ctx)
					if err != nil {
						return err
					}
					var out []*store.Job
					for _, j := range jobs {
						if *status == "" || string(j.State) == *status {
							j.Request = nil // large, and not for a listing
							out = append(out, j)
						}
					}
					if *asJSON {
						return writeJSON(stdout, struct {
							Schema int          `json:"schema"`
							Jobs   []*store.Job `json:"jobs"`
						}{schemaVersion, append([]*store.Job{}, out...)})
					}
					tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
					fmt.Fprintln(tw, "ID\tSTATE\tTRIGGER\tATTEMPTS\tTITLE\tERROR")
					for _, j := range out {
						fmt.Fprintf(tw, "%d\t%s\t%s\t%d\t%s\t%s\n", j.ID, j.State, cell(j.Trigger), j.Attempts, cell(clip(j.Title, 50)), cell(clip(j.Error, 60)))
					}
					return tw.Flush()
				})
			}
		},
	})
	register(&command{
		name:       "jobs unpark",
		positional: true,
		summary:    "queue a parked job again",
		usage:      "jobs unpark ID [--config FILE | --state DIR]",
		desc: `Puts a parked job (one the daemon died while running, twice) back in the queue
with a fresh count of crashes. Do it once whatever killed the daemon is fixed.`,
		example: `patchbot jobs unpark 12`,
		flags:   byID((*store.Store).UnparkJob),
	})
	register(&command{
		name:    "outbox",
		summary: "list the replies of the outbox",
		usage:   "outbox [--status queued|sending|delivering|uncertain|sent|failed] [--config FILE | --state DIR] [--json]",
		desc: `Lists the replies in the outbox with their state and recipients. A reply is
uncertain when the link broke after the server was asked to accept it: it may
or may not have arrived, and patchbot does not send it again by itself. Check
the list's archive, then 'patchbot outbox requeue ID' if it never arrived.`,
		example: `patchbot outbox --status uncertain`,
		flags: func(fs *flag.FlagSet) func(context.Context, []string) error {
			var conf configFlags
			conf.declare(fs)
			status := fs.String("status", "", "only replies in this `status`")
			asJSON := fs.Bool("json", false, "print JSON (schema 1)")
			return func(ctx context.Context, args []string) error {
				states := store.OutboxStates
				if *status != "" {
					states = nil
					for _, s := range store.OutboxStates {
						if string(s) == *status {
							states = []store.OutboxState{s}
						}
					}
					if states == nil {
						return usagef("--status %q: not an outbox state (%v)", *status, store.OutboxStates)
					}
				}
				return withStore(conf, func(st *store.Store) error {
					ms, err := st.OutboxIn(ctx, states...)
					if err != nil {
						return err
					}
					type row struct {
						ID         int64             `json:"id"`
						MessageID  string            `json:"message_id"`
						State      store.OutboxState `json:"state"`
						Attempts   int               `json:"attempts"`
						Recipients []string          `json:"recipients"`
						LastError  string            `json:"last_error,omitempty"`
					}
					rows := []row{}
					for _, m := range ms {
						rows = append(rows, row{m.ID, m.MessageID, m.State, m.Attempts, m.Recipients, m.LastError})
					}
					if *asJSON {
						return writeJSON(stdout, struct {
							Schema int   `json:"schema"`
							Outbox []row `json:"outbox"`
						}{schemaVersion, rows})
					}
					tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
					fmt.Fprintln(tw, "ID\tSTATE\tATTEMPTS\tRECIPIENTS\tMESSAGE-ID\tLAST ERROR")
					for _, r := range rows {
						fmt.Fprintf(tw, "%d\t%s\t%d\t%d\t%s\t%s\n", r.ID, r.State, r.Attempts, len(r.Recipients), cell(r.MessageID), cell(clip(r.LastError, 60)))
					}
					return tw.Flush()
				})
			}
		},
	})
	register(&command{
		name:       "outbox requeue",
		positional: true,
		summary:    "send an uncertain reply again",
		usage:      "outbox requeue ID [--config FILE | --state DIR]",
		desc: `Queues an uncertain reply again, once a person has checked that it never
arrived; the next flush of the daemon (or 'patchbot reply') sends it.`,
		example: `patchbot outbox requeue 7`,
		flags:   byID((*store.Store).RequeueUncertain),
	})
}

func validJobState(s string) bool {
	for _, st := range store.JobStates {
		if string(st) == s {
			return true
		}
	}
	return false
}

// byID is the flags of a command that does one thing to one stored row,
// named by the one argument: "jobs unpark ID", "outbox requeue ID".
func byID(do func(*store.Store, context.Context, int64) error) func(fs *flag.FlagSet) func(context.Context, []string) error {
	return func(fs *flag.FlagSet) func(context.Context, []string) error {
		var conf configFlags
		conf.declare(fs)
		return func(ctx context.Context, args []string) error {
			id, err := oneID(args)
			if err != nil {
				return err
			}
			return withStore(conf, func(st *store.Store) error { return do(st, ctx, id) })
		}
	}
}

func oneID(args []string) (int64, error) {
	if len(args) != 1 {
		return 0, usagef("want one id, got %d arguments", len(args))
	}
	id, err := strconv.ParseInt(args[0], 10, 64)
	if err != nil || id < 1 {
		return 0, usagef("%q is not an id", args[0])
	}
	return id, nil
}

// withStore opens the config's state database for fn.
func withStore(conf configFlags, fn func(*store.Store) error) error {
	cfg, err := conf.load()
	if err != nil {
		return err
	}
	st, err := cfg.OpenStore()
	if err != nil {
		return err
	}
	defer st.Close()
	return fn(st)
}

func clip(s string, n int) string {
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:n-1]) + "…"
}

// cell is a stranger's text (a subject, a Message-ID, an error quoting
// either) as one cell of a table: its controls escaped (stdout's inert
// writer would too), and a newline or a tab, which would start a row or a
// column of its own, as well.
func cell(s string) string { return strings.ReplaceAll(inert.Line(s), "\t", `\t`) }
