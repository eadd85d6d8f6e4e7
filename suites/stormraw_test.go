package suites

import (
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// stormDir makes files of the given sizes in a new directory and returns
// a spec for op over them, each worker's files as plan says.
func stormDir(t *testing.T, op string, sizes []int64, plan [][]int) stormSpec {
	t.Helper()
	dir := t.TempDir()
	spec := stormSpec{Op: op, Sizes: sizes, Plan: plan}
	for i, n := range sizes {
		f := filepath.Join(dir, "f"+string(rune('a'+i)))
		if err := os.WriteFile(f, make([]byte, n), 0o644); err != nil {
			t.Fatal(err)
		}
		spec.Files = append(spec.Files, f)
	}
	return spec
}

func justRun(run func() error) error { return run() }

// TestRawStorm runs each storm operation in the raw workers' process and
// in the agent's threads (stormOp) over the same files: every visit is
// timed, and the bytes read are the files' as each worker visits them.
func TestRawStorm(t *testing.T) {
	sizes := []int64{0, 1, 4096, 200 << 10} // the last past one 128 KiB read
	plan := [][]int{{0, 1, 2, 3}, {3, 3}, {1}}
	want := map[string]int64{stormStat: 0, stormRead: 1 + 4096 + 3*(200<<10) + 1, stormMixed: 1 + 4096 + 3*(200<<10) + 1}
	for _, op := range []string{stormStat, stormRead, stormMixed} {
		spec := stormDir(t, op, sizes, plan)
		elapsed, lat, bytes, err := rawStorm(spec, justRun)
		if err != nil {
			t.Fatalf("%s: %v", op, err)
		}
		if len(lat) != 7 || bytes != want[op] || elapsed <= 0 || lat.max() > elapsed {
			t.Errorf("%s: %d latencies (max %v) in %v, %d bytes; want 7 within the storm, %d bytes",
				op, len(lat), lat.max(), elapsed, bytes, want[op])
		}
		var goBytes int64
		buf := make([]byte, 128<<10)
		for _, files := range plan {
			for _, i := range files {
				n, err := stormOp(op, spec.Files[i], buf)
				if err != nil {
					t.Fatal(err)
				}
				goBytes += n
			}
		}
		if goBytes != bytes {
			t.Errorf("%s: the agent's threads read %d bytes, the raw workers %d", op, goBytes, bytes)
		}
	}
}

// TestRawStormFailures: a file that is gone or not of its size ends the
// storm with an error that names it, and a spec that is wrong is refused
// before any process starts.
func TestRawStormFailures(t *testing.T) {
	spec := stormDir(t, stormRead, []int64{10, 20}, [][]int{{0}, {1}})
	os.Remove(spec.Files[1])
	if _, _, _, err := rawStorm(spec, justRun); err == nil || !strings.Contains(err.Error(), spec.Files[1]) ||
		!strings.Contains(err.Error(), "no such file") {
		t.Errorf("a missing file: %v, want its path and ENOENT", err)
	}
	spec = stormDir(t, stormMixed, []int64{10, 20}, [][]int{{0, 1}})
	spec.Sizes[1] = 21
	if _, _, _, err := rawStorm(spec, justRun); err == nil || !strings.Contains(err.Error(), spec.Files[1]+": read 20 bytes, the image has 21") {
		t.Errorf("a short file: %v", err)
	}
	for _, bad := range []stormSpec{
		{Op: "write", Files: spec.Files, Sizes: spec.Sizes, Plan: spec.Plan},
		{Op: stormStat, Files: spec.Files, Sizes: spec.Sizes[:1], Plan: spec.Plan},
		{Op: stormStat, Files: spec.Files, Sizes: spec.Sizes, Plan: [][]int{{0, 2}}},
		{Op: stormStat, Files: spec.Files, Sizes: spec.Sizes, Plan: [][]int{{-1}}},
		{Op: stormStat, Files: spec.Files, Sizes: spec.Sizes},
	} {
		measured := false
		_, _, _, err := rawStorm(bad, func(run func() error) error { measured = true; return run() })
		if err == nil || measured || !strings.HasPrefix(err.Error(), "storm: ") {
			t.Errorf("%+v: %v (measured: %v), want refused", bad, err, measured)
		}
	}
}

// TestRawStormWorkersBlockApart: a worker blocked in the kernel does not
// hold the others back. Each of two workers opens a FIFO to read it and
// blocks until a writer comes; the test waits until both are in open at
// once, which never happens if one blocked worker kept the process's only
// processor (a raw call keeps it: the workers would never all be waiting,
// and the storm would end at stormReadyTimeout).
func TestRawStormWorkersBlockApart(t *testing.T) {
	dir := t.TempDir()
	spec := stormSpec{Op: stormRead, Sizes: []int64{3, 3}, Plan: [][]int{{0}, {1}}}
	for _, name := range []string{"a", "b"} {
		f := filepath.Join(dir, name)
		if err := unix.Mkfifo(f, 0o600); err != nil {
			t.Fatal(err)
		}
		spec.Files = append(spec.Files, f)
	}
	writers := make(chan error, 1)
	measured := false
	measure := func(run func() error) error {
		measured = true
		go func() {
			// A FIFO opened to write without blocking fails with ENXIO
			// until a reader has it open.
			var fds []int
			deadline := time.Now().Add(20 * time.Second)
			for _, f := range spec.Files {
				for {
					fd, err := unix.Open(f, unix.O_WRONLY|unix.O_NONBLOCK, 0)
					if err == nil {
						fds = append(fds, fd)
						break
					}
					if !errors.Is(err, syscall.ENXIO) || time.Now().After(deadline) {
						writers <- err
						for _, fd := range fds {
							unix.Close(fd)
						}
						os.WriteFile(f, nil, 0) // lets the reader that is in open go on
						return
					}
					time.Sleep(10 * time.Millisecond)
				}
			}
			for _, fd := range fds {
				unix.Write(fd, []byte("abc"))
				unix.Close(fd)
			}
			writers <- nil
		}()
		return run()
	}
	_, lat, bytes, err := rawStorm(spec, measure)
	if !measured {
		t.Fatalf("the storm never started: %v", err)
	}
	if werr := <-writers; werr != nil {
		t.Fatalf("the two workers were never in open at once: %v", werr)
	}
	if err != nil || len(lat) != 2 || bytes != 6 {
		t.Errorf("%d latencies, %d bytes, %v; want 2 and 6", len(lat), bytes, err)
	}
}

// The workers are the agent's or raw, and no more threads than the raw
// workers' process takes.
func TestWorkersParam(t *testing.T) {
	for _, c := range []struct {
		p    Params
		want string
	}{
		{Params{Threads: 64, Ops: 16, CacheEntries: 3}, ""},
		{Params{Threads: 64, Ops: 16, CacheEntries: 3, Workers: "raw"}, ""},
		{Params{Threads: 64, Ops: 16, CacheEntries: 3, Workers: "green"}, `workers: "green" is not a kind of workers`},
		{Params{Threads: maxStormWorkers + 1, Ops: 16, CacheEntries: 3, Workers: "raw"}, "threads: 1025, want at most 1024"},
	} {
		err := c.p.check("cache-contention")
		if c.want == "" && err != nil || c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)) {
			t.Errorf("%+v: %v, want %q", c.p, err, c.want)
		}
	}
}

// TestRawStormStartsOnTheStartByte: the newline after the spec's JSON,
// which the decoder may leave in the pipe, does not start the storm;
// only the start byte does, inside the agent's counters' window.
func TestRawStormStartsOnTheStartByte(t *testing.T) {
	spec := stormDir(t, stormStat, []int64{1}, [][]int{{0}})
	cmd, in, out, err := startRawChild("storm", 2)
	if err != nil {
		t.Fatal(err)
	}
	defer waitChild(cmd, 10*time.Second)
	defer in.Close()
	b, _ := json.Marshal(spec)
	in.Write(b)
	time.Sleep(100 * time.Millisecond) // the decoder has the spec, not the newline
	in.Write([]byte("\n"))
	if _, err := io.ReadFull(out, make([]byte, 1)); err != nil {
		t.Fatalf("no ready: %v", err)
	}
	reply := make(chan stormReply, 1)
	go func() {
		var rep stormReply
		json.NewDecoder(out).Decode(&rep)
		reply <- rep
	}()
	select {
	case rep := <-reply:
		t.Fatalf("the storm ran before its start: %+v", rep)
	case <-time.After(500 * time.Millisecond):
	}
	in.Write([]byte{1})
	select {
	case rep := <-reply:
		if rep.Err != "" || len(rep.Lat) != 1 || len(rep.Lat[0]) != 1 {
			t.Errorf("reply %+v", rep)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("no reply after the start")
	}
}
