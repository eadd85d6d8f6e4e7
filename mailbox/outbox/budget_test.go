package outbox

import (
	"testing"
	"time"

	"github.com/patchbot/patchbot/store"
)

// Retries have a budget in time: a reply whose next attempt would start
// past MaxAge since it was queued fails for good instead.
func TestRetryBudgetInTime(t *testing.T) {
	o := &Outbox{MaxAge: time.Hour}
	now := time.Now()
	young := &store.OutboxMessage{Created: now.Add(-10 * time.Minute)}
	old := &store.OutboxMessage{Created: now.Add(-50 * time.Minute)}
	if o.tooOld(young, now.Add(o.backoff(3))) {
		t.Error("a reply queued 10 minutes ago, retried in 4, is not past an hour")
	}
	if !o.tooOld(old, now.Add(o.backoff(5))) {
		t.Error("a reply queued 50 minutes ago, retried in 16, is past an hour")
	}
	if (&Outbox{}).tooOld(&store.OutboxMessage{Created: now.Add(-71 * time.Hour)}, now.Add(time.Minute)) {
		t.Error("the default budget is 72 hours")
	}
}
