package store

import (
	"errors"
	"testing"
	"time"

	"github.com/patchbot/patchbot/blame"
)

func TestRetryBacksOffThenGivesUp(t *testing.T) {
	var r Retry
	r.Defaults()
	if r.Backoff != time.Minute || r.MaxAttempts != 5 || r.MaxCrashes != 2 || r.MaxAge != 12*time.Hour {
		t.Fatalf("defaults: %+v", r)
	}
	r = Retry{Backoff: time.Second, MaxAttempts: 3}
	err := errors.New("the VM host went away")
	j := &Job{}
	var waits []time.Duration
	for attempt := 1; attempt <= 3; attempt++ {
		j.Attempts = attempt
		before := time.Now()
		forGood := r.Again(j, err)
		if forGood != (attempt == 3) {
			t.Fatalf("attempt %d: for good = %v", attempt, forGood)
		}
		if j.Blame != blame.Infra || j.Error != err.Error() {
			t.Fatalf("attempt %d: blame %q, error %q", attempt, j.Blame, j.Error)
		}
		if !forGood {
			if j.State != JobQueued {
				t.Fatalf("attempt %d: state %s, want queued", attempt, j.State)
			}
			waits = append(waits, j.NotBefore.Sub(before).Round(100*time.Millisecond))
		} else if j.State != JobFailed {
			t.Fatalf("last attempt: state %s, want failed", j.State)
		}
	}
	if len(waits) != 2 || waits[0] != time.Second || waits[1] != 2*time.Second {
		t.Errorf("waits %v, want [1s 2s] (doubling)", waits)
	}
}

// A job's retries have a budget in time as well as in attempts: one queued
// long ago fails for good at its next failure, whatever its attempts.
func TestRetryGivesUpPastItsTimeBudget(t *testing.T) {
	r := Retry{Backoff: time.Minute, MaxAttempts: 5, MaxAge: time.Hour}
	err := errors.New("the build reached a sandbox limit")
	young := &Job{Attempts: 1, Created: time.Now().Add(-10 * time.Minute)}
	if r.Again(young, err) || young.State != JobQueued {
		t.Fatalf("a young job: state %s, want queued", young.State)
	}
	old := &Job{Attempts: 1, Created: time.Now().Add(-59 * time.Minute)}
	if !r.Again(old, err) || old.State != JobFailed {
		t.Errorf("a job whose next attempt would start past its hour: state %s, want failed", old.State)
	}
}
