package service

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/patchbot/patchbot/images"
	"github.com/patchbot/patchbot/mailbox/sender"
	"github.com/patchbot/patchbot/reports"
	"github.com/patchbot/patchbot/store"
	"github.com/patchbot/patchbot/store/pgtest"
	"github.com/patchbot/patchbot/suites"
	"github.com/patchbot/patchbot/suites/invm"
	"github.com/patchbot/patchbot/web"
)

// The fleet's simulation: many queued jobs, many simulated workers (the
// real Worker, with a builder that builds nothing and a tester that only
// waits: a job's length is its runs times -fleet.unit), the real
// coordinator in a process of its own (collecting every run, sending every
// reply through an SMTP stand-in that accepts at once), all on a real
// PostgreSQL. It reports claims per second, queue latency, fairness over
// five sources of very different sizes, and the coordinator's CPU and
// memory.
//
//	go test -run '^$' -bench BenchmarkFleetSimulation -benchtime 1x ./service/
var (
	simJobs    = flag.Int("fleet.jobs", 10000, "jobs queued in the fleet's simulation")
	simWorkers = flag.Int("fleet.workers", 50, "simulated workers")
	simUnit    = flag.Duration("fleet.unit", 50*time.Millisecond, "a simulated job lasts its runs (1..39, uniform) times this")
)

// simSources are the five lists' shares of the jobs: one busy list, four
// quieter ones. Each list's jobs come from ten senders, one of whom sends
// half of them.
var simSources = []struct {
	name  string
	share float64
}{{"lkml", 0.50}, {"fsdevel", 0.20}, {"mm", 0.15}, {"fuse", 0.10}, {"squashfs", 0.05}}

// simTester waits as long as the job is long, and measures nothing.
type simTester struct{ unit time.Duration }

func (s simTester) Test(ctx context.Context, sp invm.Spec) (*invm.Outcome, error) {
	select {
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-time.After(time.Duration(sp.Runs) * s.unit):
	}
	mk := func(label string, v float64) *suites.Result {
		return &suites.Result{Suite: sp.Suite, Profile: sp.Profile, Kernel: label, Accel: "kvm", CPUs: 2, MemMiB: 1024,
			Samples: []suites.Sample{{Suite: sp.Suite, Workload: "read-storm", Metric: "wakeups_per_release", Unit: "count", Round: 1, Value: v},
				{Suite: sp.Suite, Workload: "read-storm", Metric: "wakeups_per_release", Unit: "count", Round: 2, Value: v * 1.02}}}
	}
	return &invm.Outcome{Base: mk("base", 9.6), Patched: mk("patched", 1.1), Backend: "sim", Accel: "kvm", CPUs: 2, MemMiB: 1024}, nil
}

// simBuilder builds nothing, at once.
type simBuilder struct{}

func (simBuilder) Choose(ctx context.Context, w images.Want) (*images.Choice, error) {
	return &images.Choice{Tree: images.DefaultTree, How: images.ByDefault}, nil
}

func (simBuilder) Base(ctx context.Context, base images.Base) (*images.Build, error) {
	return &images.Build{BzImage: "/nonexistent/base", Commit: strings.Repeat("1", 40), ConfigHash: "cafe", Compiler: "gcc 12.2.0"}, nil
}

func (simBuilder) Patched(ctx context.Context, base *images.Build, patches [][]byte) (*images.Build, error) {
	return &images.Build{BzImage: "/nonexistent/patched", Commit: base.Commit, Head: strings.Repeat("2", 40),
		ConfigHash: base.ConfigHash, Compiler: base.Compiler, Series: len(patches)}, nil
}

// simSender accepts every mail at once, as a server would after the
// final ".": the simulation measures the coordinator, not an SMTP server.
type simSender struct{}

func (simSender) Send(ctx context.Context, e *sender.Email) error {
	if e.BeforeEnd != nil {
		return e.BeforeEnd()
	}
	return nil
}

// runSimCoordinator is the coordinator's process in the simulation: it
// logs warnings and errors only (ten thousand "reply sent" lines would be
// the logger's benchmark).
func runSimCoordinator(ctx context.Context, cfg Config, st *store.Store) error {
	log := slog.New(slog.NewJSONHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	ob, err := NewOutbox(cfg, st, log)
	if err != nil {
		return err
	}
	ob.Sender = simSender{}
	d := &Daemon{Config: cfg, Store: st, Outbox: ob, Log: log, Metrics: NewMetrics(), FlushEvery: time.Second}
	dash, err := web.New(web.Options{Store: st, StateDir: cfg.StateDir, Lease: cfg.Fleet.Lease, Progress: d.Progress, Log: log})
	if err != nil {
		return err
	}
	go d.Metrics.Serve(ctx, cfg.HTTP, log, dash)
	return d.Run(ctx)
}

func freeLoopback(b testing.TB) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

func discardLog() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

func BenchmarkFleetSimulation(b *testing.B) {
	for b.Loop() {
		simulate(b, *simJobs, *simWorkers, *simUnit)
	}
}

func simulate(b *testing.B, jobs, workers int, unit time.Duration) {
	ctx := context.Background()
	pg := pgtest.Start(b)
	dsn, err := pg.NewDB()
	if err != nil {
		b.Fatal(err)
	}
	dir := b.TempDir()
	cfg := DefaultConfig()
	cfg.StateDir, cfg.Database = filepath.Join(dir, "coordinator"), dsn
	cfg.Fleet = FleetConfig{Lease: 30 * time.Second, Poll: time.Second}
	cfg.HTTP = freeLoopback(b)
	cfgPath := filepath.Join(dir, "patchbot.yaml")
	if err := os.WriteFile(cfgPath, []byte(fmt.Sprintf("state_dir: %s\ndatabase: %s\nfleet: {local_worker: false, lease: 30s, poll: 1s}\nhttp: %s\n",
		cfg.StateDir, dsn, cfg.HTTP)), 0o600); err != nil {
		b.Fatal(err)
	}
	st, err := OpenStore(cfg)
	if err != nil {
		b.Fatal(err)
	}
	defer st.Close()

	// The queue: jobs of the five sources, interleaved in arrival order
	// by a seeded shuffle, each with the seed patch and its own length.
	seed := seedPatch(b)
	rng := rand.New(rand.NewPCG(1, 2))
	var plan []string
	for _, s := range simSources {
		for i := 0; i < int(s.share*float64(jobs)+0.5); i++ {
			plan = append(plan, s.name)
		}
	}
	rng.Shuffle(len(plan), func(i, j int) { plan[i], plan[j] = plan[j], plan[i] })
	enqStart := time.Now()
	for lo := 0; lo < len(plan); lo += 500 {
		err := st.Update(ctx, func(tx *store.Tx) error {
			for i := lo; i < min(lo+500, len(plan)); i++ {
				src := plan[i]
				snd := fmt.Sprintf("dev%d@%s.example.org", rng.IntN(10), src)
				if rng.IntN(2) == 0 {
					snd = "busy@" + src + ".example.org" // one sender sends half of a list's jobs
				}
				req := &Request{Title: fmt.Sprintf("[PATCH] sim %d", i), Patches: [][]byte{seed}, Files: []string{"fs/squashfs/cache.c"},
					Suites: []string{"cache-contention"}, Profile: "quick", Runs: 1 + rng.IntN(39),
					Thread: reports.Thread{Subject: fmt.Sprintf("[PATCH] sim %d", i), MessageID: fmt.Sprintf("sim-%d@x", i),
						Author: snd, Lists: []string{src + "@vger.example.org"}}}
				data, _ := json.Marshal(req)
				if _, _, err := tx.AddJob(ctx, store.Job{Dedupe: fmt.Sprint("sim:", i), Trigger: "list", Title: req.Title, Request: data,
					Source: src, Sender: snd, Needs: needsOf(cfg, []string{"cache-contention"})}); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			b.Fatal(err)
		}
	}
	b.Logf("queued %d jobs in %s", len(plan), time.Since(enqStart).Round(time.Millisecond))

	coord := exec.Command(os.Args[0], "-test.run=^$")
	coord.Env = append(os.Environ(), fleetRoleEnv+"=sim-coordinator", fleetConfigEnv+"="+cfgPath)
	logf, _ := os.Create(filepath.Join(dir, "coordinator.log"))
	coord.Stdout, coord.Stderr = logf, logf
	if err := coord.Start(); err != nil {
		b.Fatal(err)
	}

	// The workers: real Workers in this process, each with what a KVM host
	// of 32 CPUs and 64 GiB says it can run.
	wctx, stopWorkers := context.WithCancel(ctx)
	var wg sync.WaitGroup
	t0 := time.Now()
	caps := store.Caps{Accel: "kvm", CPUs: 32, MemMiB: 65536, Suites: []string{"cache-contention", "fuse-waitq", "locks", "readahead"}}
	for i := 0; i < workers; i++ {
		w := &Worker{Config: cfg, Store: st, Name: fmt.Sprintf("sim-%02d", i), Host: fmt.Sprintf("host-%02d", i), Caps: &caps,
			Pipeline: &Pipeline{Builder: simBuilder{}, Tester: simTester{unit: unit}, Reply: cfg.Reply, VM: cfg.VM},
			Log:      discardLog(), WorkDir: filepath.Join(dir, fmt.Sprint("w", i))}
		wg.Add(1)
		go func() {
			defer wg.Done()
			w.Run(wctx)
		}()
	}
	// A person watching the dashboard, every two seconds.
	dashStop := make(chan struct{})
	go func() {
		for {
			select {
			case <-dashStop:
				return
			case <-time.After(2 * time.Second):
			}
			if resp, err := http.Get("http://" + cfg.HTTP + "/api/home"); err == nil {
				resp.Body.Close()
			}
		}
	}()
	deadline := time.Now().Add(2 * time.Hour)
	for {
		c, err := st.JobCounts(ctx)
		if err != nil {
			b.Fatal(err)
		}
		o, _ := st.OutboxCounts(ctx)
		p, _ := st.PendingRuns(ctx, 1)
		if c[store.JobDone] == len(plan) && o[store.Sent] == len(plan) && len(p) == 0 {
			break
		}
		if time.Now().After(deadline) {
			b.Fatalf("not done after 2 hours: jobs %v, outbox %v", c, o)
		}
		time.Sleep(500 * time.Millisecond)
	}
	wall := time.Since(t0)
	close(dashStop)
	stopWorkers()
	wg.Wait()
	coord.Process.Signal(syscall.SIGTERM)
	coord.Wait()
	logf.Close()
	ru := coord.ProcessState.SysUsage().(*syscall.Rusage)
	cpu := time.Duration(ru.Utime.Nano() + ru.Stime.Nano())

	all, err := st.Jobs(ctx)
	if err != nil {
		b.Fatal(err)
	}
	r := analyse(all, t0)
	ents, _ := os.ReadDir(filepath.Join(cfg.StateDir, "runs"))
	if len(ents) != len(plan) {
		b.Errorf("%d runs collected, want %d", len(ents), len(plan))
	}
	b.ReportMetric(r.claimsPerSec, "claims/s")
	b.ReportMetric(r.p50.Seconds(), "p50-wait-s")
	b.ReportMetric(r.p99.Seconds(), "p99-wait-s")
	b.ReportMetric(cpu.Seconds(), "coord-cpu-s")
	b.ReportMetric(float64(ru.Maxrss)/1024, "coord-maxrss-MiB")
	b.Logf("%d jobs, %d workers, job length %s..%s (mean %s): all done and replied in %s; claims %.1f/s, busy workers %.1f of %d",
		len(plan), workers, unit, 39*unit, 20*unit, wall.Round(time.Second), r.claimsPerSec, r.busy, workers)
	b.Logf("queue wait from the start: p50 %s, p90 %s, p99 %s, max %s", r.p50.Round(time.Millisecond),
		r.p90.Round(time.Millisecond), r.p99.Round(time.Millisecond), r.max.Round(time.Millisecond))
	b.Logf("coordinator: %.1f s CPU (%.2f ms a job), max RSS %d MiB; run directories collected: %d",
		cpu.Seconds(), float64(cpu.Microseconds())/1000/float64(len(plan)), ru.Maxrss/1024, len(ents))
	b.Logf("fairness, while every source had jobs queued (the first %s, %d claims):", r.window.Round(time.Second), r.windowClaims)
	for _, s := range simSources {
		f := r.sources[s.name]
		b.Logf("  %-9s %4.0f%% of the jobs, %4.1f%% of those claims; wait p50 %6.1fs, p99 %6.1fs; last claimed at %6.1fs",
			s.name, s.share*100, 100*float64(f.inWindow)/float64(max(r.windowClaims, 1)), f.p50.Seconds(), f.p99.Seconds(), f.last.Seconds())
	}
}

// simResult is what the simulation measured.
type simResult struct {
	claimsPerSec            float64
	busy                    float64 // workers busy on average
	p50, p90, p99, max      time.Duration
	window                  time.Duration // until the first source ran out of queued jobs
	windowClaims            int
	sources                 map[string]*sourceResult
	firstClaim, lastClaimAt time.Duration
}

type sourceResult struct {
	waits    []time.Duration
	inWindow int
	p50, p99 time.Duration
	last     time.Duration
}

func analyse(jobs []*store.Job, t0 time.Time) simResult {
	r := simResult{sources: map[string]*sourceResult{}}
	var waits []time.Duration
	var busy time.Duration
	var first, last time.Duration = 1 << 62, 0
	for _, j := range jobs {
		w := j.Started.Sub(t0)
		waits = append(waits, w)
		s := r.sources[j.Source]
		if s == nil {
			s = &sourceResult{}
			r.sources[j.Source] = s
		}
		s.waits = append(s.waits, w)
		s.last = max(s.last, w)
		first, last = min(first, w), max(last, w)
		busy += j.Updated.Sub(j.Started)
	}
	pct := func(ws []time.Duration, p float64) time.Duration {
		sort.Slice(ws, func(a, b int) bool { return ws[a] < ws[b] })
		return ws[min(len(ws)-1, int(p*float64(len(ws))))]
	}
	r.p50, r.p90, r.p99, r.max = pct(waits, 0.5), pct(waits, 0.9), pct(waits, 0.99), pct(waits, 1)
	r.claimsPerSec = float64(len(jobs)) / (last - first).Seconds()
	r.busy = busy.Seconds() / (last - first).Seconds()
	r.window = 1 << 62
	for _, s := range r.sources {
		s.p50, s.p99 = pct(s.waits, 0.5), pct(s.waits, 0.99)
		r.window = min(r.window, s.last)
	}
	for _, s := range r.sources {
		for _, w := range s.waits {
			if w <= r.window {
				s.inWindow++
				r.windowClaims++
			}
		}
	}
	return r
}
