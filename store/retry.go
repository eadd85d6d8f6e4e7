package store

import (
	"time"

	"github.com/patchbot/patchbot/blame"
)

// Retry is how a job that failed for a reason not the patch's is tried
// again, and when one whose runner died while holding it is parked: the
// daemon's and every worker's policy. The zero value means the defaults
// (Defaults).
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
	// MaxAge gives up on a job first queued longer ago than this, however
	// few its attempts: retries have a budget in time too; default 12h.
	MaxAge time.Duration
}

// Defaults sets what is zero to its default.
func (r *Retry) Defaults() {
	if r.Backoff == 0 {
		r.Backoff = time.Minute
	}
	if r.MaxAttempts == 0 {
		r.MaxAttempts = 5
	}
	if r.MaxCrashes == 0 {
		r.MaxCrashes = 2
	}
	if r.MaxAge == 0 {
		r.MaxAge = 12 * time.Hour
	}
}

// Again records err on j and either queues j for a later attempt or, after
// MaxAttempts or once the next attempt would start past MaxAge, fails it
// for good; it says which.
func (r Retry) Again(j *Job, err error) (forGood bool) {
	j.Blame, j.Error = blame.Of(err), err.Error()
	wait := r.Backoff * time.Duration(1<<(j.Attempts-1))
	next := time.Now().Add(wait)
	if j.Attempts >= r.MaxAttempts || (r.MaxAge > 0 && !j.Created.IsZero() && next.Sub(j.Created) > r.MaxAge) {
		j.State = JobFailed
		return true
	}
	// The wait is measured on the database's clock (RetryAfter), not on
	// this host's; NotBefore is this host's guess of it, for the log.
	j.RetryAfter = wait
	j.State, j.NotBefore = JobQueued, next
	return false
}
