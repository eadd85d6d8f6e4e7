package agent

import (
	"context"
	"fmt"

	"github.com/patchbot/patchbot/vmrunner/proto"
)

type sinkKey struct{}

// sink sends events of the request being served to the host.
type sink struct {
	w  *writer
	id string
}

// Logf sends a "log" event for the request ctx belongs to; a workload
// calls it to tell the host what it is doing. Outside the agent (a run on
// this host) it does nothing.
func Logf(ctx context.Context, format string, args ...any) {
	emit(ctx, proto.EventLog, fmt.Sprintf(format, args...))
}

// Progressf sends a "progress" event, e.g. "round 3/10".
func Progressf(ctx context.Context, format string, args ...any) {
	emit(ctx, proto.EventProgress, fmt.Sprintf(format, args...))
}

func emit(ctx context.Context, typ, msg string) {
	if s, ok := ctx.Value(sinkKey{}).(sink); ok {
		s.w.send(proto.Event{ID: s.id, Type: typ, Msg: msg})
	}
}
