package suites

import (
	"fmt"
	"strings"

	"github.com/patchbot/patchbot/suites/refcache"
)

// ModelNotes returns the reference model's predictions for the shape of a
// cache-contention config, for Result.Notes beside the measured
// wakeups_per_release: for each policy (wake-all is mainline, keyed is the
// seed patch), the capacity wake-ups per release wake call (the measured
// metric's definition) and all cache wake-ups per put. The model runs on
// the host: the guest has better things to do with its CPUs.
func ModelNotes(cfg *Config) (map[string]string, error) {
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
	notes := map[string]string{
		"model/shape": fmt.Sprintf("threads=%d entries=%d blocks=%d pattern=%s gets=%d",
			cfg.Params.Threads, cfg.Params.CacheEntries, blocks, refcache.Fragments, modelGets(files)),
	}
	for _, p := range []refcache.Policy{refcache.WakeAll, refcache.Keyed} {
		st, err := refcache.Simulate(refcache.Config{
			Policy: p, Threads: cfg.Params.Threads, Entries: cfg.Params.CacheEntries,
			Blocks: blocks, Gets: modelGets(files), Pattern: refcache.Fragments, Seed: 1,
		})
		if err != nil {
			return nil, fmt.Errorf("running the cache model (%s): %w", p, err)
		}
		perCall := "n/a (no release wake calls)"
		if st.ReleaseWakeCalls > 0 {
			perCall = fmt.Sprintf("%.2f", float64(st.CapacityWakeups)/float64(st.ReleaseWakeCalls))
		}
		notes["model/"+p.String()+"/wakeups_per_release"] = perCall
		notes["model/"+p.String()+"/cache_wakeups_per_put"] = fmt.Sprintf("%.3f", st.WakeupsPerRelease)
	}
	return notes, nil
}

// modelGets bounds the simulation's length: enough gets for stable ratios.
func modelGets(files int) int { return min(max(files*2, 2000), 50000) }
