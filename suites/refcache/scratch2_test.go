package refcache

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"
)

func TestScratchSim(t *testing.T) {
	for _, p := range Policies {
		for _, pat := range []Pattern{Uniform, Zipf, Fragments} {
			st := time.Now()
			s, err := Simulate(Config{Policy: p, Threads: 64, Entries: 8, Blocks: 1024, Gets: 1000000, Pattern: pat})
			if err != nil {
				t.Fatal(err)
			}
			b, _ := json.Marshal(s)
			fmt.Printf("%v %s\n", time.Since(st), b)
		}
	}
}
