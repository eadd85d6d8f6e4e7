package suites

import (
	"context"
	"fmt"

	"github.com/patchbot/patchbot/vmrunner/proto"
)

// RunRound runs one round of the suite workload that req names on the
// machine it is called on (the guest, through the agent, or this host with
// --local) and returns its raw samples.
func RunRound(ctx context.Context, req proto.Request) (*Result, error) {
	return nil, fmt.Errorf("suite %q: no workloads are implemented yet", req.Suite)
}
