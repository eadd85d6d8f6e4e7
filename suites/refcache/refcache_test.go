package refcache

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
)

func TestParsePolicy(t *testing.T) {
	tests := []struct {
		in      string
		want    Policy
		wantErr bool
	}{
		{"wake-all", WakeAll, false},
		{"exclusive", Exclusive, false},
		{"keyed", Keyed, false},
		{"KEYED", Keyed, false},
		{"wakeall", 0, true},
		{"", 0, true},
	}
	for _, tt := range tests {
		got, err := ParsePolicy(tt.in)
		if (err != nil) != tt.wantErr || got != tt.want {
			t.Errorf("ParsePolicy(%q) = %v, %v; want %v, error %v", tt.in, got, err, tt.want, tt.wantErr)
		}
		if err == nil && got.String() != strings.ToLower(tt.in) {
			t.Errorf("%v.String() = %q, want %q", got, got.String(), strings.ToLower(tt.in))
		}
	}
}

func TestConfigErrors(t *testing.T) {
	ok := Config{Threads: 4, Entries: 2, Blocks: 3, Gets: 10}
	tests := []struct {
		name string
		edit func(*Config)
		want string
	}{
		{"no threads", func(c *Config) { c.Threads = 0 }, "threads 0"},
		{"no entries", func(c *Config) { c.Entries = 0 }, "entries 0"},
		{"no blocks", func(c *Config) { c.Blocks = 0 }, "blocks 0"},
		{"bad pattern", func(c *Config) { c.Pattern = "sequential" }, `pattern "sequential"`},
		{"bad policy", func(c *Config) { c.Policy = 7 }, "policy 7"},
		{"negative latency", func(c *Config) { c.ReadLatency = -1 }, "negative duration"},
		{"stall thread out of range", func(c *Config) { c.StallDelay = 1; c.StallThread = 4 }, "stall thread 4"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := ok
			tt.edit(&c)
			if _, err := Simulate(c); err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("Simulate: error %v, want one mentioning %q", err, tt.want)
			}
			if _, err := Check(c); err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("Check: error %v, want one mentioning %q", err, tt.want)
			}
		})
	}
	if _, err := Check(Config{Threads: 9, Entries: 2, Blocks: 3}); err == nil || !strings.Contains(err.Error(), "too large") {
		t.Errorf("Check of 9 threads: error %v, want too large", err)
	}
}

// TestCheck explores small shapes under every policy. The expectations are
// the findings docs/refcache.md reports: exclusive waits strand capacity
// from five threads on; mainline and the patch show no violation.
func TestCheck(t *testing.T) {
	shapes := []struct {
		threads, entries, blocks, gets int
		violations                     map[Policy][]string
	}{
		{3, 1, 2, 1, nil},
		{2, 1, 2, 2, nil},
		{3, 2, 3, 1, nil},
		{4, 2, 3, 1, nil},
		{5, 2, 3, 1, map[Policy][]string{Exclusive: {KindStrandedCapacity}}},
	}
	for _, sh := range shapes {
		for _, p := range Policies {
			cfg := Config{Policy: p, Threads: sh.threads, Entries: sh.entries, Blocks: sh.blocks, GetsPerThread: sh.gets}
			r, err := Check(cfg)
			if err != nil {
				t.Fatal(err)
			}
			name := func() string {
				return fmt.Sprintf("%s, %d threads × %d gets, %d entries, %d blocks", p, sh.threads, sh.gets, sh.entries, sh.blocks)
			}
			t.Logf("%s: %d states, %d transitions", name(), r.States, r.Transitions)
			if !r.Complete || r.States < 100 {
				t.Errorf("%s: %d states, complete %v", name(), r.States, r.Complete)
			}
			var got []string
			for _, v := range r.Violations {
				got = append(got, v.Kind)
				if len(v.Trace) < 3 || !strings.HasPrefix(v.Trace[0], "start:") || !strings.HasPrefix(v.Trace[len(v.Trace)-1], "=> ") {
					t.Errorf("%s: %s trace is not readable:\n%s", name(), v.Kind, strings.Join(v.Trace, "\n"))
				}
			}
			if sh.threads == 5 {
				checkDistinguishing(t, r)
			}
			if want := sh.violations[p]; strings.Join(got, ",") != strings.Join(want, ",") {
				t.Errorf("%s: violations %v, want %v", name(), got, want)
				for _, v := range r.Violations {
					t.Logf("%s\n%s", v.What, strings.Join(v.Trace, "\n"))
				}
			}
		}
	}
}

// checkDistinguishing: the states that tell the policies apart show up
// where they should, and only there.
func checkDistinguishing(t *testing.T, r CheckResult) {
	t.Helper()
	want := map[Policy]map[string]bool{
		WakeAll:   {ObsMissedShare: true, ObsRequeue: true, ObsHerd: true, ObsHandoff: false, ObsBlockedBehindWakee: false},
		Exclusive: {ObsMissedShare: true, ObsRequeue: true, ObsHerd: false, ObsHandoff: false, ObsBlockedBehindWakee: true},
		Keyed:     {ObsMissedShare: false, ObsRequeue: false, ObsHerd: false, ObsHandoff: true, ObsBlockedBehindWakee: true},
	}
	seen := map[string]bool{}
	for _, o := range r.Observations {
		seen[o.Kind] = true
	}
	for kind, w := range want[r.Policy] {
		if seen[kind] != w {
			t.Errorf("%s: observed %s = %v, want %v", r.Policy, kind, seen[kind], w)
		}
	}
}

// TestCheckHandoffNeeded: without the hand-off the patch strands capacity,
// as its commit message says.
func TestCheckHandoffNeeded(t *testing.T) {
	r, err := Check(Config{Policy: Keyed, Threads: 5, Entries: 2, Blocks: 3, noHandoff: true})
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Violations) != 1 || r.Violations[0].Kind != KindStrandedCapacity {
		t.Fatalf("keyed without hand-off: violations %+v, want stranded capacity", r.Violations)
	}
}

// TestSimulate is the required shape: 64 threads, the 8-entry
// metadata cache, and far more blocks than entries, so waiters queue.
func TestSimulate(t *testing.T) {
	base := Config{Threads: 64, Entries: 8, Blocks: 1024, Gets: 50000, Seed: 1}
	tests := []struct {
		p                  Policy
		minPerRel, maxPerR float64
	}{
		{WakeAll, 3, 100},
		{Exclusive, 0.5, 1.5},
		{Keyed, 0.5, 1.5},
	}
	for _, tt := range tests {
		cfg := base
		cfg.Policy = tt.p
		st, err := Simulate(cfg)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%s: %.2f wake-ups per release, %d spurious, %d handoffs, %.0f ops/s", tt.p, st.WakeupsPerRelease, st.SpuriousWakeups, st.Handoffs, st.OpsPerSec)
		if st.Gets != 50000 || st.Releases != 50000 {
			t.Errorf("%s: %d gets, %d releases, want 50000 each", tt.p, st.Gets, st.Releases)
		}
		if st.WakeupsPerRelease < tt.minPerRel || st.WakeupsPerRelease > tt.maxPerR {
			t.Errorf("%s: %.2f wake-ups per release, want %v..%v", tt.p, st.WakeupsPerRelease, tt.minPerRel, tt.maxPerR)
		}
		if st.ReleaseWakeCalls == 0 || st.CapacityWakeups == 0 {
			t.Errorf("%s: nobody waited for capacity (%+v)", tt.p, st)
		}
		if (st.Requeues > 0) == (tt.p == Keyed) {
			t.Errorf("%s: %d requeues without rescan", tt.p, st.Requeues)
		}
		if (st.Handoffs > 0) != (tt.p == Keyed) {
			t.Errorf("%s: %d handoffs", tt.p, st.Handoffs)
		}
		again, _ := Simulate(cfg)
		if again != st {
			t.Errorf("%s: not deterministic:\n%+v\n%+v", tt.p, st, again)
		}
	}
}

func TestSimulatePatterns(t *testing.T) {
	for _, pat := range []Pattern{Uniform, Zipf, Fragments} {
		for _, p := range Policies {
			st, err := Simulate(Config{Policy: p, Threads: 16, Entries: 3, Blocks: 40, Gets: 5000, Pattern: pat})
			if err != nil {
				t.Fatalf("%s %s: %v", pat, p, err)
			}
			if st.Gets != 5000 || st.OpsPerSec <= 0 || st.MeanGetNs <= 0 {
				t.Errorf("%s %s: %+v", pat, p, st)
			}
			if pat == Fragments && st.EntryWakeups == 0 {
				t.Errorf("%s %s: no task waited for a fragment being read", pat, p)
			}
		}
	}
}

// TestSimulateStall is the review's priority inversion: thread 0 runs 1ms
// late after each wake. Under wake-all the others were woken too; under a
// single wakee they wait for it.
func TestSimulateStall(t *testing.T) {
	blocked := map[Policy]float64{}
	for _, p := range Policies {
		st, err := Simulate(Config{Policy: p, Threads: 8, Entries: 3, Blocks: 64, Gets: 20000, StallThread: 0, StallDelay: 1e6})
		if err != nil {
			t.Fatal(err)
		}
		if st.StallWakes == 0 {
			t.Fatalf("%s: the stalled thread was never woken", p)
		}
		blocked[p] = float64(st.StallBlockedNs) / float64(st.StallWakes)
		t.Logf("%s: %d wakes to the stalled thread, %.0fns blocked per wake", p, st.StallWakes, blocked[p])
	}
	if blocked[Keyed] < 10*blocked[WakeAll] || blocked[Exclusive] < 10*blocked[WakeAll] {
		t.Errorf("blocked behind the stalled wakee per wake: %v; want wake-one policies far above wake-all", blocked)
	}
}

func TestStatsJSON(t *testing.T) {
	st, err := Simulate(Config{Policy: Keyed, Threads: 4, Entries: 1, Blocks: 4, Gets: 100})
	if err != nil {
		t.Fatal(err)
	}
	b, err := json.Marshal(st)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"policy", "gets", "releases", "wakeups", "wakeups_per_release", "spurious_wakeups", "handoffs", "ops_per_sec"} {
		if _, ok := m[k]; !ok {
			t.Errorf("Stats JSON lacks %q: %s", k, b)
		}
	}
	if m["policy"] != "keyed" {
		t.Errorf("policy = %v, want \"keyed\"", m["policy"])
	}
}

// BenchmarkSimulate: 1,000,000 gets at 64 threads on the metadata cache.
func BenchmarkSimulate(b *testing.B) {
	for _, p := range Policies {
		b.Run(p.String(), func(b *testing.B) {
			for b.Loop() {
				if _, err := Simulate(Config{Policy: p, Threads: 64, Entries: 8, Blocks: 1024, Gets: 1_000_000}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkCheck reports explored states per second.
func BenchmarkCheck(b *testing.B) {
	for _, p := range Policies {
		b.Run(p.String(), func(b *testing.B) {
			var states int64
			for b.Loop() {
				r, err := Check(Config{Policy: p, Threads: 5, Entries: 2, Blocks: 3})
				if err != nil {
					b.Fatal(err)
				}
				states += r.States
			}
			b.ReportMetric(float64(states)/b.Elapsed().Seconds(), "states/s")
		})
	}
}

func TestCheckContextCancel(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	r, err := CheckContext(ctx, Config{Policy: Keyed, Threads: 6, Entries: 2, Blocks: 3})
	if !errors.Is(err, context.Canceled) || r.Complete {
		t.Fatalf("cancelled check: complete %v, error %v; want incomplete, context.Canceled", r.Complete, err)
	}
}
