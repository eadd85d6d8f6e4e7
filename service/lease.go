package service

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/patchbot/patchbot/store"
)

// A worker holds the job it runs by a lease in the store, stamped by the
// database's clock: heartbeat renews it while the job runs, and finish
// records the job's end while it may still hold.

// lease is a running job's hold: renewed by heartbeat, and lost (held
// ends with store.ErrLeaseLost) when the store says another worker has the
// job or when this worker could not renew it before it may have run out.
type lease struct {
	held    context.Context // ends when the lease is lost
	lose    context.CancelCauseFunc
	mu      sync.Mutex
	until   time.Time // by this host's monotonic clock: no later than the database's end of it
	renewed int

	store   *store.Store
	worker  string        // the worker's name: who holds the job
	term    time.Duration // the lease, renewed every quarter of it
	timeout time.Duration // bounds one call to the database
}

func (l *lease) deadline() time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.until
}

func (l *lease) lost() bool { return errors.Is(context.Cause(l.held), store.ErrLeaseLost) }

// finish records the job's end (j as it stands, with its run's files when
// it is done), and says whether it was recorded. A
// failure of the database is retried for as long as the lease may hold:
// the worker does not throw away a finished run because PostgreSQL
// restarted. A lease found lost, or run out, or a shutdown, ends the
// tries; the job is then another worker's, or this worker's next start's
// (RecoverJobs).
func (l *lease) finish(ctx context.Context, j *store.Job, log *slog.Logger, files []store.RunFile) bool {
	bg := context.WithoutCancel(ctx)
	wait := 100 * time.Millisecond
	for try := 1; ; try++ {
		tctx, cancel := context.WithTimeout(bg, 2*l.timeout)
		err := l.store.EndJob(tctx, j, files)
		cancel()
		switch {
		case err == nil:
			if try > 1 {
				log.Info("the job's end is recorded after the database came back", "tries", try)
			}
			return true
		case errors.Is(err, store.ErrLeaseLost):
			log.Error("the job's lease ran out before its end was recorded; another worker has it, "+
				"and this run is thrown away", "state", j.State)
			return false
		}
		if l.lost() || !time.Now().Add(wait).Before(l.deadline()) {
			log.Error("recording the job's end failed until its lease may have run out; "+
				"this run is thrown away, another worker (or this one, restarted) runs it", "err", err, "tries", try)
			l.lose(store.ErrLeaseLost)
			return false
		}
		if ctx.Err() != nil {
			log.Warn("recording the job's end failed as the worker stops; its next start takes the job back", "err", err)
			return false
		}
		log.Warn("recording the job's end failed; retrying", "err", err, "try", try)
		select {
		case <-time.After(wait):
		case <-l.held.Done():
		case <-ctx.Done():
		}
		wait = min(2*wait, l.term/8)
	}
}

// heartbeat renews the job's lease every quarter of it until held ends.
// The lease is lost when the store says the job is no longer this
// worker's, or when no renewal succeeded before the lease may have run
// out: a renewal counts from the moment it was sent, by this host's
// monotonic clock, never later than the database's stamp of it.
func (l *lease) heartbeat(j *store.Job, log *slog.Logger) {
	held := l.held
	tick := time.NewTicker(l.term / 4)
	defer tick.Stop()
	for {
		deadline := l.deadline()
		select {
		case <-held.Done():
			return
		case <-time.After(time.Until(deadline)):
			log.Error("could not renew the job's lease before it ran out (the database is out of reach); "+
				"stopping the job: another worker may hold it now", "lease", l.term)
			l.lose(store.ErrLeaseLost)
			return
		case <-tick.C:
		}
		sent := time.Now()
		ctx, cancel := context.WithTimeout(held, min(l.timeout, time.Until(deadline)))
		err := l.store.Heartbeat(ctx, l.worker, j.ID, l.term, time.Time{})
		cancel()
		switch {
		case err == nil:
			l.mu.Lock()
			l.until, l.renewed = sent.Add(l.term), l.renewed+1
			l.mu.Unlock()
		case errors.Is(err, store.ErrLeaseLost):
			log.Error("the job's lease is another worker's now; stopping the job")
			l.lose(store.ErrLeaseLost)
			return
		case held.Err() == nil:
			log.Warn("renewing the job's lease failed; retrying", "err", err, "lease_left", time.Until(deadline).Round(time.Millisecond))
		}
	}
}
