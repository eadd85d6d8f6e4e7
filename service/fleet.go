package service

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"strings"

	"github.com/patchbot/patchbot/config"
	"github.com/patchbot/patchbot/intake"
	"github.com/patchbot/patchbot/mailbox"
	"github.com/patchbot/patchbot/mailbox/outbox"
	"github.com/patchbot/patchbot/reports"
	"github.com/patchbot/patchbot/store"
	"github.com/patchbot/patchbot/suites"
	"github.com/patchbot/patchbot/vmrunner"
)

// The fleet: one coordinator (watch) reads mail, queues jobs, collects the
// workers' results and sends the replies; workers (patchbot worker, or the
// one inside watch) take the jobs that fit them. They meet in the store.

// DetectCaps says what this host can run with the config's VM shape: KVM
// when vmrunner finds it usable (else TCG), the online CPUs, the memory,
// the config's libvirt URIs, and the suites (only, if given, those named:
// a host whose kernels lack a suite's config leaves it out).
func DetectCaps(cfg config.Config, only []string) store.Caps {
	c := store.Caps{Accel: "tcg", CPUs: runtime.NumCPU(), MemMiB: vmrunner.HostMemMiB(), LibvirtURIs: cfg.VM.URIs}
	if vmrunner.KVMUsable("") {
		c.Accel = "kvm"
	}
	if len(only) > 0 {
		c.Suites = append(c.Suites, only...)
	} else if all, err := suites.All(); err == nil {
		for _, s := range all {
			c.Suites = append(c.Suites, s.Name)
		}
	}
	return c
}

// needsOf is what a test job needs of a worker: its suites, the VM shape
// of the config for the base and the patched kernel at once (an A/B pair
// always runs on one host, both VMs up, rounds interleaved), and KVM when
// the fleet asks for it.
func needsOf(cfg config.Config, names []string) store.Needs {
	return store.Needs{KVM: cfg.Fleet.RequireKVM, CPUs: cfg.VM.CPUs, MemMiB: 2 * cfg.VM.MemMiB, Suites: names}
}

// jobRow is a front desk's job as the queue keeps it: its request as
// JSON, what a test needs of a worker.
func jobRow(cfg config.Config, j intake.Job) (store.Job, error) {
	row := store.Job{Dedupe: string(j.Dedupe), Kind: store.KindTest, Trigger: j.Trigger, Title: j.Title,
		Source: j.Source, Sender: j.Sender, NotBefore: j.NotBefore}
	var data any = j.Test
	if j.Check != nil {
		row.Kind, data = store.KindCheck, j.Check
	} else {
		row.Needs = needsOf(cfg, j.Suites)
	}
	var err error
	row.Request, err = json.Marshal(data)
	return row, err
}

// CollectRuns writes the runs that workers stored into the state
// directory's runs/, where the dashboard and `patchbot reply` read them,
// puts each run's reply in the outbox (ob: the coordinator's; workers
// never write the outbox), and forgets the stored copies. A run is
// written beside its place and renamed into it, so that a reader never
// sees half of one; the reply's queueing and the forgetting are one
// transaction, so a crash between any two steps repeats the collection
// and queues nothing twice. A file whose name is not a plain relative
// path is left out, and logged. A reply is checked against its job
// (queueWorkerReply). It returns how many runs it wrote.
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
			reply, err := st.JobReply(ctx, id)
			if err != nil {
				return n, err
			}
			j, err := st.Job(ctx, id)
			if err != nil {
				return n, err
			}
			skipped, err := writeRun(runs, fmt.Sprintf("job-%d", id), files)
			if err != nil {
				return n, fmt.Errorf("writing the run of job %d: %w", id, err)
			}
			if len(skipped) > 0 {
				log.Error("files of a run left out: their names are not plain relative paths", "job", id, "names", skipped)
			}
			finding := findingOf(filepath.Join(runs, fmt.Sprintf("job-%d", id)), log)
			err = st.Update(ctx, func(tx *store.Tx) error {
				if reply != nil {
					if err := queueWorkerReply(ctx, tx, cfg, ob, m, log, j, reply, finding); err != nil {
						return err
					}
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

// queueWorkerReply puts a worker's reply to job j in the outbox, within tx,
// after checking it against the job as the coordinator queued it: its
// Message-ID is the job's own (every config of a fleet has the same
// reply.from), and it goes only to addresses the job's thread named (the
// author, the Cc, the lists) or the config adds (reply.extra_cc); any
// other is dropped and logged. Of those, it goes to whom the front desk's
// rule says the run's finding goes (intake.Desk.Audience: a "No change"
// to whoever asked alone). A worker is the operator's host, but what
// it sends back is checked where it lands, as a run's file names are.
func queueWorkerReply(ctx context.Context, tx *store.Tx, cfg config.Config, ob *outbox.Outbox, m *Metrics, log *slog.Logger,
	j *store.Job, r *store.JobReply, finding reports.Finding) error {
	log = log.With("job", j.ID, "message_id", r.MessageID)
	if want := jobReplyID(cfg, j); r.MessageID != want {
		log.Error("a worker's reply is not its job's: not sent (is reply.from the same in the worker's config?)",
			"want", want, "worker", j.Owner)
		m.Dropped.WithLabelValues("mismatch").Inc()
		return nil
	}
	var req intake.Request
	if err := json.Unmarshal(j.Request, &req); err != nil {
		log.Error("a worker's reply to an undecodable request: not sent", "err", err)
		m.Dropped.WithLabelValues("mismatch").Inc()
		return nil
	}
	aud := deskOf(cfg).Audience(&req, j.Trigger, j.Source, finding)
	var to, refused, quiet []string
	for _, a := range r.Recipients {
		switch a := strings.ToLower(a); {
		case !aud.Named[a]:
			refused = append(refused, a)
		case !aud.Hear[a]:
			quiet = append(quiet, a)
		default:
			to = append(to, a)
		}
	}
	if len(refused) > 0 {
		log.Error("a worker's reply asked for recipients its job's thread does not name: left out", "refused", refused,
			"worker", j.Owner)
	}
	if len(quiet) > 0 {
		log.Info("the run found no change: its reply goes to whoever asked for it, the thread and its lists hear nothing",
			"not_mailed", quiet, "finding", finding)
	}
	if len(to) == 0 {
		if len(quiet) > 0 {
			m.Dropped.WithLabelValues("no-change").Inc()
		} else {
			m.Dropped.WithLabelValues("unaddressable").Inc()
		}
		return nil
	}
	q, err := queueMail(ctx, tx, ob, outbox.Message{MessageID: r.MessageID, From: mailbox.AddrOf(cfg.Reply.From), To: to,
		Raw: r.Raw, ThreadID: threadRoot(req.Thread)})
	if err != nil {
		return fmt.Errorf("job %d: %w", j.ID, err)
	}
	q.record(ctx, m, log.With("worker", j.Owner))
	return nil
}

// deskOf is the front desk of a config.
func deskOf(cfg config.Config) *intake.Desk {
	srcs := map[string]mailbox.SourceConfig{}
	for i, s := range cfg.Sources {
		srcs[config.SourceName(i, s)] = s
	}
	return &intake.Desk{Config: cfg.Config, Sources: srcs, Reply: cfg.Reply}
}

// findingOf is what the run collected into dir found, read from its
// results by the coordinator itself; "" (the reply goes where it did
// before: to the whole thread) when they cannot be read.
func findingOf(dir string, log *slog.Logger) reports.Finding {
	run, err := reports.LoadRun(dir)
	if err == nil {
		var f reports.Finding
		if f, err = reports.FindingOf(run); err == nil {
			return f
		}
	}
	log.Error("reading what a collected run found", "run_dir", dir, "err", err)
	return ""
}
