package invm

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/patchbot/patchbot/vmrunner"
)

// rebootStub is an instance whose reboots fail with errs, in turn.
type rebootStub struct {
	vmrunner.Instance
	errs  []error
	calls int
}

func (s *rebootStub) Reboot(context.Context) (vmrunner.Info, error) {
	s.calls++
	if len(s.errs) == 0 {
		return vmrunner.Info{}, nil
	}
	err := s.errs[0]
	s.errs = s.errs[1:]
	return vmrunner.Info{}, err
}

// A reboot that hangs is tried once more, and a second hang is returned;
// a panic is the kernel's at once.
func TestRebooterTriesAHangOnceMore(t *testing.T) {
	hang := &vmrunner.BootError{Reason: "hang: no answer within 1m0s waiting for the agent's ready"}
	panicked := &vmrunner.BootError{Reason: "panic"}
	for _, c := range []struct {
		name  string
		errs  []error
		calls int
		err   error
	}{
		{"a hang, then ready", []error{hang}, 2, nil},
		{"two hangs", []error{hang, hang}, 2, hang},
		{"a panic", []error{panicked}, 1, panicked},
	} {
		stub := &rebootStub{errs: c.errs}
		var progress strings.Builder
		err := rebooter(stub, "patched", &progress)(context.Background())
		if stub.calls != c.calls || !errors.Is(err, c.err) {
			t.Errorf("%s: %d reboots, err %v; want %d, %v", c.name, stub.calls, err, c.calls, c.err)
		}
		if again := strings.Contains(progress.String(), "rebooting patched: "); again != (c.calls == 2) {
			t.Errorf("%s: progress %q", c.name, progress.String())
		}
	}
}
