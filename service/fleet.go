package service

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"

	"github.com/patchbot/patchbot/config"
	"github.com/patchbot/patchbot/intake"
	"github.com/patchbot/patchbot/mailbox/outbox"
	"github.com/patchbot/patchbot/reports"
	"github.com/patchbot/patchbot/store"
)

// The fleet: one coordinator (watch) reads mail, queues jobs, collects the
// workers' results and sends the replies; workers (patchbot worker, or the
// one inside watch) take the jobs that fit them. They meet in the store.

// CollectRuns writes the runs that workers stored into the state
// directory's runs/, where the dashboard and `patchbot reply` read them,
// renders each run's reply itself and puts it in the outbox (ob: the
// coordinator's; workers never write the outbox), and forgets the stored
// copies. A run is written beside its place and renamed into it, so that a
// reader never sees half of one; the reply's queueing and the forgetting
// are one transaction, so a crash between any two steps repeats the
// collection and queues nothing twice. A file whose name is not a plain
// relative path is left out, and logged. It returns how many runs it
// wrote.
//
// A worker is a stranger here: it reports results, never mail. The reply
// is rendered by the coordinator (workerReply), from the run's results
// and its own record of the job, so that no header, address or subject of
// it is a worker's choice.
func CollectRuns(ctx context.Context, cfg config.Config, st *store.Store, ob *outbox.Outbox, m *Metrics, log *slog.Logger) (int, error) {
	runs := filepath.Join(cfg.StateDir, "runs")
	if err := os.MkdirAll(runs, 0o700); err != nil {
		return 0, fmt.Errorf("creating the runs directory: %w", err)
	}
	const batch = 100
	n := 0
	for ctx.Err() == nil {
		ids, err := st.PendingRuns(ctx, batch)
		if err != nil {
			return n, err
		}
		for _, id := range ids {
			files, err := st.RunFiles(ctx, id)
			if err != nil {
				return n, err
			}
			j, err := st.Job(ctx, id)
			if err != nil {
				return n, err
			}
			name := fmt.Sprintf("job-%d", id)
			skipped, err := store.WriteRunDir(runs, name, files)
			if err != nil {
				return n, fmt.Errorf("writing the run of job %d: %w", id, err)
			}
			dir := filepath.Join(runs, name)
			jlog := log.With("job", id, "worker", j.Owner)
			if len(skipped) > 0 {
				jlog.Error("files of a run left out: their names are not plain relative paths", "names", skipped)
			}
			reply, thread, err := workerReply(cfg, j, dir, len(files) > 0, m, jlog)
			if err != nil {
				jlog.Error("a worker's run is not answered: the coordinator cannot render its reply", "err", err)
				m.Dropped.WithLabelValues("render").Inc()
			}
			err = st.Update(ctx, func(tx *store.Tx) error {
				if reply != nil {
					q, err := queueReply(ctx, tx, ob, cfg.Reply.From, reply, thread, "")
					if err != nil {
						return fmt.Errorf("job %d: %w", id, err)
					}
					q.record(ctx, m, jlog.With("message_id", reply.Header.MessageID))
				}
				if err := tx.SetRunDir(ctx, id, dir); err != nil {
					return err
				}
				return tx.DeleteRun(ctx, id)
			})
			if err != nil {
				return n, err
			}
			n++
		}
		if len(ids) < batch {
			break
		}
	}
	return n, ctx.Err()
}

// workerReply renders the reply to job j from the run a worker reported,
// written out in dir: the coordinator's own reply (intake.Desk.JobReply),
// with its config's reply options, from its own record of the job and the
// run's results. What a worker wrote is results, bounded by the run's
// size caps (store.MaxRunFile …): the numbers and the patch's failure,
// never a header. It returns nil for a job that sends no mail (a
// dashboard run, a job not done, one whose run holds nothing, a No change
// nobody asked for) and the reply's thread.
func workerReply(cfg config.Config, j *store.Job, dir string, ran bool, m *Metrics, log *slog.Logger) (*reports.Reply, string, error) {
	if j.State != store.JobDone || j.Kind != store.KindTest || !ran {
		return nil, "", nil
	}
	var req intake.Request
	if err := json.Unmarshal(j.Request, &req); err != nil {
		return nil, "", fmt.Errorf("the job's request: %w", err)
	}
	if req.NoMail {
		return nil, "", nil
	}
	req.ReplyID = cfg.Desk().ReplyID(j.ID, j.Dedupe)
	reply, quiet, err := cfg.Desk().JobReply(&req, j.Trigger, j.Source, dir,
		reports.Repro{CPUs: cfg.VM.CPUs, MemMiB: cfg.VM.MemMiB, Boot: cfg.VM.Boot, Tree: cfg.Kernel.Tree},
		func(worker string) string { return resultsURL(cfg, dir, worker) })
	if err != nil {
		return nil, "", err
	}
	if len(quiet) > 0 {
		log.Info("the run found no change: its reply goes to whoever asked for it, the thread and its lists hear nothing",
			"not_mailed", quiet, "finding", reply.Finding)
		if len(reply.Header.To) == 0 {
			m.Dropped.WithLabelValues("no-change").Inc()
			return nil, "", nil
		}
	}
	return reply, req.Thread.Root(), nil
}

// resultsURL is the link a collected run's reply gives: the dashboard's
// page of it, else the worker's published copy when it is one of the
// configured repository's pages (publish.Config.Page), else none.
func resultsURL(cfg config.Config, dir, worker string) string {
	if base := cfg.Dashboard.BaseURL; base != "" {
		return reports.RunURL(base, filepath.Base(dir))
	}
	if cfg.Publish.Page(worker) {
		return worker
	}
	return ""
}
