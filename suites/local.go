package suites

import (
	"context"
	"fmt"
	"io"

	"github.com/patchbot/patchbot/images/fsimage"
	"github.com/patchbot/patchbot/vmrunner/proto"
)

// RunLocal runs rounds of a suite on this machine and its kernel (root is
// needed: the workloads mount images and drop caches), staging the suite's
// image under imageDir, and returns the merged Result with the model's
// prediction, as a guest run would.
func RunLocal(ctx context.Context, cfg *Config, rounds int, imageDir string, progress io.Writer) (*Result, error) {
	if progress == nil {
		progress = io.Discard
	}
	params := map[string]string{ParamKernel: "local", ParamAccel: "host"}
	if cfg.Image != nil {
		img, _, err := fsimage.Build(ctx, *cfg.Image, imageDir)
		if err != nil {
			return nil, fmt.Errorf("staging the %s image: %w", cfg.Suite, err)
		}
		params[ParamImage] = img
		defer Release()
	}
	var all []*Result
	for n := 1; n <= rounds; n++ {
		// A profile that spreads a round over boots (Params.Boots) runs
		// its parts here on the one kernel this host has.
		var parts []*Result
		for range cfg.Params.boots() {
			res, err := RunRound(ctx, proto.Request{Op: proto.OpRunSuite, Suite: cfg.Suite, Profile: cfg.Profile, Round: n, Params: params})
			if err != nil {
				return nil, err
			}
			fmt.Fprintf(progress, "%s round %d/%d local %6.1fs\n", cfg.Suite, n, rounds, res.Finished.Sub(res.Started).Seconds())
			parts = append(parts, res)
		}
		all = append(all, FoldBoots(parts))
	}
	res := Merge(all)
	pred, err := Predict(cfg)
	if err != nil {
		return nil, err
	}
	res.Model = pred
	return res, nil
}
