package suites

import (
	"bytes"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"sort"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/patchbot/patchbot/images/fsimage"
)

// Suite is one suite definition, decoded from suites/<name>.yaml.
type Suite struct {
	Name        string `yaml:"name"`
	Description string `yaml:"description"`
	// Seed names the mailing-list thread whose measurement the suite
	// reproduces, e.g. "000 squashfs: avoid thundering-herd cache wakeups".
	Seed string `yaml:"seed"`
	// Paths select the suite for a series: an entry ending in "/" matches
	// every file under that directory, any other entry matches one file.
	Paths     []string      `yaml:"paths"`
	Workloads []string      `yaml:"workloads"`
	Image     *fsimage.Spec `yaml:"image"` // nil when the suite reads no squashfs image
	Params    Params        `yaml:"params"`
	// Verdict says which metrics the suite exists for and what size of
	// change matters: how reports/ judges its results.
	Verdict Verdict `yaml:"verdict"`
	// Profiles override Params and Image; "standard" is the pipeline's
	// (DefaultProfile), "quick" for CI (QuickProfile), "full" the seed's
	// shape. Kept as YAML so that each override decodes over a copy of
	// the defaults with the same strictness as the file itself.
	Profiles map[string]profileDef `yaml:"profiles"`
}

type profileDef struct {
	Description string    `yaml:"description"`
	Params      yaml.Node `yaml:"params"`
	Image       yaml.Node `yaml:"image"`
}

// Params are the workload knobs of every suite; each suite uses the ones
// its workloads name and Validate checks those.
type Params struct {
	// Windows is how many times a round runs its workloads (every suite):
	// each metric's value in a round is the mean of its windows, which a
	// sample keeps (Sample.Windows) so that the spread within a round can
	// be told from the spread between rounds (patchbot suite variance).
	// 0 is 1.
	Windows int `yaml:"windows"`
	// Repeat runs a workload more than once in each window, by name
	// (cache-contention: each run from caches dropped again); every run
	// is one more of its metrics' windows. A workload whose windows spread
	// most gets more of them this way without lengthening the others
	// (docs/suites.md, "Where the variance comes from"). Absent is once.
	Repeat map[string]int `yaml:"repeat" json:",omitempty"`
	// Reboot boots each side's kernel afresh before every round but the
	// first (Side.Reboot; before every part of a round spread over Boots
	// but the very first), and prepares it again: the spread between
	// boots, which rounds of one boot a side cannot show, is then in the
	// rounds a comparison sees (patchbot suite variance measures it).
	Reboot bool `yaml:"reboot"`
	// Boots spreads a round's windows over this many boots of each side,
	// Windows/Boots windows on each (0 is 1; with Reboot, whose fresh
	// boots they are): the host folds them into the round's samples
	// (FoldBoots). The spread between boots is then averaged inside a
	// round as the windows' is, instead of adding to each round whole.
	Boots int `yaml:"boots"`
	// ICountShift is the -icount shift the suite's guests keep
	// instruction-counted time at (2^N ns a guest instruction), where they
	// keep it at all (the VM's clock auto or "icount"; an "icount:N" clock
	// names its own shift and wins). nil is vmrunner.ICountShift, 2. A
	// shift sets what a sleep costs against the guest's work (at 0 the
	// guest's CPU is four times faster against every sleep than at 2), so
	// each suite's panel chooses its own (docs/vmrunner.md, "What it
	// measures"). The host reads it to boot the guests; the guest's agent
	// does not.
	ICountShift *int `yaml:"icount_shift" json:",omitempty"`
	// SameDraws seeds the workloads' random draws (FUSE's file sizes and
	// order, cache-contention's mixed files) the same in every round;
	// otherwise by the round's number. Both kernels draw the same either
	// way, but draws that change from round to round add to each side's
	// spread a part that cancels between the sides, and an unpaired
	// test's interval counts that part all the same.
	SameDraws bool `yaml:"same_draws"`
	Threads   int  `yaml:"threads"` // cache-contention: OS threads per workload
	Ops       int  `yaml:"ops"`     // cache-contention mixed: operations per thread
	// Workers runs cache-contention's threads: "" (the agent's own
	// locked goroutines) or "raw" (stormraw.go: a process of their own,
	// one OS thread a worker making raw system calls, Go's scheduler out
	// of the way). For locks, "raw" has each contender process make its
	// lock calls raw, with the collector off and no preemption signals,
	// so that Go's runtime hands no processor around a blocked lock call
	// and wakes no thread of its own for it.
	Workers string `yaml:"workers"`
	// Readers are the parallel reader counts of the readahead table.
	Readers []int `yaml:"readers"`
	// Contenders are the process counts of the locks curve; Duration is
	// how long each cell runs.
	Contenders []int    `yaml:"contenders"`
	Duration   Duration `yaml:"duration"`
	// FUSE small-file workload (bonnie++ -n files:max:min:dirs).
	ServerThreads []int `yaml:"server_threads"`
	Files         int   `yaml:"files"`
	Dirs          int   `yaml:"dirs"`
	MaxBytes      int   `yaml:"max_bytes"`
	// FuseServer is the FUSE server: "" (go-fuse's loopback) or "raw"
	// (fuseraw.go: one OS thread a server thread, Go's scheduler out of
	// the way).
	FuseServer string `yaml:"fuse_server"`
	// Model shape for the wake-ups-per-release prediction (cache-contention).
	CacheEntries int `yaml:"cache_entries"`
	// ModelCheck is the shape the model checker explores exhaustively for
	// the patched policy (cache-contention): small, since the state space
	// grows fast with waiters.
	ModelCheck ModelCheck `yaml:"model_check"`
}

// ModelCheck is a shape for suites/refcache's exhaustive checker.
type ModelCheck struct {
	Threads       int `yaml:"threads"`
	Entries       int `yaml:"entries"`
	Blocks        int `yaml:"blocks"`
	GetsPerThread int `yaml:"gets_per_thread"`
}

// Verdict is how a suite's results are judged. The primary metrics are the
// few the suite exists for, what users feel (the throughput and latency of
// each workload): they are judged together as one family, they alone
// decide the outcome and when the rounds stop, and the verdict's first
// sentence speaks of them. The mechanism counters (the seed's own metric,
// wake-ups per cache release) explain a change in them: a family of their
// own, cited after the outcome, never deciding it. Every other metric is a
// derived counter, judged as a third family.
type Verdict struct {
	Primary []MetricRef `yaml:"primary"`
	// Mechanism are the counters the verdict cites to explain the primary
	// metrics, in the order it cites them.
	Mechanism []MetricRef `yaml:"mechanism"`
	// Ratios name the numerator and denominator of each metric that is a
	// ratio of two others the workload also reports, so that a reply can
	// say when the denominator moved too and show both totals.
	Ratios []Ratio `yaml:"ratios"`
	// SmallestEffect is the smallest change worth knowing, as a fraction
	// (0.1: 10%): runs go on until a primary metric is significant or its
	// interval excludes a change this large.
	SmallestEffect float64 `yaml:"smallest_effect"`
	// NoiseFloor is the size of change (a fraction) below which nothing is
	// called a change, significant or not: what two boots of the same
	// kernel differ by.
	NoiseFloor float64 `yaml:"noise_floor"`
}

// MetricRef names a metric of a workload, in every cell of the workload or
// in the cells whose params match.
type MetricRef struct {
	Workload string            `yaml:"workload"`
	Metric   string            `yaml:"metric"`
	Params   map[string]string `yaml:"params"`
}

// Ratio says that Metric is Numerator / Denominator, per workload cell.
type Ratio struct {
	Metric      string `yaml:"metric"`
	Numerator   string `yaml:"numerator"`
	Denominator string `yaml:"denominator"`
}

// RatioOf returns the ratio definition of metric, if it is one.
func (v *Verdict) RatioOf(metric string) (Ratio, bool) {
	for _, r := range v.Ratios {
		if r.Metric == metric {
			return r, true
		}
	}
	return Ratio{}, false
}

// MechanismRank is the place of a mechanism counter in the suite's list.
func (v *Verdict) MechanismRank(workload, metric string, params map[string]string) (int, bool) {
	return rankIn(v.Mechanism, workload, metric, params)
}

// IsPrimary reports whether a sample of workload, metric and params is one
// of the suite's primary metrics.
func (v *Verdict) IsPrimary(workload, metric string, params map[string]string) bool {
	_, ok := v.Rank(workload, metric, params)
	return ok
}

// Rank is the place of a primary metric in the suite's list, which names
// them in the order a reader cares about (the verdict cites them so).
func (v *Verdict) Rank(workload, metric string, params map[string]string) (int, bool) {
	return rankIn(v.Primary, workload, metric, params)
}

func rankIn(refs []MetricRef, workload, metric string, params map[string]string) (int, bool) {
	for i, p := range refs {
		if p.Workload != workload || p.Metric != metric {
			continue
		}
		match := true
		for k, want := range p.Params {
			if params[k] != want {
				match = false
			}
		}
		if match {
			return i, true
		}
	}
	return 0, false
}

func (v *Verdict) validate(suite string, workloads []string) error {
	if len(v.Primary) == 0 {
		return fmt.Errorf("suite %q: verdict: no primary metrics", suite)
	}
	for kind, refs := range map[string][]MetricRef{"primary": v.Primary, "mechanism": v.Mechanism} {
		for _, p := range refs {
			if !contains(workloads, p.Workload) {
				return fmt.Errorf("suite %q: verdict: %s metric %q of workload %q, which the suite does not run", suite, kind, p.Metric, p.Workload)
			}
			if !contains(metricsOf(suite, p.Workload), p.Metric) {
				return fmt.Errorf("suite %q: verdict: workload %q measures no metric %q (it measures %s)",
					suite, p.Workload, p.Metric, strings.Join(metricsOf(suite, p.Workload), ", "))
			}
		}
	}
	for _, p := range v.Mechanism {
		if _, ok := v.Rank(p.Workload, p.Metric, p.Params); ok {
			return fmt.Errorf("suite %q: verdict: %s of %s is both primary and a mechanism counter", suite, p.Metric, p.Workload)
		}
	}
	for _, r := range v.Ratios {
		if r.Metric == "" || r.Numerator == "" || r.Denominator == "" {
			return fmt.Errorf("suite %q: verdict: ratio %+v: want metric, numerator and denominator", suite, r)
		}
	}
	if !(v.SmallestEffect > 0 && v.SmallestEffect < 10) {
		return fmt.Errorf("suite %q: verdict: smallest_effect %v: want a positive fraction (0.1 for 10%%)", suite, v.SmallestEffect)
	}
	if v.NoiseFloor < 0 || v.NoiseFloor >= v.SmallestEffect {
		return fmt.Errorf("suite %q: verdict: noise_floor %v: want at least 0 and below smallest_effect %v", suite, v.NoiseFloor, v.SmallestEffect)
	}
	return nil
}

// counterMetrics are read around every workload (counters.go); the
// release counters only around cache-contention's (release.go).
var (
	counterMetrics = []string{"sched_wakeup", "context_switches", "ttwu"}
	releaseMetrics = []string{"cache_puts", "release_wake_calls", "release_wakeups", "waking_events",
		"cache_wakeups", "cache_wakeups_per_put", "wakeups_per_release"}
)

// metricsOf lists the metrics a workload of a suite measures.
func metricsOf(suite, workload string) []string {
	var own []string
	switch suite + "/" + workload {
	case "cache-contention/stat-storm":
		own = []string{"files_per_s", "latency_p50", "latency_p95", "latency_p99"}
	case "cache-contention/read-storm":
		own = []string{"files_per_s", "mib_per_s", "latency_p50", "latency_p95", "latency_p99"}
	case "cache-contention/mixed":
		own = []string{"ops_per_s", "latency_mean", "latency_p50", "latency_p95", "latency_p99"}
	case "readahead/bucket-read":
		own = []string{"elapsed", "mib_per_s"}
	case "locks/posix", "locks/flock":
		own = []string{"acquisitions_per_s", "curve_acquisitions_per_s"}
	case "fuse-waitq/bonnie":
		own = []string{"ops_per_s", "latency_mean", "latency_max"}
	}
	own = append(own, counterMetrics...)
	if suite == "cache-contention" {
		own = append(own, releaseMetrics...)
	}
	return own
}

// Duration is a time.Duration written as "2s" in YAML.
type Duration time.Duration

func (d *Duration) UnmarshalYAML(n *yaml.Node) error {
	v, err := time.ParseDuration(n.Value)
	if err != nil {
		return fmt.Errorf("line %d: duration %q: %w", n.Line, n.Value, err)
	}
	*d = Duration(v)
	return nil
}

func (d Duration) MarshalYAML() (any, error) { return time.Duration(d).String(), nil }

// Config is a suite resolved for one profile: what a round runs.
type Config struct {
	Suite     string
	Profile   string
	Workloads []string
	Image     *fsimage.Spec
	Params    Params
}

// Sum names what a resolved profile measures: its workloads, parameters
// and image, so that a profile reshaped under the same name is another.
// The guest agent is built apart from the host's binary (from the source
// tree, when its initramfs is made), so the host checks the guest's Sum
// against its own before a round (Prepared.Shape).
func (c *Config) Sum() string {
	b, _ := json.Marshal(c)
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:8])
}

//go:embed *.yaml
var definitions embed.FS

// All returns the embedded suite definitions sorted by name. They are
// checked by the tests, so an error here is a build defect.
func All() ([]*Suite, error) {
	entries, err := definitions.ReadDir(".")
	if err != nil {
		return nil, err
	}
	var out []*Suite
	for _, e := range entries {
		b, err := definitions.ReadFile(e.Name())
		if err != nil {
			return nil, err
		}
		s, err := Decode(bytes.NewReader(b))
		if err != nil {
			return nil, fmt.Errorf("suites: %s: %w", e.Name(), err)
		}
		out = append(out, s)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// Names lists the embedded suites' names, and every profile any of them
// has, for help texts and refusals.
func Names() (names, profiles []string) {
	all, err := All()
	if err != nil {
		return nil, nil
	}
	seen := map[string]bool{}
	for _, s := range all {
		names = append(names, s.Name)
		for _, p := range s.ProfileNames() {
			if !seen[p] {
				seen[p] = true
				profiles = append(profiles, p)
			}
		}
	}
	return names, profiles
}

// Lookup returns the embedded suite called name.
func Lookup(name string) (*Suite, error) {
	all, err := All()
	if err != nil {
		return nil, err
	}
	var names []string
	for _, s := range all {
		if s.Name == name {
			return s, nil
		}
		names = append(names, s.Name)
	}
	return nil, fmt.Errorf("suites: no suite %q (have %s)", name, strings.Join(names, ", "))
}

// Decode reads one suite definition strictly: unknown keys are errors.
func Decode(r io.Reader) (*Suite, error) {
	dec := yaml.NewDecoder(r)
	dec.KnownFields(true)
	var s Suite
	if err := dec.Decode(&s); err != nil {
		return nil, fmt.Errorf("decoding suite: %w", err)
	}
	if err := s.validate(); err != nil {
		return nil, err
	}
	return &s, nil
}

// workloadsOf lists the workloads each suite kind implements.
var workloadsOf = map[string][]string{
	"cache-contention": {"stat-storm", "read-storm", "mixed"},
	"readahead":        {"bucket-read"},
	"locks":            {"posix", "flock"},
	"fuse-waitq":       {"bonnie"},
}

func (s *Suite) validate() error {
	if s.Name == "" {
		return errors.New("suite has no name")
	}
	known, ok := workloadsOf[s.Name]
	if !ok {
		return fmt.Errorf("suite %q: no such suite is implemented", s.Name)
	}
	if len(s.Paths) == 0 {
		return fmt.Errorf("suite %q: no paths select it", s.Name)
	}
	if len(s.Workloads) == 0 {
		return fmt.Errorf("suite %q: no workloads", s.Name)
	}
	for _, w := range s.Workloads {
		if !contains(known, w) {
			return fmt.Errorf("suite %q: unknown workload %q (have %s)", s.Name, w, strings.Join(known, ", "))
		}
	}
	if err := s.Verdict.validate(s.Name, s.Workloads); err != nil {
		return err
	}
	for _, p := range []string{QuickProfile, DefaultProfile} {
		if _, ok := s.Profiles[p]; !ok {
			return fmt.Errorf("suite %q: no %s profile", s.Name, p)
		}
	}
	for p := range s.Profiles {
		if _, err := s.Resolve(p); err != nil {
			return err
		}
	}
	return nil
}

// ProfileNames returns the suite's profile names, sorted.
func (s *Suite) ProfileNames() []string {
	var out []string
	for p := range s.Profiles {
		out = append(out, p)
	}
	sort.Strings(out)
	return out
}

// Every suite has these profiles.
const (
	// DefaultProfile is the pipeline's: sized so that a run reaches the
	// suite's smallest effect (Verdict.SmallestEffect) within the rule's
	// rounds, on guests with instruction-counted time.
	DefaultProfile = "standard"
	// QuickProfile is short, for CI and a first look: its reach is wider
	// than the suite promises, and the reply says so.
	QuickProfile = "quick"
)

// Resolve applies a profile's overrides to the suite's defaults. The empty
// profile name means DefaultProfile.
func (s *Suite) Resolve(profile string) (*Config, error) {
	if profile == "" {
		profile = DefaultProfile
	}
	p, ok := s.Profiles[profile]
	if !ok {
		return nil, fmt.Errorf("suite %q: no profile %q (have %s)", s.Name, profile, strings.Join(s.ProfileNames(), ", "))
	}
	c := &Config{Suite: s.Name, Profile: profile, Workloads: s.Workloads, Params: s.Params}
	c.Params.Readers = append([]int(nil), s.Params.Readers...)
	// The profile's params decode onto copies of the suite's, not onto
	// what the suite's own hold.
	c.Params.Repeat = maps.Clone(s.Params.Repeat)
	if v := s.Params.ICountShift; v != nil {
		shift := *v
		c.Params.ICountShift = &shift
	}
	if err := overlay(&p.Params, &c.Params); err != nil {
		return nil, fmt.Errorf("suite %q profile %q: params: %w", s.Name, profile, err)
	}
	if s.Image != nil {
		img := *s.Image
		if err := overlay(&p.Image, &img); err != nil {
			return nil, fmt.Errorf("suite %q profile %q: image: %w", s.Name, profile, err)
		}
		if err := img.Validate(); err != nil {
			return nil, fmt.Errorf("suite %q profile %q: %w", s.Name, profile, err)
		}
		c.Image = &img
	} else if !p.Image.IsZero() {
		return nil, fmt.Errorf("suite %q profile %q: the suite reads no image", s.Name, profile)
	}
	if err := c.Params.check(s.Name); err != nil {
		return nil, fmt.Errorf("suite %q profile %q: %w", s.Name, profile, err)
	}
	return c, nil
}

// overlay decodes an override node onto out, strictly. yaml.Node.Decode has
// no KnownFields switch, so the node goes through bytes and a Decoder.
func overlay(n *yaml.Node, out any) error {
	if n.IsZero() {
		return nil
	}
	b, err := yaml.Marshal(n)
	if err != nil {
		return err
	}
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	return dec.Decode(out)
}

func (p Params) check(suite string) error {
	positive := func(name string, v int) error {
		if v < 1 {
			return fmt.Errorf("%s = %d: want at least 1", name, v)
		}
		return nil
	}
	positives := func(name string, vs []int) error {
		if len(vs) == 0 {
			return fmt.Errorf("%s: want at least one value", name)
		}
		for _, v := range vs {
			if v < 1 {
				return fmt.Errorf("%s: %d: want at least 1", name, v)
			}
		}
		return nil
	}
	var errs []error
	if p.Windows < 0 || p.Boots < 0 {
		errs = append(errs, fmt.Errorf("windows = %d, boots = %d: want 0 or more", p.Windows, p.Boots))
	}
	if p.ICountShift != nil && *p.ICountShift < 0 {
		errs = append(errs, fmt.Errorf("icount_shift = %d: want 0 or more", *p.ICountShift))
	}
	if p.Boots > 1 && (!p.Reboot || max(1, p.Windows)%p.Boots != 0) {
		errs = append(errs, fmt.Errorf("boots = %d: want reboot, and windows (%d) a multiple of it", p.Boots, p.Windows))
	}
	if len(p.Repeat) > 0 && suite != "cache-contention" {
		errs = append(errs, fmt.Errorf("repeat: suite %s runs every workload once a window", suite))
	}
	for _, w := range slices.Sorted(maps.Keys(p.Repeat)) {
		if n := p.Repeat[w]; n < 1 || n > maxRepeat {
			errs = append(errs, fmt.Errorf("repeat: %s %d times: want 1 to %d", w, n, maxRepeat))
		}
		if known := workloadsOf[suite]; suite == "cache-contention" && !contains(known, w) {
			errs = append(errs, fmt.Errorf("repeat: %q is not a workload of cache-contention (have %s)", w, strings.Join(known, ", ")))
		}
	}
	switch suite {
	case "cache-contention":
		errs = append(errs, positive("threads", p.Threads), positive("ops", p.Ops), positive("cache_entries", p.CacheEntries))
		if p.Threads > maxStormWorkers {
			errs = append(errs, fmt.Errorf("threads: %d, want at most %d", p.Threads, maxStormWorkers))
		}
		if p.Workers != "" && p.Workers != "raw" {
			errs = append(errs, fmt.Errorf("workers: %q is not a kind of workers (want raw, or none for the agent's threads)", p.Workers))
		}
	case "readahead":
		errs = append(errs, positives("readers", p.Readers))
	case "locks":
		errs = append(errs, positives("contenders", p.Contenders))
		if p.Workers != "" && p.Workers != "raw" {
			errs = append(errs, fmt.Errorf("workers: %q is not a kind of contender (want raw, or none for Go's system calls)", p.Workers))
		}
		if p.Duration <= 0 {
			errs = append(errs, errors.New("duration: want a positive duration"))
		}
	case "fuse-waitq":
		errs = append(errs, positives("server_threads", p.ServerThreads), positive("files", p.Files), positive("dirs", p.Dirs))
		if p.MaxBytes < 0 {
			errs = append(errs, errors.New("max_bytes: want 0 or more"))
		}
		if p.FuseServer != "" && p.FuseServer != "raw" {
			errs = append(errs, fmt.Errorf("fuse_server: %q is not a FUSE server (want raw, or none for go-fuse's)", p.FuseServer))
		}
	}
	return errors.Join(errs...)
}

// maxRepeat bounds Params.Repeat: a round's length grows with it.
const maxRepeat = 16

// repeats is how many times a window runs workload w (Repeat).
func (p Params) repeats(w string) int { return max(1, p.Repeat[w]) }

// boots is how many boots a round's windows are spread over (Boots).
func (p Params) boots() int { return max(1, p.Boots) }

// windowsABoot is how many windows a round runs on each of its boots.
func (p Params) windowsABoot() int { return max(1, p.Windows) / p.boots() }

// Selects reports whether a series touching paths selects the suite.
func (s *Suite) Selects(paths []string) bool {
	for _, p := range paths {
		p = strings.TrimPrefix(p, "./")
		for _, sel := range s.Paths {
			if strings.HasSuffix(sel, "/") && strings.HasPrefix(p, sel) || p == sel {
				return true
			}
		}
	}
	return false
}

// Select returns the embedded suites that a series touching paths selects.
func Select(paths []string) ([]*Suite, error) {
	all, err := All()
	if err != nil {
		return nil, err
	}
	var out []*Suite
	for _, s := range all {
		if s.Selects(paths) {
			out = append(out, s)
		}
	}
	return out, nil
}

func contains[T comparable](xs []T, x T) bool {
	for _, v := range xs {
		if v == x {
			return true
		}
	}
	return false
}
