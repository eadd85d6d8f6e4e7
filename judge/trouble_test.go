package judge

import (
	"strings"
	"testing"

	"github.com/patchbot/patchbot/blame"
	"github.com/patchbot/patchbot/suites"
	"github.com/patchbot/patchbot/vmrunner"
)

// What the reply says the base did depends on how the rounds ran: one
// after the other (the base's round n whole before the patched kernel's),
// or at once (the base's round n stopped with the patched kernel's, or
// finished before it), so that "clean" is never claimed of a round the
// base did not finish.
func TestTroubleSaysWhatTheBaseDid(t *testing.T) {
	be := func() error {
		return blame.On(blame.Patched, &vmrunner.BootError{Reason: "kernel BUG", Op: "run-suite", Suite: "cache-contention", Round: 2})
	}
	for _, tt := range []struct {
		name      string
		err       error
		want, not string
	}{
		{"interleaved", be(), "ran rounds 1 to 2 of cache-contention clean", "same time"},
		{"together, the base's round stopped", &suites.TogetherError{Err: be(), Round: 2},
			"ran round 1 of cache-contention clean and ran round 2 of cache-contention at the same time", "rounds 1 to 2"},
		{"together, the base's round finished", &suites.TogetherError{Err: be(), Round: 2, OthersDone: true},
			"ran rounds 1 to 2 of cache-contention clean, at the same time", "stopped"},
	} {
		tr := TroubleOf(tt.err)
		if tr == nil || !strings.Contains(tr.Base, tt.want) || strings.Contains(tr.Base, tt.not) {
			t.Errorf("%s: %+v, want %q and not %q", tt.name, tr, tt.want, tt.not)
		}
	}
}
