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
	"github.com/patchbot/patchbot/internal/testenv"
	"github.com/patchbot/patchbot/suites"
	"github.com/patchbot/patchbot/vmrunner/report"
)

// seedKernel is the seed patch built on the default kernel (the shared
// cache's build): the changed functions of a real series.
func seedKernel(t testing.TB, base *images.Build) *images.Build {
	return patchedKernel(t, base, "../../testdata/mbox/squashfs-thundering-herd.mbox")
}

// patchedKernel is the first patch of the mbox (not the ping and review
// after it) built on base.
func patchedKernel(t testing.TB, base *images.Build, mbox string) *images.Build {
	t.Helper()
	raw, err := os.ReadFile(mbox)
	if err != nil {
		t.Fatal(err)
	}
	if i := bytes.Index(raw, []byte("\nFrom ")); i > 0 {
		raw = raw[:i+1]
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
	changed := ChangedFunctions(base, patched)
	if changed.Err != nil || changed.More != 0 || !changed.Compared {
		t.Fatalf("changed functions: %+v", changed)
	}
	names := changed.Probes()
	if !strings.Contains(names, "squashfs_cache_get") {
		t.Fatalf("the seed's changed functions %q lack squashfs_cache_get", names)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	res, err := Run(ctx, Options{Suite: "cache-contention", Plan: FixedPlan("smoke", 1, testWriter{t}), Probes: names,
		Kernels:  []Kernel{{Side: blame.Base, BzImage: base.BzImage}, {Side: blame.Patched, BzImage: patched.BzImage}},
		CacheDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	NoteChanged(res, changed)
	calls := map[string]map[string]suites.Calls{}
	for _, r := range res {
		calls[r.Kernel] = map[string]suites.Calls{}
		for _, c := range r.Calls {
			calls[r.Kernel][c.Func] = c
		}
	}
	if c := calls["patched"]["squashfs_cache_get"]; c.Count == 0 || c.Rounds != 1 || len(c.Lines) == 0 || c.Code != report.CodeDiffers {
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
	changed := ChangedFunctions(base, patched)
	if changed.Err != nil {
		b.Fatal(changed.Err)
	}
	var with, without []float64
	for b.Loop() {
		for _, p := range []string{changed.Probes(), ""} {
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
// cache-sizing patches) does not read as one that changed no code when
// the kernels' code could not be compared: its note says that the
// functions using a macro changed and are not counted. When the code was
// compared and no function differs, the note says the series changed no
// machine code.
func TestNoteChangedWithoutFunctions(t *testing.T) {
	res := []*suites.Result{{Kernel: "base"}, {Kernel: "patched"}}
	NoteChanged(res, Changed{})
	for _, r := range res {
		note := r.Notes[NoteChangedFunctions]
		if !strings.HasPrefix(note, "none found:") || !strings.Contains(note, "macro") || !strings.Contains(note, "not named or counted") {
			t.Errorf("%s: note %q", r.Kernel, note)
		}
	}
	NoteChanged(res, Changed{Compared: true})
	for _, r := range res {
		if note := r.Notes[NoteChangedFunctions]; note != suites.NoCompiledChange {
			t.Errorf("%s, compared: note %q", r.Kernel, note)
		}
	}
}

// The functions a series changes, on real kernels built from the panel's
// patches: a #define's users are found by their compiled code (the
// fragment cache's size is squashfs_fill_super's constant, and nothing
// else), a rename that the compiler does not keep changes no machine
// code, a function that lost its only user is gone, and the seed's
// functions hold its lines and differ.
func TestChangedFunctionsByCode(t *testing.T) {
	base := defaultKernel(t)
	build := func(name string) *images.Build { return patchedKernel(t, base, "../../testdata/panel/"+name+".mbox") }
	frag := ChangedFunctions(base, build("frag-cache-2"))
	if frag.Err != nil || !frag.Compared || len(frag.Funcs) != 1 || frag.Funcs[0].Func != "squashfs_fill_super" ||
		frag.Funcs[0].Code != report.CodeDiffers || len(frag.Funcs[0].Lines) != 0 {
		t.Errorf("frag-cache-2 (SQUASHFS_CACHED_FRAGMENTS 3 -> 2): %+v", frag)
	}
	rename := ChangedFunctions(base, build("noop-rename"))
	if rename.Err != nil || !rename.Compared || len(rename.Funcs) == 0 {
		t.Fatalf("noop-rename: %+v", rename)
	}
	for _, f := range rename.Funcs {
		if f.Code != report.CodeSame || len(f.Lines) == 0 {
			t.Errorf("noop-rename's %s: %+v, want its changed lines and the base's code", f.Func, f)
		}
	}
	// Readahead switched off: squashfs_readahead loses its only
	// user and is gone, and read_blocklist, left with one caller, is
	// inlined into it.
	gone := map[string]string{}
	for _, f := range ChangedFunctions(base, patchedKernel(t, base, "../../testdata/mbox/squashfs-readahead-off.mbox")).Funcs {
		gone[f.Func] = f.Code
	}
	if gone["squashfs_readahead"] != report.CodeGone || gone["read_blocklist"] != report.CodeGone || gone["squashfs_read_folio"] != report.CodeDiffers {
		t.Errorf("readahead-off: %v", gone)
	}
	seed := ChangedFunctions(base, seedKernel(t, base))
	got := map[string]string{}
	for _, f := range seed.Funcs {
		got[f.Func] = f.Code
	}
	if got["squashfs_cache_get"] != report.CodeDiffers || got["squashfs_cache_wake_function"] != report.CodeDiffers {
		t.Errorf("the seed: %+v", seed)
	}
	t.Logf("frag-cache-2 %+v; noop-rename %+v; seed %+v", frag.Funcs, rename.Funcs, seed.Funcs)
}

// defaultKernel is the default kernel, built or found cached; it needs no
// VM.
func defaultKernel(t testing.TB) *images.Build {
	t.Helper()
	testenv.NeedsKernel(t)
	base, err := images.DefaultKernel(context.Background(), testWriter{t})
	if err != nil {
		t.Fatal(err)
	}
	return base
}

// BenchmarkChangedFunctions is what finding a series' changed functions
// costs the host once per patched kernel: both vmlinux read, the line
// table searched, every function's code compared (meta-cache-2: a
// #define whose users are in two units).
//
//	PATCHBOT_FULL_TIER=1 PATCHBOT_CACHE=/var/cache/patchbot \
//	  go test -run '^$' -bench ChangedFunctions -benchtime 5x ./suites/invm/
func BenchmarkChangedFunctions(b *testing.B) {
	base := defaultKernel(b)
	patched := patchedKernel(b, base, "../../testdata/panel/meta-cache-2.mbox")
	for b.Loop() {
		if c := changedCode(base, patched); !c.Compared || len(c.Funcs) != 2 {
			b.Fatalf("meta-cache-2: %+v", c)
		}
	}
}
