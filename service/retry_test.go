package service

import (
	"errors"
	"testing"
	"time"

	"github.com/patchbot/patchbot/blame"
	"github.com/patchbot/patchbot/store"
)

func TestRetryBacksOffThenGivesUp(t *testing.T) {
	var r Retry
	r.defaults()
	if r.Backoff != time.Minute || r.MaxAttempts != 5 || r.MaxCrashes != 2 {
		t.Fatalf("defaults: %+v", r)
	}
	r = Retry{Backoff: time.Second, MaxAttempts: 3}
	err := errors.New("the VM host went away")
	j := &store.Job{}
	var waits []time.Duration
	for attempt := 1; attempt <= 3; attempt++ {
		j.Attempts = attempt
		before := time.Now()
		forGood := r.again(j, err)
		if forGood != (attempt == 3) {
			t.Fatalf("attempt %d: for good = %v", attempt, forGood)
		}
		if j.Blame != blame.Infra || j.Error != err.Error() {
			t.Fatalf("attempt %d: blame %q, error %q", attempt, j.Blame, j.Error)
		}
		if !forGood {
			if j.State != store.JobQueued {
				t.Fatalf("attempt %d: state %s, want queued", attempt, j.State)
			}
			waits = append(waits, j.NotBefore.Sub(before).Round(100*time.Millisecond))
		} else if j.State != store.JobFailed {
			t.Fatalf("last attempt: state %s, want failed", j.State)
		}
	}
	if len(waits) != 2 || waits[0] != time.Second || waits[1] != 2*time.Second {
		t.Errorf("waits %v, want [1s 2s] (doubling)", waits)
	}
}
