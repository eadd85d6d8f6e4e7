package images

import (
	"context"
	"os"
	"path/filepath"
	"testing"
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
