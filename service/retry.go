package service

import (
	"time"

	"github.com/patchbot/patchbot/blame"
	"github.com/patchbot/patchbot/store"
)

// Retry is how the daemon and the workers treat a job that failed for a
// reason not the patch's, or whose runner died while holding it. The zero
// value means the defaults.
type Retry struct {
	// Backoff is the wait before an infrastructure failure is retried,
	// doubled at each attempt; default one minute.
	Backoff time.Duration
	// MaxAttempts gives up after this many attempts (compared at every
	// claim); default 5.
	MaxAttempts int
	// MaxCrashes parks a job whose runner died while running it this many
	// times (a restart found it running, or its lease ran out); default 2.
	MaxCrashes int
}

func (r *Retry) defaults() {
	if r.Backoff == 0 {
		r.Backoff = time.Minute
	}
	if r.MaxAttempts == 0 {
		r.MaxAttempts = 5
	}
	if r.MaxCrashes == 0 {
		r.MaxCrashes = 2
	}
}

// again records err on j and either queues j for a later attempt or, after
// MaxAttempts, fails it for good; it says which.
func (r Retry) again(j *store.Job, err error) (forGood bool) {
	j.Blame, j.Error = blame.Of(err), err.Error()
	if j.Attempts >= r.MaxAttempts {
		j.State = store.JobFailed
		return true
	}
	// The wait is measured on the database's clock (RetryAfter), not on
	// this host's; NotBefore is this host's guess of it, for the log.
	j.RetryAfter = r.Backoff * time.Duration(1<<(j.Attempts-1))
	j.State, j.NotBefore = store.JobQueued, time.Now().Add(j.RetryAfter)
	return false
}
