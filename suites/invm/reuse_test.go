package invm

import (
	"context"
	"encoding/json"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/patchbot/patchbot/images"
	"github.com/patchbot/patchbot/judge"
	"github.com/patchbot/patchbot/suites"
	"github.com/patchbot/patchbot/vmrunner/proto"
)

// memBases keeps base rounds in memory (the store's are tested in store).
type memBases struct {
	m  map[string][]byte
	at map[string]time.Time
}

func (b *memBases) BaseRounds(_ context.Context, key string) ([]byte, time.Time, bool, error) {
	r, ok := b.m[key]
	return r, b.at[key], ok, nil
}

func (b *memBases) PutBaseRounds(_ context.Context, key string, r []byte, at time.Time) error {
	b.m[key], b.at[key] = r, at
	return nil
}

// levelGuest answers every round with cache-contention's primary metrics
// at *level (a host that drifts changes it), and logs the rounds it ran.
type levelGuest struct {
	label string
	level *float64
	log   *[]string
}

func (g levelGuest) Do(_ context.Context, req proto.Request, _ func(proto.Event)) (json.RawMessage, error) {
	if req.Op == proto.OpPrepare {
		return json.Marshal(suites.Prepared{})
	}
	*g.log = append(*g.log, g.label)
	res := &suites.Result{Suite: req.Suite, Kernel: req.Params[suites.ParamKernel]}
	wobble := 1 + 0.01*float64(req.Round%3)
	for _, m := range []struct {
		w, metric string
		higher    bool
	}{{"read-storm", "files_per_s", true}, {"read-storm", "latency_p99", false}, {"mixed", "ops_per_s", true},
		{"mixed", "latency_p99", false}, {"stat-storm", "files_per_s", true}, {"stat-storm", "latency_p99", false}} {
		res.Samples = append(res.Samples, suites.Sample{Suite: req.Suite, Workload: m.w, Metric: m.metric,
			HigherIsBetter: m.higher, Round: req.Round, Value: *g.level * 100 * wobble})
	}
	return json.Marshal(res)
}

// settleAt4 is judge.Rounds's reuse of base rounds and drift check, with
// a rule that runs 3 to 6 rounds and is settled once the patched kernel
// has 4 rounds and the base 4 or more.
type settleAt4 struct{ judge.Rounds }

func (settleAt4) Bounds() (int, int) { return 3, 6 }
func (settleAt4) Plan() string       { return "test" }
func (settleAt4) Stop(rs []*suites.Result) string {
	if len(rs) == 2 && len(rs[0].Samples) >= 4*6 && len(rs[1].Samples) >= 4*6 {
		return suites.StopSettled
	}
	return ""
}

// A second series on the same base reuses the base's kept rounds after
// one control round that agrees with them, and measures only the patched
// kernel after it; a host that drifted is measured afresh, and its rounds
// replace the kept ones.
func TestReuseBaseRounds(t *testing.T) {
	cfg := resolve(t, "cache-contention", "quick")
	baseLevel, patchedLevel := 1.0, 1.5
	var log []string
	sides := []suites.Side{
		{Label: "base", Guest: levelGuest{"A", &baseLevel, &log}},
		{Label: "patched", Guest: levelGuest{"B", &patchedLevel, &log}},
	}
	plan := settleAt4{}
	bases := &memBases{m: map[string][]byte{}, at: map[string]time.Time{}}
	now := time.Date(2026, 12, 3, 14, 0, 0, 0, time.UTC)
	reuse := &Reuse{Bases: bases, Key: "k", Now: func() time.Time { return now }}
	run := func() []*suites.Result {
		t.Helper()
		log = nil
		out, err := reuse.run(context.Background(), cfg, sides, plan, suites.Quiet{}, io.Discard)
		if err != nil {
			t.Fatal(err)
		}
		return out
	}

	first := run()
	if got := strings.Join(log, ""); got != "ABABABAB" || first[0].Reused != 0 {
		t.Fatalf("first series: rounds %s, reused %d: want ABABABAB afresh", got, first[0].Reused)
	}
	if _, _, ok, _ := bases.BaseRounds(context.Background(), "k"); !ok {
		t.Fatal("the base's rounds were not kept")
	}

	second := run()
	if got := strings.Join(log, ""); got != "ABBBB" {
		t.Errorf("second series: rounds %s, want one control round of each, then the patched kernel alone (ABBBB)", got)
	}
	if second[0].Reused != 4 || len(second[0].Samples) != 5*6 || len(second[1].Samples) != 4*6 {
		t.Errorf("second series: base reused %d rounds with %d samples, patched %d samples: want 4 reused, 5 and 4 rounds",
			second[0].Reused, len(second[0].Samples), len(second[1].Samples))
	}
	for _, smp := range second[0].Samples[:4*6] {
		if smp.Round > 0 {
			t.Fatalf("a kept round is numbered %d, as a turn of this run", smp.Round)
		}
	}

	baseLevel = 1.3 // the host got faster: beyond the kept rounds and the noise floor
	third := run()
	if got := strings.Join(log, ""); got != "ABABABAB" || third[0].Reused != 0 {
		t.Errorf("a drifted host: rounds %s, reused %d: want ABABABAB afresh", got, third[0].Reused)
	}
	raw, _, _, _ := bases.BaseRounds(context.Background(), "k")
	var kept suites.Result
	if err := json.Unmarshal(raw, &kept); err != nil || len(kept.Rounds) != 4 || kept.Samples[0].Value < 125 {
		t.Errorf("the drifted host's rounds did not replace the kept ones: %d rounds, first value %v (%v)",
			len(kept.Rounds), kept.Samples[0].Value, err)
	}

	now = now.Add(judge.ReuseMaxAge + time.Minute)
	run()
	if got := strings.Join(log, ""); got != "ABABABAB" {
		t.Errorf("kept rounds past MaxAge: rounds %s, want afresh", got)
	}
}

// Kept base rounds are for the profile's shape, not only its name: a
// profile reshaped under the same name (more windows a round) measures
// something else, and its kept rounds must not be reused.
func TestBaseKeyFollowsTheProfilesShape(t *testing.T) {
	base := &images.Build{Commit: "abc", ConfigHash: "h"}
	vm := VMConfig{Backend: "qemu", CPUs: 2, MemMiB: 1024}
	cfg := resolve(t, "cache-contention", suites.DefaultProfile)
	key := baseKey(cfg, base, vm)
	if BaseKey("cache-contention", "", base, vm) != key || BaseKey("cache-contention", suites.DefaultProfile, base, vm) != key {
		t.Error("the default profile, named or not, has another key than its resolved shape")
	}
	reshaped := *cfg
	reshaped.Params.Windows++
	if baseKey(&reshaped, base, vm) == key {
		t.Error("a profile with another number of windows has the same key")
	}
	shift := 0
	shifted := *cfg
	shifted.Params.ICountShift = &shift
	if baseKey(&shifted, base, vm) == key {
		t.Error("a profile at icount shift 0 has the key of one at the default shift")
	}
	if BaseKey("cache-contention", "quick", base, vm) == key {
		t.Error("another profile has the same key")
	}
}
