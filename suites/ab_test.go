package suites

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/patchbot/patchbot/vmrunner/proto"
)

// fakeGuest answers run-suite with one sample and logs the order of calls.
type fakeGuest struct {
	label string
	log   *[]string
	fail  int // round to fail at
}

func (g fakeGuest) Do(ctx context.Context, req proto.Request, _ func(proto.Event)) (json.RawMessage, error) {
	*g.log = append(*g.log, g.label+req.Params[ParamKernel])
	if req.Round == g.fail {
		return nil, errors.New("guest died")
	}
	if req.Params[ParamImage] != "/dev/vda" || req.Profile != "quick" {
		return nil, errors.New("request lost its parameters")
	}
	return json.Marshal(&Result{Suite: req.Suite, Kernel: req.Params[ParamKernel], Accel: req.Params[ParamAccel],
		Samples: []Sample{{Workload: "w", Metric: "m", Round: req.Round, Value: float64(req.Round)}},
		Missing: []Missing{{Workload: "w", Metric: "ttwu", Reason: "no schedstats"}}})
}

func TestRunABInterleaves(t *testing.T) {
	s, _ := Lookup("cache-contention")
	cfg, _ := s.Resolve("quick")
	var log []string
	params := map[string]string{ParamImage: "/dev/vda"}
	sides := []Side{
		{Label: "base", Guest: fakeGuest{"A:", &log, 0}, Accel: "tcg", Params: params},
		{Label: "patched", Guest: fakeGuest{"B:", &log, 0}, Accel: "tcg", Params: params},
	}
	var progress strings.Builder
	res, err := RunAB(context.Background(), cfg, sides, 3, &progress)
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(log, " "); got != "A:base B:patched A:base B:patched A:base B:patched" {
		t.Errorf("order = %s, want A B A B A B", got)
	}
	for i, r := range res {
		if len(r.Samples) != 3 || len(r.Missing) != 1 || r.Kernel != sides[i].Label || r.Notes["rounds"] != "3" {
			t.Errorf("%s: %d samples, %d missing, kernel %q, notes %v", sides[i].Label, len(r.Samples), len(r.Missing), r.Kernel, r.Notes)
		}
	}
	if n := strings.Count(progress.String(), "\n"); n != 6 {
		t.Errorf("%d progress lines, want 6:\n%s", n, progress.String())
	}
	sides[1].Guest = fakeGuest{"B:", &log, 2}
	if _, err := RunAB(context.Background(), cfg, sides, 3, nil); err == nil || !strings.Contains(err.Error(), "round 2 on patched") {
		t.Errorf("failing guest: %v, want an error naming round 2 on patched", err)
	}
}
