package suites

import "errors"

// runFuseWaitq is not implemented yet: see docs/suites.md.
func runFuseWaitq(r *round) error {
	return errors.New("the fuse-waitq workload is not implemented yet")
}
