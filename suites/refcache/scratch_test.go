package refcache

import (
	"fmt"
	"strings"
	"testing"
)

func TestScratch(t *testing.T) {
	for _, p := range Policies {
		for _, cfg := range []Config{{Threads: 5, Entries: 2, Blocks: 3}, {Threads: 5, Entries: 2, Blocks: 2}, {Threads: 6, Entries: 2, Blocks: 3}} {
			cfg.Policy = p
			r, err := Check(cfg)
			if err != nil {
				t.Fatal(err)
			}
			fmt.Printf("%s T%d E%d B%d: states=%d trans=%d %v %.0f/s\n", p, cfg.Threads, cfg.Entries, cfg.Blocks, r.States, r.Transitions, r.Elapsed, r.StatesPerSec)
			for _, v := range r.Violations {
				fmt.Printf("  VIOLATION %s (%d): %s\n", v.Kind, v.Count, v.What)
			}
			for _, v := range r.Observations {
				fmt.Printf("  obs %s (%d)\n", v.Kind, v.Count)
			}
			if len(r.Violations) > 0 && cfg.Threads == 5 {
				fmt.Println(strings.Join(r.Violations[0].Trace, "\n"))
			}
		}
	}
}
