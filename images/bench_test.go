package images

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"sync"
	"testing"

	"github.com/patchbot/patchbot/internal/testenv"
)

// BenchmarkCacheHit measures DefaultKernel when the build is cached
// (target: under 5 s).
func BenchmarkCacheHit(b *testing.B) {
	needTools(b)
	ctx := context.Background()
	if _, err := DefaultKernel(ctx, nil); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		bd, err := DefaultKernel(ctx, nil)
		if err != nil || !bd.Cached {
			b.Fatalf("DefaultKernel: cached=%v err=%v", bd != nil && bd.Cached, err)
		}
	}
}

// BenchmarkPatchedRebuild measures the patched build of the seed squashfs
// patch from the cached base (copy tree, git am, make), removing the result
// after each run so that every iteration builds (target: 5% of the cold
// base build).
func BenchmarkPatchedRebuild(b *testing.B) {
	needTools(b)
	ctx := context.Background()
	base, err := DefaultKernel(ctx, nil)
	if err != nil {
		b.Fatal(err)
	}
	builder, err := DefaultBuilder(testWriter{b})
	if err != nil {
		b.Fatal(err)
	}
	series := patchMails(b, "../testdata/mbox/squashfs-thundering-herd.mbox")
	drop := func(dir string) {
		os.RemoveAll(dir)
		git(ctx, "", "--git-dir="+base.Repo, "worktree", "prune")
	}
	drop(filepath.Join(builder.Cache, "kernels", patchedRecord(base, series).Key))
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		bd, err := builder.Patched(ctx, base, series)
		if err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		if bd.Cached || len(bd.Dropped) > 0 {
			b.Fatalf("patched build: cached=%v, dropped options %v", bd.Cached, bd.Dropped)
		}
		b.ReportMetric(bd.Duration.Seconds(), "s/build")
		drop(bd.Dir)
		b.StartTimer()
	}
}

// BenchmarkSandboxCost measures what the sandbox costs a patched rebuild
// of the seed patch: each iteration builds it twice from the cached base,
// in the sandbox and bare (only the bind mount of the tree on the base's
// path, as root, no bwrap, limits or cgroups), alternating which goes
// first. It reports the median of each for the whole Patched call, its
// make stage, and the CPU time (user+sys) of the make command's process
// tree, which other load on the machine disturbs least.
func BenchmarkSandboxCost(b *testing.B) {
	needTools(b)
	testenv.Root(b) // the bare baseline mounts
	ctx := context.Background()
	base, err := DefaultKernel(ctx, nil)
	if err != nil {
		b.Fatal(err)
	}
	series := patchMails(b, "../testdata/mbox/squashfs-thundering-herd.mbox")
	names := [2]string{"sandbox", "bare"}
	var total, mk, cpu [2][]float64
	for i := 0; i < b.N; i++ {
		for k := 0; k < 2; k++ {
			mode := (i + k) % 2
			stage := &stageTimes{}
			builder, err := DefaultBuilder(stage)
			if err != nil {
				b.Fatal(err)
			}
			builder.bare = mode == 1
			dir := filepath.Join(builder.Cache, "kernels", patchedRecord(base, series).Key)
			dropBuild(base, dir)
			bd, err := builder.Patched(ctx, base, series)
			if err != nil {
				b.Fatal(err)
			}
			if bd.Cached || len(bd.Dropped) > 0 || len(bd.NewWarnings) > 0 {
				b.Fatalf("%s build: cached=%v dropped=%v new warnings=%v", names[mode], bd.Cached, bd.Dropped, bd.NewWarnings)
			}
			c, err := lastCPU(bd.Log)
			if err != nil {
				b.Fatal(err)
			}
			total[mode] = append(total[mode], bd.Duration.Seconds())
			mk[mode] = append(mk[mode], stage.get("make bzImage"))
			cpu[mode] = append(cpu[mode], c)
			b.Logf("%s: %.2fs, make %.2fs, make cpu %.2fs", names[mode], bd.Duration.Seconds(), stage.get("make bzImage"), c)
			dropBuild(base, dir)
		}
	}
	for m := range names {
		b.ReportMetric(median(total[m]), names[m]+"-s/build")
		b.ReportMetric(median(mk[m]), names[m]+"-make-s")
		b.ReportMetric(median(cpu[m]), names[m]+"-make-cpu-s")
	}
	b.ReportMetric(100*(median(total[0])/median(total[1])-1), "%slower")
	b.ReportMetric(100*(median(cpu[0])/median(cpu[1])-1), "%cpu")
}

func median(xs []float64) float64 {
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	if n := len(s); n%2 == 1 {
		return s[n/2]
	} else if n > 0 {
		return (s[n/2-1] + s[n/2]) / 2
	}
	return 0
}

var cpuRe = regexp.MustCompile(`cpu user ([0-9.]+)s sys ([0-9.]+)s`)

// lastCPU is the CPU time of the last command in a build log (make).
func lastCPU(log string) (float64, error) {
	data, err := os.ReadFile(log)
	if err != nil {
		return 0, err
	}
	all := cpuRe.FindAllSubmatch(data, -1)
	if len(all) == 0 {
		return 0, fmt.Errorf("%s records no CPU time", log)
	}
	m := all[len(all)-1]
	u, _ := strconv.ParseFloat(string(m[1]), 64)
	s, _ := strconv.ParseFloat(string(m[2]), 64)
	return u + s, nil
}

// stageTimes reads the stage lines of a build's progress.
type stageTimes struct {
	mu sync.Mutex
	s  map[string]float64
}

var stageDoneRe = regexp.MustCompile(`\] (.*) done in ([0-9.]+)s`)

func (p *stageTimes) Write(b []byte) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if m := stageDoneRe.FindSubmatch(b); m != nil {
		if p.s == nil {
			p.s = map[string]float64{}
		}
		p.s[string(m[1])], _ = strconv.ParseFloat(string(m[2]), 64)
	}
	return len(b), nil
}

func (p *stageTimes) get(name string) float64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.s[name]
}

// BenchmarkCacheAfterSeries builds N single-patch series (20 unless
// PATCHBOT_BENCH_SERIES says) on the shared cache's base into a cache of
// its own capped at 10 GiB (PATCHBOT_BENCH_CAP_MIB to change it), each
// run ended as the pipeline ends it (Kernels.Done), and reports the
// cache's size after them: cache-MiB, the patched builds' entries
// (entries), their mean size (entry-MiB) and what eviction removed
// (evicted). Run it with -benchtime 1x.
func BenchmarkCacheAfterSeries(b *testing.B) {
	needTools(b)
	ctx := context.Background()
	base, err := DefaultKernel(ctx, nil)
	if err != nil {
		b.Fatal(err)
	}
	n, capMiB := 20, int64(10<<10)
	if v, err := strconv.Atoi(os.Getenv("PATCHBOT_BENCH_SERIES")); err == nil && v > 0 {
		n = v
	}
	if v, err := strconv.ParseInt(os.Getenv("PATCHBOT_BENCH_CAP_MIB"), 10, 64); err == nil && v > 0 {
		capMiB = v
	}
	raw, err := os.ReadFile("../testdata/hostile/base-first.patch")
	if err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		bl, err := DefaultBuilder(nil)
		if err != nil {
			b.Fatal(err)
		}
		bl.Cache = filepath.Join(b.TempDir(), "cache")
		bl.CacheSize = capMiB << 20
		k := &Kernels{Builder: bl}
		for i := 1; i <= n; i++ {
			mail := bytes.ReplaceAll(raw, []byte("(the first series was here)"), fmt.Appendf(nil, "(series %d of the cache benchmark)", i))
			bd, err := k.Patched(ctx, base, [][]byte{mail})
			if err != nil {
				b.Fatalf("series %d: %v", i, err)
			}
			k.Done(base, bd)
		}
		dirs, _ := os.ReadDir(filepath.Join(bl.Cache, "kernels"))
		entries := 0
		for _, d := range dirs {
			if d.IsDir() {
				entries++
			}
		}
		size := diskUsage(bl.Cache, map[[2]uint64]bool{})
		b.ReportMetric(float64(size)/(1<<20), "cache-MiB")
		b.ReportMetric(float64(entries), "entries")
		if entries > 0 {
			b.ReportMetric(float64(size)/float64(entries)/(1<<20), "entry-MiB")
		}
		b.ReportMetric(float64(n-entries), "evicted") // a single-patch series keeps its build: only eviction removes one
	}
}
