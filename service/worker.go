package service

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/patchbot/patchbot/blame"
	"github.com/patchbot/patchbot/config"
	"github.com/patchbot/patchbot/intake"
	"github.com/patchbot/patchbot/store"
)

// Worker runs test jobs from the store's queue, one at a time: it claims
// the job that fits it best, holds it by a lease that it renews while the
// job runs, and ends it with its run's files, at once (the coordinator
// writes the files into the run directory, and renders and sends the
// reply). It runs inside `patchbot watch` on a single host, or
// alone on each test host of a fleet (`patchbot worker`).
//
// A worker that dies mid-job (kill -9, its host gone) loses the lease; the
// job is then claimable by another worker and counts a crash. Whatever the
// dead worker's job did is thrown away: a late end is refused
// (store.ErrLeaseLost), and its run is never answered. A worker cut off from the
// database stops the job itself once its lease may have run out (by its
// own monotonic clock, from the last renewal it saw succeed), so that it
// does not go on with work another worker now holds.
//
// Leases are stamped and judged by the database's clock, never the
// worker's: its wall clock may be minutes off.
type Worker struct {
	Config   config.Config
	Store    *store.Store
	Pipeline *Pipeline
	// Name owns the worker's claims: unique in the fleet, and the same
	// across restarts of one worker, so that a restart finds the job it
	// held (RecoverJobs) without waiting for the lease.
	Name string
	Host string
	// Caps is what the worker can run; config.Config.Caps by default.
	Caps    *store.Caps
	Log     *slog.Logger
	Metrics *Metrics
	// Lease and Poll default to the config's fleet.lease and fleet.poll;
	// the lease is renewed every quarter of it.
	Lease time.Duration
	Poll  time.Duration
	// Retry is how failed jobs are tried again, and when a job this
	// worker was found holding after its death is parked.
	store.Retry
	// WorkDir holds the runs while they run; default a temporary
	// directory, removed by Run.
	WorkDir string
	// OnStep is called at each step of running a job; crash tests stop the
	// process there. Nil in production.
	OnStep func(Step)
	// OnDone is told of each job that ended with its results stored, so
	// that a coordinator in the same process collects them at once.
	OnDone func(*store.Job)

	wake     chan struct{}
	ready    bool
	draining atomic.Bool

	mu       sync.Mutex
	running  int64           // the job being run, 0 when none
	held     context.Context // its lease: ends when the lease is lost
	progress store.Progress  // its current stage
}

func (w *Worker) defaults() {
	if w.ready {
		return
	}
	w.ready = true
	if w.Log == nil {
		w.Log = slog.Default()
	}
	if w.Metrics == nil {
		w.Metrics = NewMetrics()
	}
	if w.Lease == 0 {
		w.Lease = w.Config.Fleet.Lease
	}
	if w.Lease == 0 {
		w.Lease = 2 * time.Minute
	}
	if w.Poll == 0 {
		w.Poll = w.Config.Fleet.Poll
	}
	if w.Poll == 0 {
		w.Poll = 5 * time.Second
	}
	w.Retry.Defaults()
	if w.Host == "" {
		w.Host, _ = os.Hostname()
	}
	if w.Name == "" {
		w.Name = w.Host
	}
	if w.Caps == nil {
		c := w.Config.Caps(nil)
		w.Caps = &c
	}
	if w.Pipeline != nil && w.Pipeline.OnStage == nil {
		w.Pipeline.OnStage = w.setStage
	}
	w.wake = make(chan struct{}, 1)
	w.Log = w.Log.With("worker", w.Name)
}

// Drain makes Run take no new job: the running one, if any, runs to its
// end and is recorded, then Run returns (a clean stop). It is how a worker
// is taken out of a fleet without giving its job back (SIGHUP to
// `patchbot worker`).
func (w *Worker) Drain() {
	w.defaults()
	if !w.draining.Swap(true) {
		w.Log.Info("draining: the running job, if any, runs to its end; no new job is taken")
	}
	w.Wake()
}

// Wake tells the worker that a job may be waiting.
func (w *Worker) Wake() { poke(w.wake) }

func (w *Worker) step(s Step) {
	if w.OnStep != nil {
		w.OnStep(s)
	}
}

// claim is the worker's claim at a time; the zero time is the database's
// clock.
func (w *Worker) claim(at time.Time) store.Claim {
	w.defaults()
	return store.Claim{Worker: w.Name, Lease: w.Lease, At: at, Kind: store.KindTest, Caps: *w.Caps, MaxAttempts: w.MaxAttempts}
}

// Run registers the worker with what it can run, takes back a job its
// previous run held, and runs jobs until ctx ends. On SIGTERM (ctx ends)
// the running job's stage is abandoned and the job given back to the
// queue without spending an attempt.
func (w *Worker) Run(ctx context.Context) error {
	w.defaults()
	if w.WorkDir == "" {
		dir, err := os.MkdirTemp("", "patchbot-worker-")
		if err != nil {
			return fmt.Errorf("worker: %w", err)
		}
		defer os.RemoveAll(dir)
		w.WorkDir = dir
	}
	if err := w.Store.RegisterWorker(ctx, store.WorkerInfo{Name: w.Name, Host: w.Host, Caps: *w.Caps}); err != nil {
		if ctx.Err() != nil {
			return nil // stopped while starting: a clean stop
		}
		return err
	}
	if err := w.Recover(ctx); err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return err
	}
	w.Log.Info("worker started", "accel", w.Caps.Accel, "cpus", w.Caps.CPUs, "mem_mib", w.Caps.MemMiB,
		"suites", w.Caps.Suites, "lease", w.Lease, "dry_run", w.Config.DryRun != nil)
	if w.Config.DryRun != nil {
		w.Log.Warn("dry run: this worker builds and boots nothing, and its replies carry made-up numbers (dry_run: in the config)")
	}
	for ctx.Err() == nil && !w.draining.Load() {
		ran, err := w.RunOnce(ctx)
		if err != nil && ctx.Err() == nil {
			w.Log.Error("claiming a job", "err", err)
		}
		if ran {
			continue
		}
		hctx, cancel := context.WithTimeout(ctx, w.dbTimeout())
		err = w.Store.Heartbeat(hctx, w.Name, 0, 0, time.Time{})
		cancel()
		if err != nil && ctx.Err() == nil {
			w.Log.Warn("heartbeat", "err", err)
		}
		select {
		case <-ctx.Done():
		case <-w.wake:
		case <-time.After(w.Poll):
		}
	}
	bg, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	if err := w.Store.StopWorker(bg, w.Name); err != nil {
		w.Log.Warn("recording the stop", "err", err)
	}
	w.Log.Info("worker stopped")
	return nil
}

// Recover runs once at start, before any claim: a job still running under
// the worker's name was running when it died. It is queued again, or
// parked after MaxCrashes such deaths.
func (w *Worker) Recover(ctx context.Context) error {
	w.defaults()
	requeued, parked, err := w.Store.RecoverJobs(ctx, w.Name, w.MaxCrashes)
	if err != nil {
		return err
	}
	logLost(w.Log, w.Metrics, requeued, parked, "the worker died while running it")
	return nil
}

// logLost logs the jobs a dead worker left: requeued as a warning, parked
// as an error (a person must look at it).
func logLost(log *slog.Logger, m *Metrics, requeued, parked []*store.Job, why string) {
	for _, j := range requeued {
		m.Lost.Inc()
		log.Warn("job lost: "+why+"; queued again", "job", j.ID, "title", j.Title, "crashes", j.Crashes)
	}
	for _, j := range parked {
		m.Lost.Inc()
		m.Parked.Inc()
		log.Error("job parked: "+why+" twice; it will not run again and its author is not mailed "+
			"until a person unparks it", "job", j.ID, "title", j.Title, "crashes", j.Crashes, "worker", j.Owner)
	}
}

// dbTimeout bounds one call to the database: a link that went silent
// (its host cut off, no reset) must not hold a renewal past the lease.
func (w *Worker) dbTimeout() time.Duration { return max(w.Lease/4, time.Second) }

// RunOnce runs the job that fits the worker best, if one is due, and says
// whether it ran one.
func (w *Worker) RunOnce(ctx context.Context) (bool, error) {
	w.defaults()
	// The lease runs from the database's clock at the claim, which is no
	// earlier than now: held counts it on this host's monotonic clock.
	sent := time.Now()
	cctx, cancel := context.WithTimeout(ctx, 2*w.dbTimeout())
	j, err := w.Store.ClaimJob(cctx, w.claim(time.Time{}))
	cancel()
	if errors.Is(err, store.ErrNoJob) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	w.step(StepJobClaimed)
	w.runJob(ctx, j, sent.Add(w.Lease))
	return true, nil
}

// setStage records the running job's stage: in this process for the
// dashboard's live progress, and in the store for a dashboard elsewhere.
func (w *Worker) setStage(name string, done, total int) {
	w.mu.Lock()
	w.progress = store.Progress{Stage: name, Done: done, Total: total}
	id, held := w.running, w.held
	w.mu.Unlock()
	if id != 0 {
		w.writeStage(held, id, name)
	}
}

// writeStage stores the running job's stage, for no longer than one call
// to the database and no longer than the lease holds: a worker cut off
// from the database must not wait on a stage past the moment it has to
// stop the job. A stage not written is only the dashboard's loss.
func (w *Worker) writeStage(held context.Context, id int64, name string) {
	ctx, cancel := context.WithTimeout(held, w.dbTimeout())
	defer cancel()
	w.Store.SetStage(ctx, id, w.Name, name)
}

// progressOf is the dashboard's view of the job this worker runs.
func (w *Worker) progressOf(jobID int64) (store.Progress, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if jobID == 0 || jobID != w.running {
		return store.Progress{}, false
	}
	return w.progress, true
}

// jobRunDir is where the coordinator keeps a job's run.
func jobRunDir(cfg config.Config, j *store.Job) string {
	return filepath.Join(cfg.StateDir, "runs", fmt.Sprintf("job-%d", j.ID))
}

func (w *Worker) runJob(ctx context.Context, j *store.Job, until time.Time) {
	log := w.Log.With("job", j.ID, "title", j.Title, "attempt", j.Attempts)
	held, lose := context.WithCancelCause(context.WithoutCancel(ctx))
	defer lose(nil)
	l := &lease{held: held, lose: lose, until: until, store: w.Store, worker: w.Name, term: w.Lease, timeout: w.dbTimeout()}
	// The lease is renewed until the job has ended, its end recorded.
	hbDone := make(chan struct{})
	defer func() { lose(nil); <-hbDone }()
	go func() {
		defer close(hbDone)
		l.heartbeat(j, log)
	}()
	end := func() { l.finish(ctx, j, log, nil) }
	var req intake.Request
	if err := json.Unmarshal(j.Request, &req); err != nil {
		j.State, j.Blame, j.Error = store.JobFailed, blame.Infra, "undecodable request: "+err.Error()
		end()
		return
	}
	if j.Kind == store.KindCheck {
		j.State, j.Blame, j.Error = store.JobFailed, blame.Infra, "an incomplete-series check reached a worker"
		end()
		return
	}
	// The run is written here, on the worker's disk, then stored with the
	// job's end; the coordinator writes it into its run directory, by the
	// same name (the dashboard's links and the published copy use it).
	workDir := w.WorkDir
	if workDir == "" { // RunOnce without Run: a directory for this job alone
		d, err := os.MkdirTemp("", "patchbot-worker-")
		if err != nil {
			w.retry(j, fmt.Errorf("worker: %w", err), log)
			end()
			return
		}
		defer os.RemoveAll(d)
		workDir = d
	}
	work := filepath.Join(workDir, fmt.Sprintf("job-%d", j.ID))
	os.RemoveAll(work)
	defer os.RemoveAll(work)
	j.RunDir = jobRunDir(w.Config, j)
	req.ReplyID = w.Config.Desk().ReplyID(j.ID, j.Dedupe)
	w.writeStage(held, j.ID, "running")
	log.Info("job started")
	start := time.Now()
	w.mu.Lock()
	w.running, w.held, w.progress = j.ID, held, store.Progress{Stage: "starting"}
	w.mu.Unlock()
	defer func() {
		w.mu.Lock()
		w.running, w.held = 0, nil
		w.mu.Unlock()
	}()

	// The job runs until it ends, the worker shuts down (ctx), or the
	// lease is lost (held).
	jobCtx, cancel := context.WithCancel(ctx)
	stop := context.AfterFunc(held, cancel)
	out, err := w.Pipeline.Execute(jobCtx, &req, work)
	stop()
	cancel()
	w.Metrics.JobSeconds.Observe(time.Since(start).Seconds())
	switch {
	case l.lost():
		log.Error("the job's lease was lost while it ran (this worker could not reach the database in time); "+
			"its work is stopped and thrown away, another worker runs it", "seconds", time.Since(start).Round(time.Second).Seconds())
		return
	case ctx.Err() != nil:
		// Shutting down: the job goes back to the queue, and the claim,
		// not used, is given back, so that restarts do not spend its
		// attempts.
		j.State, j.Stage, j.Attempts = store.JobQueued, "interrupted", j.Attempts-1
		log.Info("job interrupted by shutdown; it will run again")
	case err != nil:
		// Execute's errors are never the patch's (blame.Of is Infra): a
		// base kernel that panics is retried, not mailed.
		w.retry(j, err, log)
	default:
		w.step(StepJobExecuted)
		if out.Run.Failure != nil {
			w.Metrics.Failures.WithLabelValues(string(blame.Patch)).Inc()
			j.Blame, j.Error = blame.Patch, string(out.Run.Failure.Stage)+": "+out.Run.Failure.Detail
		}
		if len(out.Reply.Folded) > 0 {
			log.Warn("the reply had lines too wide for mail; they were folded (a template to fix)", "lines", out.Reply.Folded)
		}
		files, err := store.ReadRunDir(work)
		if err != nil {
			w.retry(j, err, log)
			break
		}
		j.State, j.Stage = store.JobDone, "done"
		// The job's end and its results, in one call: neither is kept
		// without the other. The worker reports results, never mail: the
		// coordinator renders the reply from them and its own record of
		// the job when it collects the run (CollectRuns).
		if !l.finish(ctx, j, log, files) {
			return
		}
		if req.NoMail {
			log.Info("reply kept with the run, not mailed (a dashboard run)", "run_dir", j.RunDir)
		}
		w.step(StepJobReplied)
		log.Info("job done", "failure", j.Error, "seconds", time.Since(start).Round(time.Second).Seconds())
		w.step(StepJobDone)
		if w.OnDone != nil {
			w.OnDone(j)
		}
		return
	}
	end()
}

// retry queues a job again after an infrastructure failure, with a
// growing backoff, or fails it for good after MaxAttempts.
func (w *Worker) retry(j *store.Job, err error, log *slog.Logger) {
	forGood := w.Retry.Again(j, err)
	w.Metrics.Failures.WithLabelValues(string(j.Blame)).Inc()
	if forGood {
		log.Error("job failed for good (infrastructure)", "err", err)
		return
	}
	log.Warn("job failed (infrastructure); retrying later", "err", err, "not_before", j.NotBefore)
}
