package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/patchbot/patchbot/suites"
)

// --continue reads an earlier `suite run --json` and puts each new result
// after the earlier one of its suite and kernel; an earlier run of other
// kernels is refused, not mixed in.
func TestContinueRun(t *testing.T) {
	side := func(kernel string, rounds ...int) *suites.Result {
		r := &suites.Result{Suite: "locks", Profile: "quick", Kernel: kernel, Accel: "tcg", CPUs: 2, MemMiB: 1024}
		for _, n := range rounds {
			r.Samples = append(r.Samples, suites.Sample{Suite: "locks", Workload: "posix", Metric: "ops_per_s", Round: n, Value: float64(n)})
		}
		return r
	}
	path := filepath.Join(t.TempDir(), "first.json")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := writeJSON(f, struct {
		Schema  int              `json:"schema"`
		Results []*suites.Result `json:"results"`
	}{schemaVersion, []*suites.Result{side("base", 1, 2), side("patched", 1, 2)}}); err != nil {
		t.Fatal(err)
	}
	f.Close()
	earlier, err := readSuiteRun(path)
	if err != nil {
		t.Fatal(err)
	}
	got, err := continueRun(earlier, []*suites.Result{side("patched", 1), side("base", 1)})
	if err != nil {
		t.Fatal(err)
	}
	if got[0].Kernel != "patched" || len(got[0].Samples) != 3 || got[0].Samples[2].Round != 3 || got[1].Kernel != "base" || len(got[1].Samples) != 3 {
		t.Errorf("continued: %+v", got)
	}
	if _, err := continueRun(earlier, []*suites.Result{side("base", 1), side("other", 1)}); err == nil || !strings.Contains(err.Error(), "no earlier locks run on other") {
		t.Errorf("a run on another kernel: %v", err)
	}
	if _, err := continueRun(earlier, []*suites.Result{side("base", 1)}); err == nil {
		t.Error("one result continued a run of two")
	}
	if _, err := readSuiteRun(filepath.Join(t.TempDir(), "none.json")); err == nil {
		t.Error("a missing file was read")
	}
}
