// Package service hosts the stages: it sequences them into one test
// (Pipeline.Execute: mailbox → images → suites/invm → bisect → reports)
// for `patchbot run` and the workers, and runs the daemon (`patchbot
// watch`) and a fleet's workers (`patchbot worker`), their state in the
// store across restarts. What each stage does is the stage's; what to do
// with a mail is the front desk's (package intake). Its files are layers,
// each using only those below: steps.go, metrics.go, lease.go; the
// pipeline (pipeline.go) and mail going out (replies.go); the fleet's
// transport (fleet.go); the worker (worker.go); mail coming in (ingest.go,
// check.go); the daemon's loops (daemon.go); the wiring (setup.go).
package service

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"time"

	"github.com/patchbot/patchbot/blame"
	"github.com/patchbot/patchbot/config"
	"github.com/patchbot/patchbot/intake"
	"github.com/patchbot/patchbot/mailbox"
	"github.com/patchbot/patchbot/mailbox/outbox"
	"github.com/patchbot/patchbot/store"
)

// Daemon is the coordinator: it watches sources, queues jobs, runs the
// checks that look at stored mail (an incomplete series' wait), collects
// the runs that workers stored, expires the leases of workers that died,
// and sends the replies from the outbox. With a Worker (the single host's
// default, fleet.local_worker) it also runs the jobs, in this process; a
// fleet's workers run them elsewhere (patchbot worker). All of its state
// is in the store, so a restart (or kill -9) resumes where it was.
type Daemon struct {
	Config   config.Config
	Store    *store.Store
	Pipeline *Pipeline
	// Worker runs jobs in this process; when nil and the config's
	// fleet.local_worker is on, one is made over Pipeline.
	Worker *Worker
	// Name owns the coordinator's own claims (the checks); default
	// HOST/coordinator.
	Name string
	// Sources by name; the name keys the stored cursor.
	Sources map[string]mailbox.Source
	// Verifier checks who sent each mail (DKIM); default from the config's
	// dkim: and commands.authserv_ids. Tests give one with a local resolver.
	Verifier *mailbox.Verifier
	// Outbox holds the replies; it sends them when it has a Sender.
	Outbox  *outbox.Outbox
	Log     *slog.Logger
	Metrics *Metrics
	// Poll is how often sources without a push mechanism are read; default
	// 30 s. The queue is looked at every fleet.poll.
	Poll time.Duration
	// Retry is how failed and crashed jobs are tried again; the local
	// worker gets the same.
	store.Retry
	// FlushEvery is how often the outbox is flushed besides at start and
	// when a reply is committed (a retry, a dead sender's claim that ran
	// out); default one minute.
	FlushEvery time.Duration
	// OnStep is called at each step of handling a mail and running a job;
	// crash tests stop the process there. Nil in production.
	OnStep func(Step)

	wake    chan struct{} // the coordinator's loop: a run was stored, a check may be due
	sources map[string]mailbox.SourceConfig
	in      *ingester
}

// Ingest keeps one mail a source read (with the cursor past it) and acts
// on it as the front desk decides, in one transaction; see ingester.ingest.
func (d *Daemon) Ingest(ctx context.Context, source string, m *mailbox.Message, cur string) error {
	if d.wake == nil {
		d.defaults()
	}
	return d.in.ingest(ctx, source, m, cur)
}

// Progress is how far a running job got, when this process runs it: what
// the dashboard in the same process shows live.
func (d *Daemon) Progress(jobID int64) (store.Progress, bool) {
	if d.Worker == nil {
		return store.Progress{}, false
	}
	return d.Worker.progressOf(jobID)
}

// Wake tells the workers in this process, and the coordinator's loop, that
// a job is waiting.
func (d *Daemon) Wake() {
	if d.Worker != nil {
		d.Worker.Wake()
	}
	d.kick()
}

// kick wakes the coordinator's loop.
func (d *Daemon) kick() { poke(d.wake) }

func (d *Daemon) step(s Step) {
	if d.OnStep != nil {
		d.OnStep(s)
	}
}

// Run works until ctx ends: on SIGTERM the caller cancels ctx; the running
// job's stage is abandoned and the job put back in the queue (builds are
// cached, so the retry costs only the stage that was running).
func (d *Daemon) Run(ctx context.Context) error {
	d.defaults()
	if err := d.recoverJobs(ctx); err != nil {
		if ctx.Err() != nil {
			return nil // stopped while starting: a clean stop
		}
		return err
	}
	// The outbox's owner is the coordinator's stable name: what the last
	// run was sending before the final "." goes out at once.
	if _, err := d.Outbox.Recover(ctx); err != nil {
		if ctx.Err() != nil {
			return nil // stopped while starting: a clean stop
		}
		return err
	}
	if un, err := d.Outbox.Uncertain(ctx); err == nil && len(un) > 0 {
		ids := make([]string, len(un))
		for i, m := range un {
			ids[i] = m.MessageID
		}
		d.Log.Error("replies whose delivery is uncertain wait for a person", "count", len(un), "message_ids", ids)
	}
	var wg sync.WaitGroup
	// The outbox is flushed at start (a reply a crash or an SMTP outage
	// left queued), when a reply is committed, and every minute.
	wg.Add(1)
	go func() {
		defer wg.Done()
		d.Outbox.Run(ctx, d.FlushEvery)
	}()
	if d.Pipeline != nil && d.Pipeline.Trees != nil {
		wg.Add(1)
		go func() {
			defer wg.Done()
			d.Pipeline.Trees.KeepFresh(ctx, d.Log)
		}()
	}
	for name, src := range d.Sources {
		wg.Add(1)
		go func() {
			defer wg.Done()
			d.watch(ctx, name, src)
		}()
	}
	if d.Worker != nil {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := d.Worker.Run(ctx); err != nil && ctx.Err() == nil {
				d.Log.Error("the worker stopped", "err", err)
			}
		}()
	}
	d.coordinate(ctx)
	wg.Wait()
	d.Log.Info("stopped")
	return nil
}

// recoverJobs runs once at start: a job left running under the
// coordinator's name or its worker's was running when the daemon died,
// and one whose lease ran out meanwhile lost its worker. Each is queued
// again, or parked after MaxCrashes deaths.
func (d *Daemon) recoverJobs(ctx context.Context) error {
	requeued, parked, err := d.Store.RecoverJobs(ctx, d.Name, d.MaxCrashes)
	if err != nil {
		return err
	}
	logLost(d.Log, d.Metrics, requeued, parked, "the daemon died while running it")
	if d.Worker != nil {
		if err := d.Worker.Recover(ctx); err != nil {
			return err
		}
	}
	return d.expire(ctx)
}

// expire applies the crash rule to jobs whose worker's lease ran out (by
// the database's clock), and fails the jobs out of attempts (workers only
// skip them).
func (d *Daemon) expire(ctx context.Context) error {
	requeued, parked, err := d.Store.ExpireJobs(ctx, time.Time{}, d.MaxCrashes)
	if err != nil {
		return err
	}
	logLost(d.Log, d.Metrics, requeued, parked, "its worker's lease ran out (the worker died, or lost the database)")
	if n, err := d.Store.FailSpentJobs(ctx, d.MaxAttempts); err != nil {
		return err
	} else if n > 0 {
		d.Log.Error("jobs failed for good: out of attempts", "count", n, "max_attempts", d.MaxAttempts)
	}
	return nil
}

// coordinate is the coordinator's loop: due checks, leases that ran out,
// runs to collect, gauges; every fleet.poll, and when woken.
func (d *Daemon) coordinate(ctx context.Context) {
	for ctx.Err() == nil {
		for {
			ran, err := d.checkOnce(ctx)
			if err != nil && ctx.Err() == nil {
				d.Log.Error("claiming a check", "err", err)
			}
			if !ran {
				break
			}
		}
		if err := d.expire(ctx); err != nil && ctx.Err() == nil {
			d.Log.Error("expiring leases", "err", err)
		}
		d.collect(ctx)
		d.updateGauges(ctx)
		select {
		case <-ctx.Done():
		case <-d.wake:
		case <-time.After(d.Config.Fleet.Poll):
		}
	}
}

// collect writes the runs workers stored into the runs directory; their
// replies were stored with them, so the outbox is told.
func (d *Daemon) collect(ctx context.Context) {
	n, err := CollectRuns(ctx, d.Config, d.Store, d.Outbox, d.Metrics, d.Log)
	if err != nil && ctx.Err() == nil {
		d.Log.Error("collecting runs", "err", err)
	}
	if n > 0 {
		d.Outbox.Wake()
	}
}

func (d *Daemon) defaults() {
	if d.Log == nil {
		d.Log = slog.Default()
	}
	if d.Poll == 0 {
		d.Poll = 30 * time.Second
	}
	d.Retry.Defaults()
	if d.FlushEvery == 0 {
		d.FlushEvery = time.Minute
	}
	if d.Config.Fleet.Poll == 0 {
		d.Config.Fleet.Poll = 5 * time.Second
	}
	if d.Config.Fleet.Lease == 0 {
		d.Config.Fleet.Lease = 2 * time.Minute
	}
	if d.Metrics == nil {
		d.Metrics = NewMetrics()
	}
	if d.Outbox == nil {
		d.Outbox = &outbox.Outbox{Store: d.Store, Log: d.Log}
	}
	if d.Verifier == nil {
		d.Verifier = mailbox.NewVerifier(d.Config.DKIM, d.Config.Commands.AuthservIDs)
	}
	if d.Outbox.MaxRecipients == 0 {
		d.Outbox.MaxRecipients = d.Config.Limits.MaxRecipients
	}
	if d.Outbox.OptOut == nil {
		d.Outbox.OptOut = d.Config.Limits.OptOutAddrs()
	}
	if d.Outbox.OnUncertain == nil {
		d.Outbox.OnUncertain = func(store.OutboxMessage) { d.Metrics.Uncertain.Inc() }
	}
	host, _ := os.Hostname()
	if d.Name == "" {
		d.Name = host + "/coordinator"
	}
	if d.Outbox.Owner == "" {
		d.Outbox.Owner = d.Name
	}
	if d.Worker == nil && d.Config.Fleet.LocalWorker {
		d.Worker = &Worker{Config: d.Config, Store: d.Store, Pipeline: d.Pipeline, Name: host + "/watch", Host: host,
			Log: d.Log, Metrics: d.Metrics, Retry: d.Retry,
			OnStep: d.OnStep}
	}
	if d.Worker != nil && d.Worker.OnDone == nil {
		// The run is in the store: collect it now, not at the next poll.
		d.Worker.OnDone = func(*store.Job) { d.kick() }
	}
	d.sources = d.Config.Desk().Sources
	d.wake = make(chan struct{}, 1)
	d.in = &ingester{cfg: &d.Config, store: d.Store, verifier: d.Verifier, outbox: d.Outbox, metrics: d.Metrics, log: d.Log,
		sources: d.Sources, parsed: &intake.ParseCache{Max: 64 << 20}, maxDeaths: d.MaxCrashes, step: d.step, woken: d.Wake}
}

// watch reads one source until ctx ends, every poll: of its config (else
// d.Poll), logging and retrying failures.
func (d *Daemon) watch(ctx context.Context, name string, src mailbox.Source) {
	log := d.Log.With("source", name)
	every := d.Poll
	if p := d.sources[name].Poll; p > 0 {
		every = p
	}
	ingest := func(m *mailbox.Message, cur string) error { return d.Ingest(ctx, name, m, cur) }
	for ctx.Err() == nil {
		again := false
		// The mail is acted on in order behind the reader, which looks up
		// the keys of the mails ahead meanwhile (mailbox.ReadAhead).
		ra := mailbox.NewReadAhead(ctx, d.Verifier, ingest)
		cur, err := d.Store.Cursor(ctx, name)
		if err != nil {
			ra.Wait()
			if ctx.Err() == nil { // not a stop
				log.Error("reading cursor", "err", err)
			}
		} else if w, ok := src.(mailbox.Watcher); ok {
			err = w.Watch(ra.Context(), cur, ra.Take)
			if werr := ra.Wait(); werr != nil {
				err = werr
			}
		} else {
			var next string
			next, err = src.Poll(ra.Context(), cur, ra.Take)
			if werr := ra.Wait(); werr != nil {
				err = werr
			}
			// A whole Poll's cursor is past only what was stored: kept
			// too when it moved without a mail (a first start's point,
			// mail skipped at the end).
			if err == nil && next != cur {
				err = d.Store.Update(ctx, func(tx *store.Tx) error { return tx.SetCursor(ctx, name, next) })
				if err != nil && ctx.Err() == nil { // a stop is not an error: read again at the next start
					log.Error("saving cursor", "err", err)
				}
				// New mail: more may have come while it was read (a
				// burst), so the source is read again at once.
				again = err == nil
			}
		}
		if err != nil && ctx.Err() == nil {
			d.Metrics.SourceErrors.WithLabelValues(name).Inc()
			log.Warn("source failed; retrying", "err", err)
		}
		if again {
			continue
		}
		select {
		case <-ctx.Done():
		case <-time.After(every):
		}
	}
}

// RunOnce runs the next check that is due, or else, with a worker in this
// process, the next test job that is due and collects its run; it says
// whether it ran one.
func (d *Daemon) RunOnce(ctx context.Context) (bool, error) {
	if d.wake == nil {
		d.defaults()
	}
	if err := d.expire(ctx); err != nil {
		return false, err
	}
	if ran, err := d.checkOnce(ctx); ran || err != nil {
		return ran, err
	}
	if d.Worker == nil {
		return false, nil
	}
	ran, err := d.Worker.RunOnce(ctx)
	if ran {
		d.collect(ctx)
	}
	return ran, err
}

// checkOnce runs the coordinator's next due check (an incomplete series'
// wait is over), if any.
func (d *Daemon) checkOnce(ctx context.Context) (bool, error) {
	return claimOne(ctx, d.Store, store.Claim{Worker: d.Name, Lease: d.Config.Fleet.Lease, At: time.Now(),
		Kind: store.KindCheck, MaxAttempts: d.MaxAttempts}, d.step, d.runCheck)
}

// claimOne claims the job that c fits best, if one is due, and runs it; it
// says whether it ran one. The coordinator's checks and a worker's tests
// are claimed alike.
func claimOne(ctx context.Context, st *store.Store, c store.Claim, step func(Step),
	run func(context.Context, *store.Job)) (bool, error) {
	j, err := st.ClaimJob(ctx, c)
	if errors.Is(err, store.ErrNoJob) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	step(StepJobClaimed)
	run(ctx, j)
	return true, nil
}

func (d *Daemon) runCheck(ctx context.Context, j *store.Job) {
	log := d.Log.With("job", j.ID, "title", j.Title, "attempt", j.Attempts)
	bg := context.WithoutCancel(ctx)
	var c intake.Check
	err := json.Unmarshal(j.Request, &c)
	switch {
	case err != nil || c.Series.ThreadID == "":
		j.State, j.Blame, j.Error = store.JobFailed, blame.Infra, fmt.Sprintf("not a check: %v", err)
	case ctx.Err() != nil:
		j.State, j.Attempts = store.JobQueued, j.Attempts-1
	default:
		if err := d.in.checkIncomplete(ctx, j, &c); err != nil {
			d.retry(j, err, log)
		} else {
			j.State, j.Stage = store.JobDone, "done"
			d.Outbox.Wake()
		}
	}
	if err := d.Store.FinishJob(bg, j); err != nil {
		log.Error("recording the check's end", "err", err)
	}
}

// retry queues a check again after a failure of the store, with a growing
// backoff, or fails it for good after MaxAttempts.
func (d *Daemon) retry(j *store.Job, err error, log *slog.Logger) {
	if d.Retry.Again(j, err) {
		log.Error("check failed for good", "err", err)
		return
	}
	log.Warn("check failed; retrying later", "err", err, "not_before", j.NotBefore)
}

func (d *Daemon) updateGauges(ctx context.Context) {
	if counts, err := d.Store.JobCounts(ctx); err == nil {
		for _, st := range store.JobStates {
			d.Metrics.Jobs.WithLabelValues(string(st)).Set(float64(counts[st]))
		}
	}
	if counts, err := d.Store.OutboxCounts(ctx); err == nil {
		for _, st := range store.OutboxStates {
			d.Metrics.Outbox.WithLabelValues(string(st)).Set(float64(counts[st]))
		}
	}
}
