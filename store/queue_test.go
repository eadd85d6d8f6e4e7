package store

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestRebind(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"SELECT 1", "SELECT 1"},
		{"UPDATE t SET a = ?, b = ? WHERE c = ?", "UPDATE t SET a = $1, b = $2 WHERE c = $3"},
		{"SELECT 'why?' || ? FROM t WHERE x = 'it''s ?' AND y = ?", "SELECT 'why?' || $1 FROM t WHERE x = 'it''s ?' AND y = $2"},
	} {
		if got := pgDialect.rebind(tc.in); got != tc.want {
			t.Errorf("rebind(%q) = %q, want %q", tc.in, got, tc.want)
		}
		if got := sqliteDialect.rebind(tc.in); got != tc.in {
			t.Errorf("SQLite's rebind(%q) = %q, want it unchanged", tc.in, got)
		}
	}
}

func TestTranslate(t *testing.T) {
	in := "CREATE TABLE x (id INTEGER PRIMARY KEY, n INTEGER NOT NULL, raw BLOB NOT NULL, blobby TEXT)"
	want := "CREATE TABLE x (id BIGSERIAL PRIMARY KEY, n INTEGER NOT NULL, raw BYTEA NOT NULL, blobby TEXT)"
	if got := translate(in); got != want {
		t.Errorf("translate = %q, want %q", got, want)
	}
}

// A lease that runs out gives the job to another worker and counts a
// crash; the worker that lost it can neither renew it nor end it; a job
// lost twice is parked, as a job that killed one daemon twice is.
func TestLeases(t *testing.T) {
	eachEngine(t, func(t *testing.T, e engine) {
		s, _ := e.open(t)
		ctx := context.Background()
		for _, w := range []string{"w1", "w2"} {
			if err := s.RegisterWorker(ctx, WorkerInfo{Name: w, Host: "h-" + w}); err != nil {
				t.Fatal(err)
			}
		}
		id, _, _ := s.AddJob(ctx, Job{Dedupe: "series:a:v1", Request: []byte("{}")})
		t0 := time.Now()
		at := func(d time.Duration) Claim {
			return Claim{Worker: "w1", Lease: time.Minute, At: t0.Add(d)}
		}
		j, err := s.ClaimJob(ctx, at(0))
		if err != nil || j.ID != id || j.Owner != "w1" || !j.LeaseUntil.Equal(t0.Add(time.Minute).Round(0).UTC()) {
			t.Fatalf("claim = %+v, %v", j, err)
		}
		c2 := at(30 * time.Second)
		c2.Worker = "w2"
		if _, err := s.ClaimJob(ctx, c2); !errors.Is(err, ErrNoJob) {
			t.Fatalf("w2 claimed a job w1 holds: %v", err)
		}
		// w1 renews at 50 s: the lease now runs to 110 s.
		if err := s.Heartbeat(ctx, "w1", id, time.Minute, t0.Add(50*time.Second)); err != nil {
			t.Fatal(err)
		}
		if re, _, _ := s.ExpireJobs(ctx, t0.Add(90*time.Second), 2); len(re) != 0 {
			t.Fatalf("a renewed lease expired: %v", re)
		}
		// w1 goes silent; at 2 minutes its lease has run out.
		re, parked, err := s.ExpireJobs(ctx, t0.Add(2*time.Minute), 2)
		if err != nil || len(re) != 1 || len(parked) != 0 || re[0].Crashes != 1 || re[0].Owner != "" {
			t.Fatalf("ExpireJobs = %+v, %+v, %v", re, parked, err)
		}
		if again, _, _ := s.ExpireJobs(ctx, t0.Add(3*time.Minute), 2); len(again) != 0 {
			t.Errorf("a job was expired twice")
		}
		if err := s.Heartbeat(ctx, "w1", id, time.Minute, t0.Add(2*time.Minute)); !errors.Is(err, ErrLeaseLost) {
			t.Errorf("w1 renewed a lost lease: %v", err)
		}
		c2.At = t0.Add(2 * time.Minute)
		j2, err := s.ClaimJob(ctx, c2)
		if err != nil || j2.ID != id || j2.Owner != "w2" || j2.Attempts != 2 || j2.Crashes != 1 {
			t.Fatalf("w2's claim after the lease ran out = %+v, %v", j2, err)
		}
		// w1 comes back with its result: refused, the job is w2's.
		j.State, j.Stage = JobDone, "done"
		if err := s.FinishJob(ctx, j); !errors.Is(err, ErrLeaseLost) {
			t.Errorf("w1 ended a job it lost: %v", err)
		}
		// w2 dies too: the second loss parks the job, with the worker named.
		_, parked, err = s.ExpireJobs(ctx, t0.Add(4*time.Minute), 2)
		if err != nil || len(parked) != 1 || parked[0].State != JobParked || parked[0].Owner != "w2" ||
			!strings.Contains(parked[0].Error, "died while running it 2 times") {
			t.Fatalf("second loss: parked %+v, %v", parked, err)
		}
		c2.At = t0.Add(5 * time.Minute)
		if _, err := s.ClaimJob(ctx, c2); !errors.Is(err, ErrNoJob) {
			t.Errorf("a parked job was claimed: %v", err)
		}
		j2.State = JobDone
		if err := s.FinishJob(ctx, j2); !errors.Is(err, ErrLeaseLost) {
			t.Errorf("w2 ended a parked job: %v", err)
		}
		ws, err := s.Workers(ctx, t0.Add(-time.Hour))
		if err != nil || len(ws) != 2 || ws[0].Name != "w1" || ws[0].JobID != id || ws[1].JobID != 0 {
			t.Errorf("Workers = %+v, %v", ws, err)
		}
	})
}

// A worker restarting under its name finds the job it held: a crash,
// counted at once, without waiting for the lease.
func TestRecoverJobsIsPerWorker(t *testing.T) {
	eachEngine(t, func(t *testing.T, e engine) {
		s, _ := e.open(t)
		ctx := context.Background()
		for i := 0; i < 2; i++ {
			s.AddJob(ctx, Job{Dedupe: fmt.Sprint("series:", i), Request: []byte("{}")})
		}
		for _, w := range []string{"a", "b"} {
			if _, err := s.ClaimJob(ctx, Claim{Worker: w, Lease: time.Hour, At: time.Now()}); err != nil {
				t.Fatal(err)
			}
		}
		re, parked, err := s.RecoverJobs(ctx, "a", 2)
		if err != nil || len(re) != 1 || len(parked) != 0 {
			t.Fatalf("RecoverJobs(a) = %v, %v, %v", re, parked, err)
		}
		jobs, _ := s.Jobs(ctx)
		states := map[string]JobState{}
		for _, j := range jobs {
			states[j.Dedupe] = j.State
		}
		if states["series:0"] != JobQueued || states["series:1"] != JobRunning {
			t.Errorf("after a's restart: %v; b's job must stay b's", states)
		}
	})
}

// A claim takes only a job the worker can run.
func TestClaimTakesOnlyWhatFits(t *testing.T) {
	eachEngine(t, func(t *testing.T, e engine) {
		s, _ := e.open(t)
		ctx := context.Background()
		add := func(name string, n Needs) {
			if _, _, err := s.AddJob(ctx, Job{Dedupe: name, Title: name, Needs: n, Request: []byte("{}")}); err != nil {
				t.Fatal(err)
			}
		}
		add("kvm", Needs{KVM: true, CPUs: 4, MemMiB: 2048, Suites: []string{"cache-contention"}})
		add("big", Needs{CPUs: 32, MemMiB: 2048})
		add("fuse", Needs{CPUs: 4, MemMiB: 2048, Suites: []string{"fuse-waitq", "cache-contention"}})
		add("any", Needs{})
		add("check", Needs{})
		s.r.ExecContext(ctx, `UPDATE jobs SET kind = 'check' WHERE dedupe = 'check'`)
		tcg := Caps{Accel: "tcg", CPUs: 8, MemMiB: 8192, Suites: []string{"cache-contention", "readahead"}}
		kvm := Caps{Accel: "kvm", CPUs: 64, MemMiB: 65536, Suites: []string{"cache-contention", "fuse-waitq", "readahead"}}
		for _, tc := range []struct {
			worker string
			caps   Caps
			kind   JobKind
			want   []string
		}{
			{"tcg", tcg, KindTest, []string{"any"}},
			{"kvm", kvm, KindTest, []string{"big", "fuse", "kvm"}},
			{"coordinator", Caps{}, KindCheck, []string{"check"}},
		} {
			var got []string
			for {
				j, err := s.ClaimJob(ctx, Claim{Worker: tc.worker, Lease: time.Hour, At: time.Now(), Caps: tc.caps, Kind: tc.kind})
				if errors.Is(err, ErrNoJob) {
					break
				}
				if err != nil {
					t.Fatal(err)
				}
				got = append(got, j.Dedupe)
			}
			sort.Strings(got)
			if strings.Join(got, " ") != strings.Join(tc.want, " ") {
				t.Errorf("%s claimed %v, want %v", tc.worker, got, tc.want)
			}
		}
		if j, _ := s.Job(ctx, 1); !j.Needs.KVM || j.Needs.CPUs != 4 || j.Needs.MemMiB != 2048 {
			t.Errorf("job 1's needs read back as %+v", j.Needs)
		}
		if j, _ := s.Job(ctx, 3); fmt.Sprint(j.Needs.Suites) != "[cache-contention fuse-waitq]" {
			t.Errorf("job 3's needs read back as %+v", j.Needs)
		}
	})
}

// One busy source cannot starve the others, nor one busy sender the
// others of its source: claims go round the sources with the fewest jobs
// running, the one served longest ago first.
func TestClaimIsFair(t *testing.T) {
	eachEngine(t, func(t *testing.T, e engine) {
		s, _ := e.open(t)
		ctx := context.Background()
		add := func(source, sender string, n int) {
			for i := 0; i < n; i++ {
				if _, _, err := s.AddJob(ctx, Job{Dedupe: fmt.Sprintf("%s:%s:%d", source, sender, i), Source: source,
					Sender: sender, Request: []byte("{}")}); err != nil {
					t.Fatal(err)
				}
			}
		}
		add("lkml", "busy@x", 20) // queued first: a FIFO would serve all of these first
		add("lkml", "quiet@x", 2)
		add("fsdevel", "dev@y", 3)
		add("fuse", "dev@z", 1)
		t0 := time.Now()
		var order []string
		var running []*Job
		for i := 0; i < 10; i++ {
			j, err := s.ClaimJob(ctx, Claim{Worker: fmt.Sprint("w", i%3), Lease: time.Hour, At: t0.Add(time.Duration(i) * time.Second)})
			if err != nil {
				t.Fatal(err)
			}
			order = append(order, j.Source+"/"+j.Sender)
			running = append(running, j)
			// Three workers: each job ends when the fourth is claimed.
			if len(running) == 3 {
				r := running[0]
				running = running[1:]
				r.State = JobDone
				if err := s.FinishJob(ctx, r); err != nil {
					t.Fatal(err)
				}
			}
		}
		want := []string{
			"lkml/busy@x", "fsdevel/dev@y", "fuse/dev@z", // one per source
			"lkml/quiet@x",                 // lkml's turn again; its quiet sender first
			"fsdevel/dev@y", "lkml/busy@x", // fuse has nothing left
			"fsdevel/dev@y", "lkml/quiet@x",
			"lkml/busy@x", "lkml/busy@x", // the others are drained
		}
		if strings.Join(order, " ") != strings.Join(want, " ") {
			t.Errorf("claims in order:\n %v\nwant\n %v", order, want)
		}
	})
}

// Workers claiming at once never get the same job, and every job is
// claimed.
func TestConcurrentClaimsAreExclusive(t *testing.T) {
	eachEngine(t, func(t *testing.T, e engine) {
		s, _ := e.open(t)
		ctx := context.Background()
		const jobs, workers = 200, 8
		for i := 0; i < jobs; i++ {
			if _, _, err := s.AddJob(ctx, Job{Dedupe: fmt.Sprint("j", i), Source: fmt.Sprint("src", i%5),
				Sender: fmt.Sprint("s", i%7), Request: []byte("{}")}); err != nil {
				t.Fatal(err)
			}
		}
		var mu sync.Mutex
		seen := map[int64]string{}
		var wg sync.WaitGroup
		errs := make(chan error, workers)
		for w := 0; w < workers; w++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				name := fmt.Sprint("w", w)
				for {
					j, err := s.ClaimJob(ctx, Claim{Worker: name, Lease: time.Hour, At: time.Now()})
					if errors.Is(err, ErrNoJob) {
						return
					}
					if err != nil {
						errs <- err
						return
					}
					mu.Lock()
					if prev, dup := seen[j.ID]; dup {
						errs <- fmt.Errorf("job %d claimed by %s and %s", j.ID, prev, name)
					}
					seen[j.ID] = name
					mu.Unlock()
					j.State = JobDone
					if err := s.FinishJob(ctx, j); err != nil {
						errs <- err
						return
					}
				}
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Error(err)
		}
		if len(seen) != jobs {
			t.Errorf("%d jobs claimed, want %d", len(seen), jobs)
		}
		if c, _ := s.JobCounts(ctx); c[JobDone] != jobs {
			t.Errorf("JobCounts = %v", c)
		}
	})
}

// A run's files travel with the job's end: stored together, rolled back
// together, read back, forgotten once written out.
func TestRunFiles(t *testing.T) {
	eachEngine(t, func(t *testing.T, e engine) {
		s, _ := e.open(t)
		ctx := context.Background()
		id, _, _ := s.AddJob(ctx, Job{Dedupe: "a", Request: []byte("{}")})
		j, err := s.ClaimJob(ctx, claim(time.Now(), 0))
		if err != nil {
			t.Fatal(err)
		}
		files := []RunFile{{"run.json", []byte(`{"a":1}`)}, {"logs/build.log", []byte{0, 1, 2, 255}}}
		// A run over its size is refused, and the job's end with it.
		j.State = JobDone
		big := []RunFile{{"a", make([]byte, MaxRunFile+1)}}
		if err := s.EndJob(ctx, j, big); err == nil {
			t.Fatal("a run file over MaxRunFile was kept")
		}
		if p, _ := s.PendingRuns(ctx, 10); len(p) != 0 {
			t.Fatalf("a refused run is pending: %v", p)
		}
		if got, _ := s.Job(ctx, id); got.State != JobRunning {
			t.Fatalf("the job ended without its run: %s", got.State)
		}
		if err := s.EndJob(ctx, j, files); err != nil {
			t.Fatal(err)
		}
		// Nothing is added to a run once its job has ended.
		if err := s.EndJob(ctx, j, files[:1]); !errors.Is(err, ErrLeaseLost) {
			t.Fatalf("a second end of the job: %v, want ErrLeaseLost", err)
		}
		if p, _ := s.PendingRuns(ctx, 10); fmt.Sprint(p) != fmt.Sprint([]int64{id}) {
			t.Fatalf("PendingRuns = %v", p)
		}
		got, err := s.RunFiles(ctx, id)
		if err != nil || len(got) != 2 || got[0].Name != "logs/build.log" || string(got[0].Data) != "\x00\x01\x02\xff" ||
			string(got[1].Data) != `{"a":1}` {
			t.Fatalf("RunFiles = %q, %v", got, err)
		}
		if err := s.DeleteRunFiles(ctx, id); err != nil {
			t.Fatal(err)
		}
		if p, _ := s.PendingRuns(ctx, 10); len(p) != 0 {
			t.Errorf("PendingRuns after delete = %v", p)
		}
	})
}

// Times are stored fixed-width, so that a whole second and a fraction
// compare as times (RFC3339Nano's "05Z" sorts after "05.5Z").
func TestStoredTimesCompareAsTimes(t *testing.T) {
	eachEngine(t, func(t *testing.T, e engine) {
		s, _ := e.open(t)
		ctx := context.Background()
		due := time.Date(2026, 12, 1, 10, 0, 5, 0, time.UTC)
		s.AddJob(ctx, Job{Dedupe: "a", Request: []byte("{}"), NotBefore: due})
		if _, err := s.ClaimJob(ctx, claim(due.Add(-500*time.Millisecond), 0)); !errors.Is(err, ErrNoJob) {
			t.Errorf("a job due at :05 was claimed at :04.5: %v", err)
		}
		if _, err := s.ClaimJob(ctx, claim(due.Add(500*time.Millisecond), 0)); err != nil {
			t.Errorf("a job due at :05 was not claimed at :05.5: %v", err)
		}
	})
}

// A database from before the fleet keeps its jobs: an incomplete-series
// wait becomes the coordinator's check, and a job left running (no owner,
// no lease) is expired at the first look.
func TestUpgradeFromBeforeTheFleet(t *testing.T) {
	eachEngine(t, func(t *testing.T, e engine) {
		name := e.fresh(t)
		old, err := openSteps(name, migrations[:4])
		if err != nil {
			t.Fatal(err)
		}
		ctx := context.Background()
		for _, j := range []struct{ dedupe, trigger, state string }{
			{"series:a", "list", "running"}, {"incomplete:b", "incomplete", "queued"},
		} {
			if _, err := old.r.ExecContext(ctx, `INSERT INTO jobs (dedupe, trigger, title, request, state, not_before, created, updated)
				VALUES (?, ?, ?, ?, ?, '', '', '')`, j.dedupe, j.trigger, j.dedupe, []byte("{}"), j.state); err != nil {
				t.Fatal(err)
			}
		}
		old.Close()
		s := reopen(t, name)
		if v, _ := s.Version(ctx); v != len(migrations) {
			t.Fatalf("version %d after the upgrade, want %d", v, len(migrations))
		}
		re, _, err := s.ExpireJobs(ctx, time.Now(), 2)
		if err != nil || len(re) != 1 || re[0].Dedupe != "series:a" || re[0].Kind != KindTest {
			t.Fatalf("ExpireJobs after the upgrade = %+v, %v", re, err)
		}
		c := claim(time.Now(), 0)
		c.Kind = KindCheck
		if j, err := s.ClaimJob(ctx, c); err != nil || j.Dedupe != "incomplete:b" {
			t.Errorf("the coordinator's claim = %+v, %v; want the incomplete-series check", j, err)
		}
	})
}

// BenchmarkClaimJob claims and ends jobs from a queue kept 10,000 deep:
// on PostgreSQL with 50 claimers at once, as a fleet's workers would; on
// SQLite with one, as a single host has. The fair claim's cost at depth.
//
//	go test -run '^$' -bench BenchmarkClaimJob ./store/
func BenchmarkClaimJob(b *testing.B) {
	for _, e := range engines {
		b.Run(e.name, func(b *testing.B) {
			s, _ := e.open(b)
			ctx := context.Background()
			const depth = 10000
			sources := []string{"lkml", "fsdevel", "mm", "fuse", "squashfs"}
			add := func(lo, hi int) {
				for i := lo; i < hi; i += 500 {
					err := s.Update(ctx, func(tx *Tx) error {
						for k := i; k < min(i+500, hi); k++ {
							if _, _, err := tx.AddJob(ctx, Job{Dedupe: fmt.Sprint("j", k), Source: sources[k%5],
								Sender: fmt.Sprintf("dev%d", k%37), Request: []byte(`{"title":"x"}`),
								Needs: Needs{CPUs: 2, MemMiB: 2048, Suites: []string{"cache-contention"}}}); err != nil {
								return err
							}
						}
						return nil
					})
					if err != nil {
						b.Fatal(err)
					}
				}
			}
			add(0, depth+b.N)
			caps := Caps{Accel: "kvm", CPUs: 32, MemMiB: 65536, Suites: []string{"cache-contention", "fuse-waitq", "locks", "readahead"}}
			var n sync.Mutex
			w := 0
			if e.name == "sqlite" {
				b.SetParallelism(1)
			} else {
				b.SetParallelism(25) // 50 claimers on 2 cores
			}
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				n.Lock()
				w++
				name := fmt.Sprint("w", w)
				n.Unlock()
				for pb.Next() {
					j, err := s.ClaimJob(ctx, Claim{Worker: name, Lease: time.Minute, At: time.Now(), Caps: caps})
					if err != nil {
						b.Error(err)
						return
					}
					j.State = JobDone
					if err := s.FinishJob(ctx, j); err != nil {
						b.Error(err)
						return
					}
				}
			})
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "claims/s")
		})
	}
}
