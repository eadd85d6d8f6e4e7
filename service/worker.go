package service

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/patchbot/patchbot/blame"
	"github.com/patchbot/patchbot/mailbox/outbox"
	"github.com/patchbot/patchbot/store"
)

// Worker runs test jobs from the store's queue, one at a time: it claims
// the job that fits it best, holds it by a lease that it renews while the
// job runs, and ends it in one transaction with its run's files and its
// reply (the coordinator writes the files into the run directory and
// sends the reply). It runs inside `patchbot watch` on a single host, or
// alone on each test host of a fleet (`patchbot worker`).
//
// A worker that dies mid-job (kill -9, its host gone) loses the lease; the
// job is then claimable by another worker and counts a crash. Whatever the
// dead worker's job did is thrown away: a late end is refused
// (store.ErrLeaseLost), and its reply, were it to come, has the job's
// Message-ID, which the outbox holds once.
type Worker struct {
	Config   Config
	Store    *store.Store
	Pipeline *Pipeline
	// Name owns the worker's claims: unique in the fleet, and the same
	// across restarts of one worker, so that a restart finds the job it
	// held (RecoverJobs) without waiting for the lease.
	Name string
	Host string
	// Caps is what the worker can run; DetectCaps by default.
	Caps    *store.Caps
	Log     *slog.Logger
	Metrics *Metrics
	// Lease and Poll default to the config's fleet.lease and fleet.poll;
	// the lease is renewed every quarter of it.
	Lease time.Duration
	Poll  time.Duration
	// Retry is how failed jobs are tried again, and when a job this
	// worker was found holding after its death is parked.
	Retry
	// WorkDir holds the runs while they run; default a temporary
	// directory, removed by Run.
	WorkDir string
	// OnStep is called at each step of running a job; crash tests stop the
	// process there. Nil in production.
	OnStep func(Step)
	// OnDone is told of each job that ended with its results stored, so
	// that a coordinator in the same process collects them at once.
	OnDone func(*store.Job)

	replies *outbox.Outbox // puts replies in the outbox table: never sends
	wake    chan struct{}
	ready   bool

	mu       sync.Mutex
	running  int64          // the job being run, 0 when none
	progress store.Progress // its current stage
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
	w.Retry.defaults()
	if w.Host == "" {
		w.Host, _ = os.Hostname()
	}
	if w.Name == "" {
		w.Name = w.Host
	}
	if w.Caps == nil {
		c := DetectCaps(w.Config, nil)
		w.Caps = &c
	}
	if w.replies == nil {
		w.replies = &outbox.Outbox{Store: w.Store, Log: w.Log, MaxRecipients: w.Config.Limits.MaxRecipients,
			OptOut: optOutAddrs(w.Config.Limits)}
	}
	if w.Pipeline != nil && w.Pipeline.OnStage == nil {
		w.Pipeline.OnStage = w.setStage
	}
	w.wake = make(chan struct{}, 1)
	w.Log = w.Log.With("worker", w.Name)
}

// Wake tells the worker that a job may be waiting.
func (w *Worker) Wake() { poke(w.wake) }

func (w *Worker) step(s Step) {
	if w.OnStep != nil {
		w.OnStep(s)
	}
}

// claim is the worker's claim at a time.
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
		"suites", w.Caps.Suites, "lease", w.Lease)
	for ctx.Err() == nil {
		ran, err := w.RunOnce(ctx)
		if err != nil && ctx.Err() == nil {
			w.Log.Error("claiming a job", "err", err)
		}
		if ran {
			continue
		}
		if err := w.Store.Heartbeat(ctx, w.Name, 0, 0, time.Now()); err != nil && ctx.Err() == nil {
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

// RunOnce runs the job that fits the worker best, if one is due, and says
// whether it ran one.
func (w *Worker) RunOnce(ctx context.Context) (bool, error) {
	w.defaults()
	return claimOne(ctx, w.Store, w.claim(time.Now()), w.step, w.runJob)
}

// setStage records the running job's stage: in this process for the
// dashboard's live progress, and in the store for a dashboard elsewhere.
func (w *Worker) setStage(name string, done, total int) {
	w.mu.Lock()
	w.progress = store.Progress{Stage: name, Done: done, Total: total}
	id := w.running
	w.mu.Unlock()
	if id != 0 {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		w.Store.SetStage(ctx, id, w.Name, name)
	}
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

// runDir is where the coordinator keeps a job's run.
func runDir(cfg Config, j *store.Job) string {
	return filepath.Join(cfg.StateDir, "runs", fmt.Sprintf("job-%d", j.ID))
}

func (w *Worker) runJob(ctx context.Context, j *store.Job) {
	log := w.Log.With("job", j.ID, "title", j.Title, "attempt", j.Attempts)
	bg := context.WithoutCancel(ctx)
	end := func() {
		if err := w.Store.FinishJob(bg, j); errors.Is(err, store.ErrLeaseLost) {
			log.Error("the job's lease ran out before it ended; another worker has it", "state", j.State)
		} else if err != nil {
			log.Error("recording the job's end", "err", err)
		}
	}
	var req Request
	if err := json.Unmarshal(j.Request, &req); err != nil {
		j.State, j.Blame, j.Error = store.JobFailed, blame.Infra, "undecodable request: "+err.Error()
		end()
		return
	}
	if req.Incomplete != nil {
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
	j.RunDir = runDir(w.Config, j)
	req.ReplyID = jobReplyID(w.Config, j)
	w.Store.SetStage(ctx, j.ID, w.Name, "running")
	log.Info("job started")
	start := time.Now()
	w.mu.Lock()
	w.running, w.progress = j.ID, store.Progress{Stage: "starting"}
	w.mu.Unlock()
	defer func() {
		w.mu.Lock()
		w.running = 0
		w.mu.Unlock()
	}()

	jobCtx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	hbDone := make(chan struct{})
	go func() {
		defer close(hbDone)
		w.heartbeat(jobCtx, j, cancel, log)
	}()
	out, err := w.Pipeline.Execute(jobCtx, &req, work)
	lost := errors.Is(context.Cause(jobCtx), store.ErrLeaseLost)
	cancel(nil)
	<-hbDone
	w.Metrics.JobSeconds.Observe(time.Since(start).Seconds())
	switch {
	case lost:
		log.Error("the job's lease was lost while it ran (this worker could not reach the database in time); "+
			"its result is thrown away, another worker runs it", "seconds", time.Since(start).Round(time.Second).Seconds())
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
		files, err := readRun(work)
		if err != nil {
			w.retry(j, err, log)
			break
		}
		j.State, j.Stage = store.JobDone, "done"
		// The job's end, its results and its reply, in one transaction:
		// none of them is kept without the others. The reply is not held
		// to the quotas: the job was accepted under them, and its
		// recipients were capped when it was queued.
		err = w.Store.Update(bg, func(tx *store.Tx) error {
			if err := tx.FinishJob(bg, j); err != nil {
				return err
			}
			if err := tx.PutRunFiles(bg, j.ID, files); err != nil {
				return err
			}
			if req.NoMail {
				return nil
			}
			_, _, err := putReply(bg, tx, w.replies, w.Config, w.Metrics, w.Log, out.Reply, threadRoot(req.Thread), "")
			return err
		})
		if errors.Is(err, store.ErrLeaseLost) {
			log.Error("the job's lease ran out as it ended; its result is thrown away, another worker runs it")
			return
		}
		if err != nil {
			w.retry(j, err, log)
			break
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

// heartbeat renews the job's lease every quarter of it until ctx ends; a
// lease found lost cancels the job. A failed renewal is retried at the
// next beat: the lease outlasts three of them.
func (w *Worker) heartbeat(ctx context.Context, j *store.Job, cancel context.CancelCauseFunc, log *slog.Logger) {
	tick := time.NewTicker(w.Lease / 4)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		err := w.Store.Heartbeat(ctx, w.Name, j.ID, w.Lease, time.Now())
		if errors.Is(err, store.ErrLeaseLost) {
			cancel(store.ErrLeaseLost)
			return
		}
		if err != nil && ctx.Err() == nil {
			log.Warn("renewing the job's lease failed; retrying", "err", err)
		}
	}
}

// retry queues a job again after an infrastructure failure, with a
// growing backoff, or fails it for good after MaxAttempts.
func (w *Worker) retry(j *store.Job, err error, log *slog.Logger) {
	forGood := w.Retry.again(j, err)
	w.Metrics.Failures.WithLabelValues(string(j.Blame)).Inc()
	if forGood {
		log.Error("job failed for good (infrastructure)", "err", err)
		return
	}
	log.Warn("job failed (infrastructure); retrying later", "err", err, "not_before", j.NotBefore)
}

// A run directory's files are bounded before they are stored: builds and
// guests write some of them, and nothing they write is trusted.
const (
	maxRunFile  = 16 << 20
	maxRunTotal = 64 << 20
	maxRunFiles = 1000
)

// readRun reads the regular files of a run directory, by slash-separated
// relative path. Links and special files are skipped; a file over
// maxRunFile keeps its end (a log's last lines decide), marked as cut.
func readRun(dir string) ([]store.RunFile, error) {
	var files []store.RunFile
	total := 0
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.Type().IsRegular() {
			return nil
		}
		rel, err := filepath.Rel(dir, path)
		if err != nil {
			return err
		}
		if len(files) >= maxRunFiles {
			return fmt.Errorf("the run directory holds more than %d files", maxRunFiles)
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		if len(data) > maxRunFile {
			data = append([]byte(fmt.Sprintf("[patchbot: the first %d bytes were cut]\n", len(data)-maxRunFile)), data[len(data)-maxRunFile:]...)
		}
		if total += len(data); total > maxRunTotal {
			return fmt.Errorf("the run directory holds more than %d MiB", maxRunTotal>>20)
		}
		files = append(files, store.RunFile{Name: filepath.ToSlash(rel), Data: data})
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("reading the run: %w", err)
	}
	return files, nil
}
