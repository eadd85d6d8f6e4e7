package fleet

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"syscall"
	"testing"
	"time"

	"github.com/patchbot/patchbot/intake"
	"github.com/patchbot/patchbot/internal/testenv"
	"github.com/patchbot/patchbot/mailbox/sender/smtptest"
	"github.com/patchbot/patchbot/reports"
	"github.com/patchbot/patchbot/store"
	"github.com/patchbot/patchbot/store/pgtest"
)

// The fleet's simulation: many queued jobs, many workers, each a
// `patchbot worker` process of its own with its own PostgreSQL login role
// (patchbot_worker's row-level security and all) and a dry run whose job
// lasts its runs (1..39, uniform) times two rounds of -fleet.unit/2, the
// real coordinator (`patchbot watch`) collecting every run and sending
// every reply over SMTP to a server that accepts at once, all on a real
// PostgreSQL. It reports claims per second, queue latency, fairness over
// five sources of very different sizes, and the processes' CPU and
// memory.
//
//	go test -run '^$' -bench BenchmarkFleetSimulation -benchtime 1x -timeout 2h ./e2e/fleet/
var (
	simJobs    = flag.Int("fleet.jobs", 10000, "jobs queued in the fleet's simulation")
	simWorkers = flag.Int("fleet.workers", 50, "worker processes")
	simUnit    = flag.Duration("fleet.unit", 50*time.Millisecond, "a simulated job lasts its runs (1..39, uniform) times this")
)

// simSources are the five lists' shares of the jobs: one busy list, four
// quieter ones. Each list's jobs come from ten senders, one of whom sends
// half of them.
var simSources = []struct {
	name  string
	share float64
}{{"lkml", 0.50}, {"fsdevel", 0.20}, {"mm", 0.15}, {"fuse", 0.10}, {"squashfs", 0.05}}

func BenchmarkFleetSimulation(b *testing.B) {
	for b.Loop() {
		simulate(b, *simJobs, *simWorkers, *simUnit)
	}
}

func simulate(b *testing.B, jobs, workers int, unit time.Duration) {
	testenv.Root(b) // the cluster's postgres user
	ctx := context.Background()
	bin, _ := binaries(b)
	pg := pgtest.Start(b)
	dir := b.TempDir()
	psql := func(args ...string) {
		out, err := exec.Command("psql", append([]string{pg.DSN("postgres"), "-v", "ON_ERROR_STOP=1", "-q"}, args...)...).CombinedOutput()
		if err != nil {
			b.Fatalf("psql %v: %v\n%s", args, err, out)
		}
	}
	psql("-v", "db="+dbName, "-v", "coordinator=coordinator", "-f", filepath.Join(root, "deploy/postgresql/setup.sql"))
	for i := 0; i < workers; i++ {
		psql("-v", fmt.Sprintf("worker=sim-%02d", i), "-f", filepath.Join(root, "deploy/postgresql/worker.sql"))
	}
	mail := smtptest.StartFake(b, smtptest.FakeOptions{})
	httpAddr := freeAddr(b)
	cfg := filepath.Join(dir, "coordinator.yaml")
	os.WriteFile(cfg, []byte(fmt.Sprintf(`state_dir: %s
database: postgres://coordinator@127.0.0.1:%d/%s?sslmode=disable
fleet: {local_worker: false, lease: 30s, poll: 1s}
smtp: {enabled: true, addr: %q, from: bot@patchbot.test}
reply: {from: "patchbot <bot@patchbot.test>"}
http: %s
`, filepath.Join(dir, "coordinator"), pg.Port, dbName, mail.Addr, httpAddr)), 0o600)
	coord := &proc{name: "coordinator", argv: []string{bin, "watch", "--config", cfg}, dir: dir, env: os.Environ()}
	coord.start(b)
	var st *store.Store
	for start := time.Now(); st == nil; time.Sleep(100 * time.Millisecond) {
		if s, err := store.OpenWorker(pg.DSN(dbName)); err == nil {
			st = s
		} else if time.Since(start) > time.Minute {
			b.Fatalf("the coordinator did not migrate the schema: %v\n%s", err, tail(coord.logText(), 2000))
		}
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
				req := &intake.Request{Series: intake.Series{Subject: fmt.Sprintf("[PATCH] sim %d", i),
					Patches: []intake.Patch{{Subject: "[PATCH] sim", Mail: seed}}, Files: []string{"fs/squashfs/cache.c"}},
					Suites: []string{"cache-contention"}, Profile: "quick", Runs: 1 + rng.IntN(39),
					Thread: reports.Thread{Subject: fmt.Sprintf("[PATCH] sim %d", i), MessageID: fmt.Sprintf("sim-%d@x", i),
						Author: snd, Lists: []string{src + "@vger.example.org"}}}
				data, _ := json.Marshal(req)
				if _, _, err := tx.AddJob(ctx, store.Job{Dedupe: fmt.Sprint("sim:", i), Trigger: "list", Title: req.Series.Subject, Request: data,
					Source: src, Sender: snd, Needs: store.Needs{CPUs: 2, MemMiB: 2048, Suites: []string{"cache-contention"}}}); err != nil {
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

	// The workers, each a process with its own config, role, state and
	// cache.
	t0 := time.Now()
	var procs []*proc
	for i := 0; i < workers; i++ {
		name := fmt.Sprintf("sim-%02d", i)
		wdir := filepath.Join(dir, name)
		os.Mkdir(wdir, 0o700)
		wcfg := filepath.Join(wdir, "worker.yaml")
		os.WriteFile(wcfg, []byte(fmt.Sprintf(`state_dir: %s
database: postgres://%s@127.0.0.1:%d/%s?sslmode=disable
fleet: {local_worker: false, lease: 30s, poll: 1s}
reply: {from: "patchbot <bot@patchbot.test>"}
dry_run: {build: 0s, round: %s}
`, filepath.Join(wdir, "state"), name, pg.Port, dbName, unit/2)), 0o600)
		p := &proc{name: name, argv: []string{bin, "worker", "--config", wcfg, "--name", name}, dir: dir,
			env: append(os.Environ(), "PATCHBOT_CACHE="+filepath.Join(wdir, "cache"))}
		p.start(b)
		procs = append(procs, p)
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
			if resp, err := http.Get("http://" + httpAddr + "/api/home"); err == nil {
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
	var workerCPU time.Duration
	var workerRSS int64
	for _, p := range procs {
		p.stop(30 * time.Second)
		ru := p.cmd.ProcessState.SysUsage().(*syscall.Rusage)
		workerCPU += time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
		workerRSS = max(workerRSS, ru.Maxrss)
	}
	coord.stop(30 * time.Second)
	ru := coord.cmd.ProcessState.SysUsage().(*syscall.Rusage)
	cpu := time.Duration(ru.Utime.Nano() + ru.Stime.Nano())

	all, err := st.Jobs(ctx)
	if err != nil {
		b.Fatal(err)
	}
	r := analyse(all, t0)
	ents, _ := os.ReadDir(filepath.Join(dir, "coordinator", "runs"))
	if len(ents) != len(plan) {
		b.Errorf("%d runs collected, want %d", len(ents), len(plan))
	}
	if n := len(mail.Messages()); n != len(plan) {
		b.Errorf("the SMTP server accepted %d mails, want %d", n, len(plan))
	}
	b.ReportMetric(r.claimsPerSec, "claims/s")
	b.ReportMetric(r.p50.Seconds(), "p50-wait-s")
	b.ReportMetric(r.p99.Seconds(), "p99-wait-s")
	b.ReportMetric(cpu.Seconds(), "coord-cpu-s")
	b.ReportMetric(float64(ru.Maxrss)/1024, "coord-maxrss-MiB")
	b.Logf("%d jobs, %d worker processes, job length %s..%s (mean %s): all done and replied in %s; claims %.1f/s, busy workers %.1f of %d",
		len(plan), workers, unit, 39*unit, 20*unit, wall.Round(time.Second), r.claimsPerSec, r.busy, workers)
	b.Logf("queue wait from the start: p50 %s, p90 %s, p99 %s, max %s", r.p50.Round(time.Millisecond),
		r.p90.Round(time.Millisecond), r.p99.Round(time.Millisecond), r.max.Round(time.Millisecond))
	b.Logf("coordinator: %.1f s CPU (%.2f ms a job), max RSS %d MiB; workers: %.1f s CPU in all (%.1f ms a job), max RSS %d MiB each; runs collected: %d",
		cpu.Seconds(), float64(cpu.Microseconds())/1000/float64(len(plan)), ru.Maxrss/1024,
		workerCPU.Seconds(), float64(workerCPU.Microseconds())/1000/float64(len(plan)), workerRSS/1024, len(ents))
	b.Logf("fairness, while every source had jobs queued (the first %s, %d claims):", r.window.Round(time.Second), r.windowClaims)
	for _, s := range simSources {
		f := r.sources[s.name]
		share := 100 * float64(f.inWindow) / float64(max(r.windowClaims, 1))
		b.Logf("  %-9s %4.0f%% of the jobs, %4.1f%% of those claims; wait p50 %6.1fs, p99 %6.1fs; last claimed at %6.1fs",
			s.name, s.share*100, share, f.p50.Seconds(), f.p99.Seconds(), f.last.Seconds())
		if fair := 100.0 / float64(len(simSources)); share < fair-2 || share > fair+2 {
			b.Errorf("%s got %.1f%% of the claims while every source waited, want %.0f±2%%", s.name, share, fair)
		}
	}
}

// simResult is what the simulation measured.
type simResult struct {
	claimsPerSec       float64
	busy               float64 // workers busy on average
	p50, p90, p99, max time.Duration
	window             time.Duration // until the first source ran out of queued jobs
	windowClaims       int
	sources            map[string]*sourceResult
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
