package suites

import (
	"reflect"
	"testing"
	"time"
)

// A round that ran its workloads three times keeps one sample per metric
// and cell: the windows' mean, with the windows in the order they ran.
func TestFoldWindows(t *testing.T) {
	c1, c2 := map[string]string{"contenders": "1"}, map[string]string{"contenders": "2"}
	var in []Sample
	for _, vals := range [][2]float64{{10, 100}, {12, 90}, {14, 110}} {
		in = append(in,
			Sample{Workload: "posix", Params: c1, Metric: "acquisitions_per_s", Round: 3, Value: vals[0]},
			Sample{Workload: "posix", Params: map[string]string{"contenders": "2"}, Metric: "acquisitions_per_s", Round: 3, Value: vals[1]})
	}
	out := foldWindows(in)
	if len(out) != 2 {
		t.Fatalf("%d samples, want 2: %+v", len(out), out)
	}
	if out[0].Value != 12 || !reflect.DeepEqual(out[0].Windows, []float64{10, 12, 14}) || !reflect.DeepEqual(out[0].Params, c1) {
		t.Errorf("first cell %+v, want mean 12 of 10 12 14", out[0])
	}
	if out[1].Value != 100 || !reflect.DeepEqual(out[1].Windows, []float64{100, 90, 110}) || !reflect.DeepEqual(out[1].Params, c2) {
		t.Errorf("second cell %+v, want mean 100 of 100 90 110", out[1])
	}
	// One window: the samples as they were, no windows kept.
	one := foldWindows(in[:2])
	if len(one) != 2 || one[0].Windows != nil || one[0].Value != 10 {
		t.Errorf("one window: %+v", one)
	}
}

// The parts of a round run on boots of their own fold into one result:
// each metric's windows are all the parts' windows (a part of one window
// gives its value), in the order they ran; the phases add up, and the
// result spans the parts.
func TestFoldBoots(t *testing.T) {
	t0 := time.Date(2026, 12, 6, 22, 0, 0, 0, time.UTC)
	c := map[string]string{"threads": "64"}
	parts := []*Result{
		{Started: t0, Finished: t0.Add(time.Minute), Phases: map[string]float64{PhaseWorkload: 60},
			Samples: []Sample{
				{Workload: "stat-storm", Params: c, Metric: "files_per_s", Round: 2, Value: 11, Windows: []float64{10, 12}},
				{Workload: "stat-storm", Params: c, Metric: "latency_p99", Round: 2, Value: 1500, Windows: []float64{1400, 1600}}}},
		{Started: t0.Add(2 * time.Minute), Finished: t0.Add(3 * time.Minute), Phases: map[string]float64{PhaseWorkload: 50},
			Samples: []Sample{
				{Workload: "stat-storm", Params: c, Metric: "files_per_s", Round: 2, Value: 14}}},
	}
	out := FoldBoots(parts)
	if len(out.Samples) != 2 {
		t.Fatalf("%d samples, want 2: %+v", len(out.Samples), out.Samples)
	}
	if s := out.Samples[0]; s.Value != 12 || !reflect.DeepEqual(s.Windows, []float64{10, 12, 14}) || s.Round != 2 || !reflect.DeepEqual(s.Params, c) {
		t.Errorf("files_per_s %+v, want mean 12 of 10 12 14", s)
	}
	if s := out.Samples[1]; s.Value != 1500 || len(s.Windows) != 2 {
		t.Errorf("latency_p99 %+v, want the first part's two windows", s)
	}
	if out.Phases[PhaseWorkload] != 110 || !out.Started.Equal(t0) || !out.Finished.Equal(t0.Add(3*time.Minute)) {
		t.Errorf("phases %v, %v to %v: want 110 s from the first part's start to the last one's end", out.Phases, out.Started, out.Finished)
	}
	if one := FoldBoots(parts[:1]); one != parts[0] {
		t.Error("one part was not kept as it is")
	}
}

// FUSE's file sizes and order are drawn by the round's number, or, with
// same_draws, the same in every round.
func TestSameDraws(t *testing.T) {
	s, err := Lookup("fuse-waitq")
	if err != nil {
		t.Fatal(err)
	}
	draws := func(profile string, n int) ([]int, []int) {
		cfg, err := s.Resolve(profile)
		if err != nil {
			t.Fatal(err)
		}
		r := &round{cfg: cfg, n: n}
		sizes, _, shuffled := r.bonnieDraws()
		if len(sizes) != cfg.Params.Files {
			t.Fatalf("%s: %d sizes for %d files", profile, len(sizes), cfg.Params.Files)
		}
		return sizes, shuffled
	}
	s1, o1 := draws("go-fuse", 1)
	s2, o2 := draws("go-fuse", 2)
	if reflect.DeepEqual(s1, s2) || reflect.DeepEqual(o1, o2) {
		t.Errorf("go-fuse: rounds 1 and 2 drew the same sizes or order")
	}
	for _, profile := range []string{"same-draws", DefaultProfile} {
		s1, o1 = draws(profile, 1)
		s2, o2 = draws(profile, 2)
		if !reflect.DeepEqual(s1, s2) || !reflect.DeepEqual(o1, o2) {
			t.Errorf("%s: rounds 1 and 2 drew different sizes or orders", profile)
		}
	}
}

// A round spread over boots runs its share of the windows on each.
func TestWindowsABoot(t *testing.T) {
	for _, c := range []struct {
		p    Params
		want int
	}{{Params{}, 1}, {Params{Windows: 3}, 3}, {Params{Windows: 4, Boots: 4, Reboot: true}, 1}, {Params{Windows: 4, Boots: 2, Reboot: true}, 2}} {
		if got := c.p.windowsABoot(); got != c.want {
			t.Errorf("windows %d, boots %d: %d windows a boot, want %d", c.p.Windows, c.p.Boots, got, c.want)
		}
	}
}
