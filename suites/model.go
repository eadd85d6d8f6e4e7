package suites

import (
	"fmt"
	"strings"

	"github.com/patchbot/patchbot/suites/refcache"
)

// Prediction is the reference model's view of a cache-contention run, set
// beside the measured wakeups_per_release: what each wake-up policy
// predicts for the suite's shape, and what the model checker found for the
// policy the patched kernel is claimed to implement. It is computed on the
// host (the guest has better things to do with its CPUs) and travels with
// the Result.
type Prediction struct {
	// Shape is the simulated shape, e.g. "threads=64 entries=3 blocks=60
	// pattern=fragments gets=2048".
	Shape string `json:"shape"`
	// BasePolicy is mainline's (wake-all); PatchedPolicy the one the seed
	// patch describes (keyed exclusive waits).
	BasePolicy    string `json:"base_policy"`
	PatchedPolicy string `json:"patched_policy"`
	// WakeupsPerRelease maps a policy to capacity wake-ups per release
	// wake call, the measured metric's definition; a policy whose
	// simulation made no release wake call is absent.
	WakeupsPerRelease map[string]float64 `json:"wakeups_per_release"`
	// CacheWakeupsPerPut maps a policy to all cache wake-ups per put.
	CacheWakeupsPerPut map[string]float64 `json:"cache_wakeups_per_put"`
	// Check is the model checker's one-line finding for PatchedPolicy on
	// the suite's check shape (params.model_check).
	Check string `json:"check,omitempty"`
}

// Predict runs the reference model for a cache-contention config; other
// suites have no model and get nil.
func Predict(cfg *Config) (*Prediction, error) {
	if cfg.Suite != "cache-contention" || cfg.Image == nil {
		return nil, nil
	}
	// The read storm's shape: small files packed in fragment blocks.
	var smallBytes int64
	files := 0
	for _, f := range cfg.Image.Files() {
		if strings.HasPrefix(f.Path, "small/") {
			smallBytes += f.Size
			files++
		}
	}
	blocks := max(1, int(smallBytes/int64(cfg.Image.BlockSize)))
	p := &Prediction{
		Shape: fmt.Sprintf("threads=%d entries=%d blocks=%d pattern=%s gets=%d",
			cfg.Params.Threads, cfg.Params.CacheEntries, blocks, refcache.Fragments, modelGets(files)),
		BasePolicy: refcache.WakeAll.String(), PatchedPolicy: refcache.Keyed.String(),
		WakeupsPerRelease: map[string]float64{}, CacheWakeupsPerPut: map[string]float64{},
	}
	for _, pol := range []refcache.Policy{refcache.WakeAll, refcache.Keyed} {
		st, err := refcache.Simulate(refcache.Config{
			Policy: pol, Threads: cfg.Params.Threads, Entries: cfg.Params.CacheEntries,
			Blocks: blocks, Gets: modelGets(files), Pattern: refcache.Fragments, Seed: 1,
		})
		if err != nil {
			return nil, fmt.Errorf("running the cache model (%s): %w", pol, err)
		}
		if st.ReleaseWakeCalls > 0 {
			p.WakeupsPerRelease[pol.String()] = float64(st.CapacityWakeups) / float64(st.ReleaseWakeCalls)
		}
		p.CacheWakeupsPerPut[pol.String()] = st.WakeupsPerRelease
	}
	if c := cfg.Params.ModelCheck; c.Threads > 0 {
		p.Check = checkSummary(refcache.Config{Policy: refcache.Keyed, Threads: c.Threads, Entries: c.Entries,
			Blocks: c.Blocks, GetsPerThread: c.GetsPerThread})
	}
	return p, nil
}

// checkSummary explores a small configuration of the cache exhaustively and
// says in one line what it found.
func checkSummary(cfg refcache.Config) string {
	r, err := refcache.Check(cfg)
	if err != nil {
		return "the model checker failed: " + err.Error()
	}
	scope := fmt.Sprintf("%d waiters making %d gets each on %d entries with %d blocks",
		r.Threads, r.GetsPerThread, r.Entries, r.Blocks)
	if !r.Complete {
		scope += " (stopped at the state bound)"
	}
	if len(r.Violations) == 0 {
		return fmt.Sprintf("no deadlock, lost wake-up or waiter left asleep with a free entry, in all %d states of %s",
			r.States, scope)
	}
	var kinds []string
	for _, v := range r.Violations {
		kinds = append(kinds, fmt.Sprintf("%s (%d states)", v.Kind, v.Count))
	}
	return fmt.Sprintf("found %s in %d states of %s; run `patchbot model check --policy %s --threads %d --entries %d --blocks %d` for the traces",
		strings.Join(kinds, ", "), r.States, scope, r.Policy, r.Threads, r.Entries, r.Blocks)
}

// modelGets bounds the simulation's length: enough gets for stable ratios.
func modelGets(files int) int { return min(max(files*2, 2000), 50000) }
