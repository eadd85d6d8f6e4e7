package report

import (
	"context"
	"debug/elf"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/patchbot/patchbot/images"
	"github.com/patchbot/patchbot/internal/testenv"
)

// The default kernel's vmlinux decodes a frame to the function's own
// source file, and the changed lines of a file to the functions that hold
// their code.
func TestDecodeDefaultKernel(t *testing.T) {
	testenv.NeedsKernel(t)
	k, err := images.DefaultKernel(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	f, err := elf.Open(k.Vmlinux)
	if err != nil {
		t.Fatal(err)
	}
	syms, err := f.Symbols()
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	var get, put elf.Symbol
	for _, s := range syms {
		switch s.Name {
		case "squashfs_cache_get":
			get = s
		case "squashfs_cache_put":
			put = s
		}
	}
	if get.Size == 0 || put.Size == 0 {
		t.Fatal("no squashfs_cache_get or squashfs_cache_put in the default kernel")
	}
	r := &Report{Frames: []Frame{
		{Func: "squashfs_cache_get", Offset: 0x10, Size: get.Size, Context: "RIP"},
		{Func: "squashfs_cache_put", Offset: put.Size / 2, Size: put.Size},
		{Func: "no_such_function", Offset: 1, Size: 2},
	}}
	Decode(k.Vmlinux, r)
	for _, fr := range r.Frames[:2] {
		if fr.File != "fs/squashfs/cache.c" || fr.Line < 40 || fr.Line > 250 {
			t.Errorf("%s decoded to %s:%d, want a line of fs/squashfs/cache.c", fr.Func, fr.File, fr.Line)
		}
	}
	if r.Frames[2].File != "" || !strings.Contains(r.Decoded, "2 of 3 frames placed") {
		t.Errorf("decoded %q, the unknown frame at %q", r.Decoded, r.Frames[2].File)
	}
	s, err := Open(k.Vmlinux)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	// squashfs_cache_put's body (lines 177-191 of the 6.1 file).
	changed, more := s.Changed(map[string][][2]int{"fs/squashfs/cache.c": {{178, 182}}, "README": {{1, 1}}})
	if more != 0 || len(changed) != 1 || changed[0].Func != "squashfs_cache_put" {
		t.Fatalf("changed functions %+v (more %d), want squashfs_cache_put", changed, more)
	}
	// A line that only calls an inline function (spin_lock()) has no
	// instruction of its own in the line table: the inlined call's
	// entry names it.
	for line, want := range map[int]string{58: "squashfs_cache_get", 177: "squashfs_cache_put"} {
		changed, _ := s.Changed(map[string][][2]int{"fs/squashfs/cache.c": {{line, line}}})
		if len(changed) != 1 || changed[0].Func != want || len(changed[0].Inlined) != 0 {
			t.Errorf("cache.c:%d (spin_lock()): changed functions %+v, want %s alone", line, changed, want)
		}
	}
	// A comment makes no code.
	if changed, _ := s.Changed(map[string][][2]int{"fs/squashfs/cache.c": {{181, 184}}}); len(changed) != 0 {
		t.Errorf("a comment's lines are in %+v", changed)
	}
}

// A walked stack decodes an interrupted instruction where it is, and a
// return address at its call: an interrupt that lands on a function's
// first instruction names that function and its first line, where pc-1
// would be the end of the function before it.
func TestSampleDecodesInterruptedInstruction(t *testing.T) {
	testenv.NeedsKernel(t)
	k, err := images.DefaultKernel(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	s, err := Open(k.Vmlinux)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	addr := func(name string) uint64 {
		for _, sym := range s.funcs[name] {
			if sym.Size > 0 {
				return sym.Value
			}
		}
		t.Fatalf("no %s in the default kernel", name)
		return 0
	}
	put, get := addr("squashfs_cache_put"), addr("squashfs_cache_get")
	stack := []WalkedPC{
		{PC: put + 4, At: true},                     // the stopped vCPU, inside an interrupt
		{PC: get, At: true},                         // the instruction it interrupted
		{PC: addr("squashfs_read_metadata") + 0x20}, // a return address
	}
	st := Sample(nil, 0, stack, s).Stack
	if st == nil || len(st.Frames) != 3 {
		t.Fatalf("stack %+v", st)
	}
	f := st.Frames[1]
	if f.Func != "squashfs_cache_get" || f.Offset != 0 || f.Context != "RIP" || f.File != "fs/squashfs/cache.c" || f.Line < 50 || f.Line > 60 {
		t.Errorf("the interrupted instruction at squashfs_cache_get's first byte: %+v, want squashfs_cache_get+0x0 at its first lines (fs/squashfs/cache.c:5x)", f)
	}
	if r := st.Frames[2]; r.Func != "squashfs_read_metadata" || r.Offset != 0x20 || r.Context == "RIP" {
		t.Errorf("the return address: %+v", r)
	}
	trace := strings.Join(st.Trace(), "\n")
	if strings.Count(trace, "RIP: ") != 2 {
		t.Errorf("the trace marks %d instructions as RIP, want 2:\n%s", strings.Count(trace, "RIP: "), trace)
	}
	t.Logf("\n%s", trace)
}

// The samples' traces decode on the kernel that printed them: the
// sampler patch built on the default kernel, as it was for the samples
// (the same source, config and compiler make the same code). Each guilty
// frame is a line of the sampler's code in fs/squashfs/super.c, and a
// BUG()'s faulting instruction decodes to the very line the kernel
// printed.
func TestDecodeSamples(t *testing.T) {
	testenv.NeedsKernel(t)
	ctx := context.Background()
	base, err := images.DefaultKernel(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	b, err := images.DefaultBuilder(nil)
	if err != nil {
		t.Fatal(err)
	}
	b.Cache = t.TempDir() // the sampler stays out of the shared cache
	raw, err := os.ReadFile("testdata/sampler.patch")
	if err != nil {
		t.Fatal(err)
	}
	k, err := b.Patched(ctx, base, [][]byte{raw})
	if err != nil {
		t.Fatalf("the sampler does not build: %v", err)
	}
	s, err := Open(k.Vmlinux)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for _, smp := range loadSamples(t) {
		t.Run(smp.name, func(t *testing.T) {
			reps := Parse(smp.console)
			if len(reps) == 0 {
				t.Fatal("no report")
			}
			r := reps[0]
			s.Decode(r)
			g := r.GuiltyFrame()
			if g == nil || g.File != "fs/squashfs/super.c" || g.Line < 593 || g.Line > 657 {
				t.Fatalf("guilty frame %+v: want a line of the sampler in fs/squashfs/super.c (%s)", g, r.Decoded)
			}
			if r.Location != "" && r.Frames[0].Context == "RIP" && r.Location != fmt.Sprintf("%s:%d", r.Frames[0].File, r.Frames[0].Line) {
				t.Errorf("the faulting instruction decodes to %s:%d, the kernel printed %s", r.Frames[0].File, r.Frames[0].Line, r.Location)
			}
		})
	}
}
