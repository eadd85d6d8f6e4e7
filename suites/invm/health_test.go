package invm

import (
	"bytes"
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/patchbot/patchbot/blame"
	"github.com/patchbot/patchbot/images"
	"github.com/patchbot/patchbot/suites"
)

// seedKernel is the seed patch built on the default kernel (the shared
// cache's build): the changed functions of a real series.
func seedKernel(t testing.TB, base *images.Build) *images.Build {
	t.Helper()
	raw, err := os.ReadFile("../../testdata/mbox/squashfs-thundering-herd.mbox")
	if err != nil {
		t.Fatal(err)
	}
	if i := bytes.Index(raw, []byte("\nFrom ")); i > 0 {
		raw = raw[:i+1] // the patch, not the ping and review after it
	}
	b, err := images.DefaultBuilder(nil)
	if err != nil {
		t.Fatal(err)
	}
	k, err := b.Patched(context.Background(), base, [][]byte{raw})
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// The seed's changed functions are found in its patched vmlinux and
// counted in the guest: squashfs_cache_get runs in every cache-contention
// round; the function the seed adds is not in the base kernel.
func TestChangedFunctionsCounted(t *testing.T) {
	base := guestKernel(t)
	patched := seedKernel(t, base)
	funcs, more, err := ChangedFunctions(patched)
	if err != nil || more != 0 {
		t.Fatalf("changed functions: %v (more %d)", err, more)
	}
	names := Probes(funcs)
	if !strings.Contains(names, "squashfs_cache_get") {
		t.Fatalf("the seed's changed functions %q lack squashfs_cache_get", names)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	res, err := Run(ctx, Options{Suite: "cache-contention", Plan: FixedPlan("quick", 1, testWriter{t}), Probes: names,
		Kernels:  []Kernel{{Side: blame.Base, BzImage: base.BzImage}, {Side: blame.Patched, BzImage: patched.BzImage}},
		CacheDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	NoteChanged(res, funcs, more, nil)
	calls := map[string]map[string]suites.Calls{}
	for _, r := range res {
		calls[r.Kernel] = map[string]suites.Calls{}
		for _, c := range r.Calls {
			calls[r.Kernel][c.Func] = c
		}
	}
	if c := calls["patched"]["squashfs_cache_get"]; c.Count == 0 || c.Rounds != 1 || len(c.Lines) == 0 {
		t.Errorf("patched squashfs_cache_get: %+v", c)
	}
	if c := calls["base"]["squashfs_cache_get"]; c.Count == 0 {
		t.Errorf("base squashfs_cache_get: %+v", c)
	}
	if c, ok := calls["base"]["squashfs_cache_wake_function"]; !ok || c.Err != "no such function in this kernel" {
		t.Errorf("base squashfs_cache_wake_function, which only the seed has: %+v", c)
	}
	t.Logf("calls: %+v", calls)
}

// BenchmarkProbeCost is what counting the changed functions costs a
// round: cache-contention's quick rounds on the seed's patched kernel
// with the seed's changed functions probed and without, alternated, in
// one VM each (probe-cost-% is the probed rounds' mean time over the
// plain ones', less 100).
//
//	PATCHBOT_FULL_TIER=1 PATCHBOT_CACHE=/var/cache/patchbot \
//	  go test -run '^$' -bench ProbeCost -benchtime 3x -timeout 120m ./suites/invm/
func BenchmarkProbeCost(b *testing.B) {
	base := guestKernel(b)
	patched := seedKernel(b, base)
	funcs, _, err := ChangedFunctions(patched)
	if err != nil {
		b.Fatal(err)
	}
	var with, without []float64
	for b.Loop() {
		for _, p := range []string{Probes(funcs), ""} {
			res, err := Run(context.Background(), Options{Suite: "cache-contention", Plan: FixedPlan("quick", 2, nil), Probes: p,
				Kernels: []Kernel{{Side: blame.Patched, BzImage: patched.BzImage}}, CacheDir: b.TempDir()})
			if err != nil {
				b.Fatal(err)
			}
			for _, rd := range res[0].Rounds {
				if p != "" {
					with = append(with, rd.Seconds)
				} else {
					without = append(without, rd.Seconds)
				}
			}
		}
	}
	mean := func(xs []float64) float64 {
		s := 0.0
		for _, x := range xs {
			s += x
		}
		return s / float64(len(xs))
	}
	b.ReportMetric(mean(with), "probed-round-s")
	b.ReportMetric(mean(without), "plain-round-s")
	b.ReportMetric(100*(mean(with)/mean(without)-1), "probe-cost-%")
}

// A series whose changed lines hold no code (a #define, as the panel's
// cache-sizing patches) does not read as one that changed no code: its
// note says that the functions using a macro changed and are not counted.
func TestNoteChangedWithoutFunctions(t *testing.T) {
	res := []*suites.Result{{Kernel: "base"}, {Kernel: "patched"}}
	NoteChanged(res, nil, 0, nil)
	for _, r := range res {
		note := r.Notes[NoteChangedFunctions]
		if !strings.HasPrefix(note, "none found:") || !strings.Contains(note, "macro") || !strings.Contains(note, "not named or counted") {
			t.Errorf("%s: note %q", r.Kernel, note)
		}
	}
}
