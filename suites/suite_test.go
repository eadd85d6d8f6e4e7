package suites

import (
	"encoding/json"
	"strings"
	"testing"
	"time"
)

func TestEmbeddedSuites(t *testing.T) {
	all, err := All()
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, s := range all {
		names = append(names, s.Name)
		for _, p := range s.ProfileNames() {
			c, err := s.Resolve(p)
			if err != nil {
				t.Errorf("%s/%s: %v", s.Name, p, err)
				continue
			}
			if (s.Image == nil) != (c.Image == nil) {
				t.Errorf("%s/%s: image resolved to %v", s.Name, p, c.Image)
			}
		}
	}
	if got := strings.Join(names, " "); got != "cache-contention fuse-waitq locks readahead" {
		t.Fatalf("suites = %s", got)
	}
}

func TestDecodeStrict(t *testing.T) {
	base := `name: locks
paths: [fs/locks.c]
workloads: [posix]
params: {contenders: [1, 2], duration: 1s}
verdict:
  primary: [{workload: posix, metric: acquisitions_per_s}]
  smallest_effect: 0.1
  noise_floor: 0.05
profiles:
  quick: {params: {contenders: [3]}}
  standard: {params: {windows: 2}}
`
	tests := []struct {
		name, yaml, want string
	}{
		{"ok", base, ""},
		{"unknown top key", base + "colour: blue\n", "field colour not found"},
		{"unknown param", strings.Replace(base, "duration: 1s", "duration: 1s, speed: 3", 1), "field speed not found"},
		{"unknown profile param", strings.Replace(base, "contenders: [3]", "contendrs: [3]", 1), "field contendrs not found"},
		{"unknown profile key", strings.Replace(base, "quick: {params", "quick: {colour: 1, params", 1), "field colour not found"},
		{"bad duration", strings.Replace(base, "1s", "soon", 1), "duration"},
		{"unknown suite", strings.Replace(base, "name: locks", "name: bogus", 1), "no such suite"},
		{"unknown workload", strings.Replace(base, "[posix]", "[ofd]", 1), "unknown workload"},
		{"no quick", strings.Replace(base, "quick:", "slow:", 1), "no quick profile"},
		{"no standard", strings.Replace(base, "standard:", "slow:", 1), "no standard profile"},
		{"bad value", strings.Replace(base, "contenders: [3]", "contenders: [0]", 1), "want at least 1"},
		{"no primary metric", strings.Replace(base, "primary: [{workload: posix, metric: acquisitions_per_s}]", "primary: []", 1), "no primary metrics"},
		{"primary of a workload not run", strings.Replace(base, "{workload: posix,", "{workload: flock,", 1), "which the suite does not run"},
		{"primary metric not measured", strings.Replace(base, "metric: acquisitions_per_s}", "metric: files_per_s}", 1), "measures no metric"},
		{"unknown verdict key", strings.Replace(base, "noise_floor: 0.05", "noise_floor: 0.05\n  power: 0.8", 1), "field power not found"},
		{"floor above smallest effect", strings.Replace(base, "noise_floor: 0.05", "noise_floor: 0.2", 1), "below smallest_effect"},
		{"boots ok", strings.Replace(base, "{windows: 2}", "{windows: 4, boots: 2, reboot: true}", 1), ""},
		{"boots without reboot", strings.Replace(base, "{windows: 2}", "{windows: 4, boots: 2}", 1), "want reboot"},
		{"boots not dividing windows", strings.Replace(base, "{windows: 2}", "{windows: 4, boots: 3, reboot: true}", 1), "a multiple of it"},
		{"negative windows", strings.Replace(base, "{windows: 2}", "{windows: -1}", 1), "want 0 or more"},
		{"negative icount shift", strings.Replace(base, "{windows: 2}", "{icount_shift: -1}", 1), "icount_shift = -1"},
		{"repeat on locks", strings.Replace(base, "{windows: 2}", "{repeat: {posix: 2}}", 1), "runs every workload once a window"},
		{"image on imageless", strings.Replace(base, "quick: {params", "quick: {image: {seed: 2}, params", 1), "reads no image"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Decode(strings.NewReader(tt.yaml))
			if tt.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Decode() = %v, want an error containing %q", err, tt.want)
			}
		})
	}
}

func TestProfileOverrides(t *testing.T) {
	s, err := Lookup("cache-contention")
	if err != nil {
		t.Fatal(err)
	}
	full, err := s.Resolve("full")
	if err != nil {
		t.Fatal(err)
	}
	standard, err := s.Resolve("")
	if err != nil {
		t.Fatal(err)
	}
	if standard.Profile != DefaultProfile {
		t.Errorf("empty profile resolved to %q, want %s", standard.Profile, DefaultProfile)
	}
	quick, err := s.Resolve("quick")
	if err != nil {
		t.Fatal(err)
	}
	if quick.Params.Ops >= full.Params.Ops || len(quick.Image.Files()) >= len(full.Image.Files()) {
		t.Errorf("quick (ops %d, %d files) is not smaller than full (ops %d, %d files)",
			quick.Params.Ops, len(quick.Image.Files()), full.Params.Ops, len(full.Image.Files()))
	}
	// Profiles overlay the defaults: quick keeps the suite's compressor.
	if quick.Image.Compressor != "gzip" || quick.Params.CacheEntries != 3 {
		t.Errorf("quick lost defaults: compressor %q, cache_entries %d", quick.Image.Compressor, quick.Params.CacheEntries)
	}
	if _, err := s.Resolve("nope"); err == nil || !strings.Contains(err.Error(), "quick") {
		t.Errorf("unknown profile: %v, want an error listing the profiles", err)
	}
}

// A suite's icount shift is its profiles' unless one names its own, and a
// profile's overrides the suite's on a copy: resolving one profile must
// not change what the next resolves to. A profile with a shift is another
// shape (Config.Sum) from one without; one without keeps the Sum it had
// before the field existed.
func TestProfileICountShift(t *testing.T) {
	s, err := Decode(strings.NewReader(`name: locks
paths: [fs/locks.c]
workloads: [posix]
params: {contenders: [1], duration: 1s, icount_shift: 1}
verdict:
  primary: [{workload: posix, metric: acquisitions_per_s}]
  smallest_effect: 0.1
  noise_floor: 0.05
profiles:
  quick: {params: {icount_shift: 0}}
  standard: {params: {windows: 2}}
`))
	if err != nil {
		t.Fatal(err)
	}
	shift := func(profile string) int {
		t.Helper()
		c, err := s.Resolve(profile)
		if err != nil {
			t.Fatal(err)
		}
		if c.Params.ICountShift == nil {
			t.Fatalf("%s: no icount shift", profile)
		}
		return *c.Params.ICountShift
	}
	if got := shift("quick"); got != 0 {
		t.Errorf("quick: shift %d, want its own 0", got)
	}
	if got := shift("standard"); got != 1 {
		t.Errorf("standard after quick: shift %d, want the suite's 1", got)
	}

	locks, err := Lookup("locks")
	if err != nil {
		t.Fatal(err)
	}
	c, err := locks.Resolve("quick")
	if err != nil {
		t.Fatal(err)
	}
	if c.Params.ICountShift != nil {
		t.Fatalf("locks quick has an icount shift, %d", *c.Params.ICountShift)
	}
	before := c.Sum()
	if b, _ := json.Marshal(c.Params); strings.Contains(string(b), "ICountShift") {
		t.Errorf("a profile without a shift carries one to the guest: %s", b)
	}
	zero := 0
	c.Params.ICountShift = &zero
	if c.Sum() == before {
		t.Error("a profile at shift 0 has the Sum of one without a shift")
	}
}

// params.repeat: a profile's repeats are its own (a suite's map is not
// shared with the profiles decoded over it), a profile without any sends
// the guest none and keeps the Sum it had before repeats existed, and only
// cache-contention's own workloads may repeat, 1 to maxRepeat times.
func TestProfileRepeat(t *testing.T) {
	yml := `name: cache-contention
paths: [fs/squashfs/]
workloads: [stat-storm, read-storm]
image:
  groups: [{name: meta, count: 8, min_bytes: 0, max_bytes: 8, dirs: 2}]
params: {threads: 4, ops: 1, cache_entries: 3, repeat: {read-storm: 3}}
verdict:
  primary: [{workload: stat-storm, metric: files_per_s}]
  smallest_effect: 0.1
  noise_floor: 0.05
profiles:
  quick: {params: {repeat: {stat-storm: 2}}}
  standard: {params: {windows: 2}}
`
	s, err := Decode(strings.NewReader(yml))
	if err != nil {
		t.Fatal(err)
	}
	resolve := func(profile string) *Config {
		t.Helper()
		c, err := s.Resolve(profile)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	q := resolve("quick")
	if q.Params.repeats("stat-storm") != 2 || q.Params.repeats("read-storm") != 3 || q.Params.repeats("mixed") != 1 {
		t.Errorf("quick: repeats %v, want stat-storm 2 over the suite's read-storm 3", q.Params.Repeat)
	}
	if st := resolve("standard"); st.Params.repeats("stat-storm") != 1 || st.Params.repeats("read-storm") != 3 {
		t.Errorf("standard after quick: repeats %v, want the suite's alone", st.Params.Repeat)
	}

	for _, tt := range []struct{ repeat, want string }{
		{"{mixed: 2}", ""},
		{"{stat-storm: 0}", "want 1 to 16"},
		{"{stat-storm: 17}", "want 1 to 16"},
		{"{bucket-read: 2}", `"bucket-read" is not a workload of cache-contention`},
	} {
		_, err := Decode(strings.NewReader(strings.Replace(yml, "{stat-storm: 2}", tt.repeat, 1)))
		if tt.want == "" && err != nil || tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)) {
			t.Errorf("repeat %s: error %v, want %q", tt.repeat, err, tt.want)
		}
	}

	cc, err := Lookup("cache-contention")
	if err != nil {
		t.Fatal(err)
	}
	c, err := cc.Resolve("four-windows-shift0")
	if err != nil {
		t.Fatal(err)
	}
	if b, _ := json.Marshal(c.Params); strings.Contains(string(b), "Repeat") {
		t.Errorf("a profile without repeats carries them to the guest: %s", b)
	}
	// What four-windows-shift0's Sum was before params.repeat existed: its
	// rounds measured then are of the same shape as its rounds now.
	if got := c.Sum(); got != "7558794bef9e6737" {
		t.Errorf("four-windows-shift0's Sum is %s, want 7558794bef9e6737 as before params.repeat", got)
	}
	twice, err := cc.Resolve("stat-twice")
	if err != nil {
		t.Fatal(err)
	}
	if twice.Params.repeats("stat-storm") != 2 || twice.Sum() == c.Sum() {
		t.Errorf("stat-twice: repeats %v, Sum %s (four-windows-shift0's %s)", twice.Params.Repeat, twice.Sum(), c.Sum())
	}
}

func TestSelect(t *testing.T) {
	tests := []struct {
		paths []string
		want  string
	}{
		{[]string{"fs/squashfs/cache.c"}, "cache-contention"},
		{[]string{"fs/squashfs/file.c"}, "cache-contention readahead"},
		{[]string{"mm/readahead.c"}, "readahead"},
		{[]string{"fs/fuse/dev.c", "include/linux/fs.h"}, "fuse-waitq"},
		{[]string{"fs/locks.c"}, "locks"},
		{[]string{"fs/locks.c.orig", "fs/squashfsx/a.c"}, ""},
		{[]string{"./fs/locks.c"}, "locks"},
		{nil, ""},
	}
	for _, tt := range tests {
		got, err := Select(tt.paths)
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, s := range got {
			names = append(names, s.Name)
		}
		if g := strings.Join(names, " "); g != tt.want {
			t.Errorf("Select(%v) = %q, want %q", tt.paths, g, tt.want)
		}
	}
}

func TestClockTooCoarseIsRefused(t *testing.T) {
	for name, ok := range map[string]bool{"tsc": true, "hpet": true, "kvm-clock": true, "acpi_pm": true,
		"jiffies": false, "refined-jiffies": false} {
		err := clockUsable(name, time.Nanosecond)
		if (err == nil) != ok {
			t.Errorf("clocksource %s: %v, want usable=%v", name, err, ok)
		}
		if err != nil && !strings.Contains(err.Error(), name) {
			t.Errorf("the refusal does not name the clocksource: %v", err)
		}
	}
	// A fine clocksource without high-resolution timers: the workloads'
	// sleeps would still run on the tick.
	err := clockUsable("tsc", 4*time.Millisecond)
	if err == nil || !strings.Contains(err.Error(), "4ms") || !strings.Contains(err.Error(), "vm.boot: legacy") {
		t.Errorf("tsc at a 4 ms resolution: %v, want a refusal naming the resolution and the way out", err)
	}
}
