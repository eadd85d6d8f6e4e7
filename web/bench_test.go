package web

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/patchbot/patchbot/reports"
)

// The dashboard's speed targets (docs/dashboard.md): the page of a run
// with 5 × 2 runs in under 100 ms, the home page with 10,000 stored runs in
// under 200 ms. Run them under the heavy lock, on a quiet host:
//
//	flock /tmp/patchbot-heavy.lock go test -run '^$' -bench . -benchtime 20x -count 3 ./web/

// seedRun is the run the benchmarks and the browser test read: the seed
// patch measured by patchbot itself (5 runs on each kernel).
const seedRun = "squashfs-seed"

// BenchmarkRunPageCold makes the page of the seed run from its files every
// time: reading them, judge.Compare, every plot, the template.
func BenchmarkRunPageCold(b *testing.B) {
	state := stateWith(b, seedRun)
	s, err := newServer(Options{StateDir: state})
	if err != nil {
		b.Fatal(err)
	}
	dir := filepath.Join(state, "runs", seedRun)
	var buf bytes.Buffer
	b.ReportAllocs()
	for b.Loop() {
		v, err := s.buildRunView(seedRun, dir)
		if err != nil {
			b.Fatal(err)
		}
		buf.Reset()
		if err := renderPage(&buf, "run", v.Title, v); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(buf.Len()), "page-bytes")
}

// BenchmarkRunPage is a request for the seed run's page once its view is
// cached (the run directory unchanged): what a second reader waits.
func BenchmarkRunPage(b *testing.B) {
	state := stateWith(b, seedRun)
	h := newHandler(b, Options{StateDir: state})
	path := "/runs/" + seedRun + "/"
	for b.Loop() {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest("GET", path, nil))
		if rec.Code != 200 {
			b.Fatalf("GET %s = %d", path, rec.Code)
		}
	}
}

var (
	manyOnce  sync.Once
	manyState string
	manyErr   error
)

const manyRuns = 10_000

// manyRunsState is a state directory with 10,000 copies of the seed run,
// each with its own thread, series and finish time. It is made once per
// test binary.
func manyRunsState(b *testing.B) string {
	manyOnce.Do(func() {
		manyState, manyErr = os.MkdirTemp("", "patchbot-web-bench-")
		if manyErr != nil {
			return
		}
		src := filepath.Join("testdata", "runs", seedRun)
		base, _ := os.ReadFile(filepath.Join(src, reports.BaseFile))
		patched, _ := os.ReadFile(filepath.Join(src, reports.PatchedFile))
		var run map[string]any
		data, _ := os.ReadFile(filepath.Join(src, reports.RunFile))
		if manyErr = json.Unmarshal(data, &run); manyErr != nil {
			return
		}
		t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
		for i := range manyRuns {
			dir := filepath.Join(manyState, "runs", fmt.Sprintf("job-%d", i+1))
			if manyErr = os.MkdirAll(dir, 0o755); manyErr != nil {
				return
			}
			thread := run["thread"].(map[string]any)
			thread["subject"] = fmt.Sprintf("[PATCH v%d] squashfs: change number %d", i%3+1, i/3)
			thread["message_id"] = fmt.Sprintf("<bench-%d@example.org>", i)
			run["finished"] = t0.Add(time.Duration(i) * time.Minute)
			data, _ := json.MarshalIndent(run, "", "  ")
			for name, content := range map[string][]byte{reports.RunFile: data, reports.BaseFile: base, reports.PatchedFile: patched} {
				if manyErr = os.WriteFile(filepath.Join(dir, name), content, 0o644); manyErr != nil {
					return
				}
			}
		}
	})
	if manyErr != nil {
		b.Fatal(manyErr)
	}
	return manyState
}

func TestMain(m *testing.M) {
	code := m.Run()
	if manyState != "" {
		os.RemoveAll(manyState)
	}
	os.Exit(code)
}

// BenchmarkHome10k is a request for the home page with 10,000 stored runs,
// the index built and the recent runs' verdicts known: every request after
// the first.
func BenchmarkHome10k(b *testing.B) {
	state := manyRunsState(b)
	st := openStore(b, b.TempDir())
	h := newHandler(b, Options{StateDir: state, Store: st})
	get(b, h, "/") // the first request computes the 50 recent verdicts
	for b.Loop() {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest("GET", "/", nil))
		if rec.Code != 200 {
			b.Fatalf("GET / = %d", rec.Code)
		}
	}
}

// BenchmarkHome10kFirst is the first request for the home page after
// start: the 50 most recent runs are read and compared for their verdicts.
func BenchmarkHome10kFirst(b *testing.B) {
	state := manyRunsState(b)
	s, err := newServer(Options{StateDir: state})
	if err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		b.StopTimer()
		// Forget the verdicts, keep the index: the state of a fresh start.
		s.runs.mu.Lock()
		for _, e := range s.runs.byName {
			e.verdict = ""
		}
		s.runs.mu.Unlock()
		b.StartTimer()
		v, err := s.homeView(context.Background())
		if err != nil || len(v.Recent) != homeRecent {
			b.Fatal(err)
		}
		var buf bytes.Buffer
		if err := renderPage(&buf, "home", "patchbot", v); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkStart10k is New on a state directory of 10,000 runs: the scan
// of every run.json that makes the lists.
func BenchmarkStart10k(b *testing.B) {
	state := manyRunsState(b)
	for b.Loop() {
		s, err := newServer(Options{StateDir: state})
		if err != nil {
			b.Fatal(err)
		}
		if _, n := s.runs.page(0, 1); n != manyRuns {
			b.Fatalf("%d runs indexed, want %d", n, manyRuns)
		}
	}
}
