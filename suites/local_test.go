package suites

import (
	"context"
	"math"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/patchbot/patchbot/images/fsimage"
	"github.com/patchbot/patchbot/internal/testenv"
	"github.com/patchbot/patchbot/vmrunner/proto"
)

// needLocal skips when this machine cannot run a suite: the workloads
// mount file systems and drop caches.
func needLocal(t *testing.T, fstype string) {
	t.Helper()
	testenv.Root(t) // the suites mount images and drop caches
	if fstype == "squashfs" {
		if _, err := os.Stat("/dev/loop-control"); err != nil {
			t.Skip("no /dev/loop-control: loop devices unavailable")
		}
		testenv.Tools(t, "mksquashfs")
	}
	if fstype == "fuse" {
		if _, err := os.Stat("/dev/fuse"); err != nil {
			t.Skip("no /dev/fuse")
		}
	}
	if fstype != "" {
		b, _ := os.ReadFile("/proc/filesystems")
		if !strings.Contains(string(b), "\t"+fstype+"\n") {
			t.Skipf("kernel has no %s file system", fstype)
		}
	}
}

// runLocal runs one round of suite's quick profile on this machine.
func runLocal(t *testing.T, suite string) *Result {
	t.Helper()
	return runLocalProfile(t, suite, QuickProfile)
}

// runLocalProfile runs one round of a suite's profile on this machine.
func runLocalProfile(t *testing.T, suite, profile string) *Result {
	t.Helper()
	s, err := Lookup(suite)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := s.Resolve(profile)
	if err != nil {
		t.Fatal(err)
	}
	return runLocalConfig(t, cfg)
}

// runLocalConfig runs one round of a resolved profile on this machine, as
// RunRound runs the profile it resolves.
func runLocalConfig(t *testing.T, cfg *Config) *Result {
	t.Helper()
	params := map[string]string{ParamKernel: "host"}
	if cfg.Image != nil {
		img, _, err := fsimage.Build(context.Background(), *cfg.Image, t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		params[ParamImage] = img
		t.Cleanup(func() {
			if err := Release(); err != nil {
				t.Error(err)
			}
		})
	}
	if err := ensureMounts(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	res, err := runRound(ctx, cfg, proto.Request{Op: proto.OpRunSuite, Suite: cfg.Suite, Profile: cfg.Profile, Round: 1, Params: params})
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range res.Missing {
		t.Logf("missing %s/%s: %s", m.Workload, m.Metric, m.Reason)
	}
	return res
}

// checkSamples asserts that every workload produced each metric, positive,
// and that every counter is either a sample or Missing.
func checkSamples(t *testing.T, res *Result, workloads []string, metrics ...string) {
	t.Helper()
	have := map[string]int{}
	for _, s := range res.Samples {
		have[s.Workload+"/"+s.Metric]++
		if s.Round != 1 || s.Unit == "" || s.Suite != res.Suite {
			t.Errorf("sample %+v: bad round, unit or suite", s)
		}
		if s.Value < 0 {
			t.Errorf("sample %+v is negative", s)
		}
		// The list the suite definitions are checked against must know
		// every metric a workload measures.
		if !contains(metricsOf(res.Suite, s.Workload), s.Metric) {
			t.Errorf("%s/%s measures %s, which metricsOf does not list", res.Suite, s.Workload, s.Metric)
		}
	}
	missing := map[string]bool{}
	for _, m := range res.Missing {
		missing[m.Workload+"/"+m.Metric] = true
	}
	for _, w := range workloads {
		for _, m := range metrics {
			if have[w+"/"+m] == 0 {
				t.Errorf("no %s sample for %s", m, w)
			}
		}
		for _, c := range []string{"sched_wakeup", "context_switches", "ttwu"} {
			if have[w+"/"+c] == 0 && !missing[w+"/"+c] {
				t.Errorf("%s/%s is neither a sample nor missing", w, c)
			}
		}
	}
}

func TestLocalCacheContention(t *testing.T) {
	needLocal(t, "squashfs")
	res := runLocal(t, "cache-contention")
	checkSamples(t, res, []string{"stat-storm", "read-storm"}, "files_per_s", "latency_p50", "latency_p95", "latency_p99")
	checkSamples(t, res, []string{"read-storm"}, "mib_per_s")
	checkSamples(t, res, []string{"mixed"}, "ops_per_s", "latency_mean", "latency_p50", "latency_p95", "latency_p99")
	for _, w := range []string{"stat-storm", "read-storm", "mixed"} {
		found := false
		for _, s := range res.Samples {
			found = found || s.Workload == w && s.Metric == "cache_puts"
		}
		for _, m := range res.Missing {
			found = found || m.Workload == w && m.Metric == "cache_puts"
		}
		if !found {
			t.Errorf("%s: cache_puts neither measured nor missing", w)
		}
	}
}

// params.repeat on a real round: smoke's storms in 2 windows, the stat
// storm twice in each, so its metrics keep 4 windows and the other
// workloads' 2, each value the mean of its windows.
func TestLocalCacheContentionRepeat(t *testing.T) {
	needLocal(t, "squashfs")
	s, err := Lookup("cache-contention")
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := s.Resolve("smoke")
	if err != nil {
		t.Fatal(err)
	}
	cfg.Params.Windows, cfg.Params.Repeat = 2, map[string]int{"stat-storm": 2}
	if err := cfg.Params.check(s.Name); err != nil {
		t.Fatal(err)
	}
	res := runLocalConfig(t, cfg)
	want := map[string]int{"stat-storm": 4, "read-storm": 2, "mixed": 2}
	seen := map[string]bool{}
	for _, s := range res.Samples {
		if s.Metric != "files_per_s" && s.Metric != "ops_per_s" {
			continue
		}
		seen[s.Workload] = true
		if len(s.Windows) != want[s.Workload] {
			t.Errorf("%s %s: %d windows %v, want %d", s.Workload, s.Metric, len(s.Windows), s.Windows, want[s.Workload])
			continue
		}
		sum := 0.0
		for _, w := range s.Windows {
			if w <= 0 {
				t.Errorf("%s %s: a window without work: %v", s.Workload, s.Metric, s.Windows)
			}
			sum += w
		}
		if mean := sum / float64(len(s.Windows)); math.Abs(mean-s.Value) > 1e-9*mean {
			t.Errorf("%s %s: value %g, the windows' mean %g", s.Workload, s.Metric, s.Value, mean)
		}
	}
	if len(seen) != len(want) {
		t.Errorf("throughputs of %v, want one of each of %v", seen, want)
	}
}

func TestLocalReadahead(t *testing.T) {
	needLocal(t, "squashfs")
	res := runLocal(t, "readahead")
	checkSamples(t, res, []string{"bucket-read"}, "elapsed", "mib_per_s")
	// quick: 3 buckets × 2 reader counts, one elapsed sample per cell
	cells := map[string]bool{}
	for _, s := range res.Samples {
		if s.Metric == "elapsed" {
			cells[s.Params["bucket"]+"×"+s.Params["readers"]] = true
		}
	}
	if len(cells) != 6 {
		t.Errorf("cells = %v, want 6", cells)
	}
}

func TestLocalLocks(t *testing.T) {
	needLocal(t, "")
	res := runLocal(t, "locks")
	checkSamples(t, res, []string{"posix", "flock"}, "acquisitions_per_s")
	n := 0
	for _, s := range res.Samples {
		if s.Metric == "acquisitions_per_s" {
			n++
			if s.Value == 0 {
				t.Errorf("%s with %s contenders: no acquisitions", s.Workload, s.Params["contenders"])
			}
		}
	}
	if n != 8 {
		t.Errorf("%d acquisitions_per_s samples, want 2 kinds × 4 contender counts", n)
	}
}

// The pipeline's contenders (standard: workers raw) lock and unlock
// through raw system calls: every cell of both curves acquires, in each
// of its windows.
func TestLocalLocksRaw(t *testing.T) {
	testenv.Long(t) // a round of the standard curve: 20 s, 24 windows of up to 32 processes
	needLocal(t, "")
	res := runLocalProfile(t, "locks", "standard")
	n := 0
	for _, s := range res.Samples {
		if s.Metric != mAcqPerS.name {
			continue
		}
		n++
		if len(s.Windows) != 4 {
			t.Errorf("%s with %s contenders: windows %v, want 4", s.Workload, s.Params["contenders"], s.Windows)
		}
		for _, w := range s.Windows {
			if w == 0 {
				t.Errorf("%s with %s contenders: a window without acquisitions: %v", s.Workload, s.Params["contenders"], s.Windows)
			}
		}
	}
	if n != 12 {
		t.Errorf("%d acquisitions_per_s samples, want 2 kinds × 6 contender counts", n)
	}
}

func TestLocalFuseWaitq(t *testing.T) {
	needLocal(t, "fuse")
	res := runLocal(t, "fuse-waitq")
	checkSamples(t, res, []string{"bonnie"}, "ops_per_s", "latency_mean", "latency_max")
	cells := map[string]bool{}
	for _, s := range res.Samples {
		if s.Metric == "ops_per_s" {
			cells[s.Params["server_threads"]+"/"+s.Params["phase"]] = true
		}
	}
	if len(cells) != 12 {
		t.Errorf("cells = %v, want 2 server thread counts × 6 phases", cells)
	}
}
