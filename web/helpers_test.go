package web

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/patchbot/patchbot/judge"
	"github.com/patchbot/patchbot/judge/stats"
	"github.com/patchbot/patchbot/reports"
	"github.com/patchbot/patchbot/store"
	"github.com/patchbot/patchbot/suites"
)

// copyDir copies a directory tree of regular files.
func copyDir(t testing.TB, src, dst string) {
	t.Helper()
	err := filepath.WalkDir(src, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		target := filepath.Join(dst, rel)
		if d.IsDir() {
			return os.MkdirAll(target, 0o755)
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		return os.WriteFile(target, data, 0o644)
	})
	if err != nil {
		t.Fatal(err)
	}
}

// stateWith makes a state directory holding the named fixture runs of
// testdata/runs.
func stateWith(t testing.TB, fixtures ...string) string {
	t.Helper()
	state := t.TempDir()
	for _, f := range fixtures {
		copyDir(t, filepath.Join("testdata", "runs", f), filepath.Join(state, "runs", f))
	}
	return state
}

// synthRun writes a cache-contention-like run with 5 rounds a kernel:
// throughput up, wake-ups per release down, with the model.
func synthRun(t testing.TB, state, name, subject string, finished time.Time, seed uint64) *reports.Run {
	t.Helper()
	rng := rand.New(rand.NewPCG(seed, 7))
	run := &reports.Run{
		Thread: reports.Thread{Subject: subject, MessageID: "<" + name + "@example.org>",
			Author: "Dev Eloper <dev@example.org>"},
		BaseCommit: "3c5f1a9e7b2d4c6f8a0b1c2d3e4f5a6b7c8d9e0f", BaseTitle: "Linux 6.1.192",
		PatchedCommit: "8e2d6f0a4c1b3e5d7f9a2c4e6b8d0f1a3c5e7b9d", ConfigHash: "9b1e", Compiler: "gcc 12",
		CPUs: 2, MemMiB: 1024, Accel: "tcg", Runs: 5, Finished: finished,
		Commands: []string{"patchbot run --mbox series.mbox --profile quick --runs 5"},
		Options:  reports.Options{Options: judge.Options{Test: stats.LogWelch}},
		Model: &reports.Model{BasePolicy: "wake-all", PatchedPolicy: "keyed",
			Predicted: map[string]float64{"wake-all": 9.6, "keyed": 1.0}},
	}
	metrics := []struct {
		name, unit   string
		higher       bool
		base, change float64
	}{
		{"files_per_s", "files/s", true, 700, 1.8},
		{"latency_mean", "ms", false, 90, 0.55},
		{"sched_wakeup", "count", false, 95000, 0.37},
		{"wakeups_per_release", "count", false, 9.6, 0.11},
	}
	for side, label := range []string{"base", "patched"} {
		res := suites.Result{Suite: "cache-contention", Profile: "quick", Kernel: label, Accel: "tcg", CPUs: 2,
			MemMiB: 1024, Started: finished.Add(-time.Hour), Finished: finished}
		for _, w := range []string{"stat-storm", "read-storm"} {
			for _, m := range metrics {
				for round := range 5 {
					v := m.base
					if side == 1 {
						v *= m.change
					}
					v *= 1 + 0.03*rng.NormFloat64()
					res.Samples = append(res.Samples, suites.Sample{Suite: "cache-contention", Workload: w,
						Metric: m.name, Unit: m.unit, HigherIsBetter: m.higher, Round: round, Value: v})
				}
			}
		}
		if side == 0 {
			run.Base = []suites.Result{res}
		} else {
			run.Patched = []suites.Result{res}
		}
	}
	dir := filepath.Join(state, "runs", name)
	if err := reports.SaveRun(dir, run); err != nil {
		t.Fatal(err)
	}
	return run
}

// locksRun writes a locks run: acquisitions per second by contenders.
func locksRun(t testing.TB, state, name string, finished time.Time) *reports.Run {
	t.Helper()
	rng := rand.New(rand.NewPCG(3, 4))
	run := &reports.Run{
		Thread:     reports.Thread{Subject: "[PATCH] locks: fewer wake-ups", MessageID: "<locks@example.org>", Author: "L <l@example.org>"},
		BaseCommit: "aaaa", PatchedCommit: "bbbb", Runs: 4, Finished: finished,
		Commands: []string{"patchbot run --mbox series.mbox --suites locks"},
	}
	for side, label := range []string{"base", "patched"} {
		res := suites.Result{Suite: "locks", Kernel: label}
		for _, n := range []int{1, 4, 16, 64} {
			for round := range 4 {
				v := 1e6 / float64(n)
				if side == 1 {
					v *= 1.4
				}
				v *= 1 + 0.02*rng.NormFloat64()
				res.Samples = append(res.Samples, suites.Sample{Suite: "locks", Workload: "flock",
					Params: map[string]string{"contenders": strconv.Itoa(n)}, Metric: "acquisitions_per_s",
					Unit: "ops/s", HigherIsBetter: true, Round: round, Value: v})
			}
		}
		if side == 0 {
			run.Base = []suites.Result{res}
		} else {
			run.Patched = []suites.Result{res}
		}
	}
	if err := reports.SaveRun(filepath.Join(state, "runs", name), run); err != nil {
		t.Fatal(err)
	}
	return run
}

// fakeQueue records submissions and queues each as a job of a real store,
// so that the job's page exists.
type fakeQueue struct {
	st   *store.Store
	mu   sync.Mutex
	subs []Submission
	err  error
}

func (q *fakeQueue) Submit(ctx context.Context, s Submission) (int64, error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.err != nil {
		return 0, q.err
	}
	q.subs = append(q.subs, s)
	id, _, err := q.st.AddJob(ctx, store.Job{Dedupe: fmt.Sprintf("web:%d", len(q.subs)), Trigger: "web",
		Title: "asked by " + s.Submitter, Request: []byte("{}")})
	return id, err
}

func (q *fakeQueue) submissions() []Submission {
	q.mu.Lock()
	defer q.mu.Unlock()
	return append([]Submission(nil), q.subs...)
}

func openStore(t testing.TB, state string) *store.Store {
	t.Helper()
	st, err := store.Open(filepath.Join(state, "state.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

func newHandler(t testing.TB, o Options) http.Handler {
	t.Helper()
	h, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// get serves one GET request and returns the status and body.
func get(t testing.TB, h http.Handler, path string) (int, string, http.Header) {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", path, nil))
	body, _ := io.ReadAll(rec.Result().Body)
	return rec.Code, string(body), rec.Result().Header
}

func contains2(s string, subs ...string) string {
	for _, sub := range subs {
		if !strings.Contains(s, sub) {
			return sub
		}
	}
	return ""
}
