package fleet

import (
	"cmp"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/patchbot/patchbot/internal/testenv"
	"github.com/patchbot/patchbot/store"
)

// The many-jobs cases' workers: a dry run whose stages last long enough
// for a fault to land where it is aimed, and short enough that a case
// takes seconds.
const dryRun = "{build: 500ms, round: 200ms}"

// A worker killed with SIGKILL while it builds: its lease runs out, the
// coordinator queues the job again, the other worker runs it; the killed
// worker comes back under its name and takes jobs again. Every series is
// tested once and answered once. The dashboard, in Chromium, shows the
// dead worker down and the live one busy with its job, stage and lease.
func TestWorkerKilledMidBuild(t *testing.T) {
	w := newWorld(t, options{dryRun: dryRun})
	w.checkWorkerRole()
	w.postMany(8)
	var victim *store.Job
	w.waitFor("w1 to build a patched kernel", 60*time.Second, func() bool {
		victim = w.runningOn("w1", "apply and build patched")
		return victim != nil
	})
	killed := time.Now()
	w.workers["w1"].kill()
	requeued, rerun := w.rerun(victim, "w1", killed)
	t.Run("the dashboard in Chromium", func(t *testing.T) { w.checkDashboard(t, "w1") })
	w.startWorker("w1") // as its unit's Restart= would
	tl := w.settle(2 * time.Minute)
	w.report("worker killed mid-build", tl, requeued, fmt.Sprintf(" (running again on w2 after %s)", rerun.Round(10*time.Millisecond)))
	w.checkSpread(victim.ID)
	w.checkCoordinatorBuiltNothing()
}

// The same, killed while it measures.
func TestWorkerKilledMidMeasurement(t *testing.T) {
	w := newWorld(t, options{dryRun: dryRun})
	w.postMany(8)
	var victim *store.Job
	w.waitFor("w1 to measure", 60*time.Second, func() bool {
		victim = w.runningOn("w1", "run ")
		return victim != nil
	})
	killed := time.Now()
	w.workers["w1"].kill()
	requeued, rerun := w.rerun(victim, "w1", killed)
	w.startWorker("w1")
	tl := w.settle(2 * time.Minute)
	w.report("worker killed mid-measurement", tl, requeued, fmt.Sprintf(" (running again on w2 after %s)", rerun.Round(10*time.Millisecond)))
	w.checkSpread(victim.ID)
}

// A worker cut off from the database (its veth down) for longer than its
// lease: it stops the job itself once the lease may have run out, before
// the coordinator gives the job to the other worker, and reports nothing
// of it; back on the network, it takes jobs again.
func TestWorkerCutOffLongerThanItsLease(t *testing.T) {
	w := newWorld(t, options{dryRun: "{build: 2s, round: 300ms}"})
	w.postMany(6)
	var victim *store.Job
	w.waitFor("w1 to run a job", 60*time.Second, func() bool {
		victim = w.runningOn("w1", "")
		return victim != nil
	})
	w1 := w.workers["w1"]
	cut := time.Now()
	w1.ns.Cut(t)
	w.waitFor("w1 to stop the job it cannot renew", 30*time.Second, func() bool {
		return len(w1.lines("the job's lease was lost while it ran")) > 0
	})
	stop := w1.lines("could not renew the job's lease")
	if len(stop) == 0 {
		t.Fatalf("w1 stopped its job without saying why:\n%s", tail(w1.logText(), 3000))
	}
	stoppedAfter := stop[0].Time.Sub(cut)
	requeued, rerun := w.rerun(victim, "w1", cut)
	j, _ := w.st.Job(context.Background(), victim.ID)
	// No split brain: w1 gave the job up before w2 was given it.
	if !stop[0].Time.Before(j.Started) {
		t.Errorf("w1 stopped its job at %s, after w2 claimed it at %s", stop[0].Time.Format(time.StampMilli), j.Started.Format(time.StampMilli))
	}
	if lease := 4 * time.Second; stoppedAfter > lease+time.Second {
		t.Errorf("w1 went on for %s after it was cut off, with a lease of %s", stoppedAfter, lease)
	}
	// Cut for twice its lease in all, then back.
	time.Sleep(time.Until(cut.Add(8 * time.Second)))
	w1.ns.Restore(t)
	back := time.Now()
	w.waitFor("w1 to be heard from again", 30*time.Second, func() bool {
		s := workerState(w.home(), "w1")
		return s == "idle" || s == "busy"
	})
	heard := time.Since(back)
	tl := w.settle(2 * time.Minute)
	for _, l := range w1.lines("job done") {
		if l.Job == victim.ID {
			t.Errorf("w1 reported the job it lost (%d)", victim.ID)
		}
	}
	w.report("worker cut off for twice its lease", tl, requeued,
		fmt.Sprintf(" (w1 stopped its job %s after the cut; running again on w2 after %s; w1 heard again %s after the link came back)",
			stoppedAfter.Round(10*time.Millisecond), rerun.Round(10*time.Millisecond), heard.Round(10*time.Millisecond)))
	if n := w.jobsOf("w1"); n == 0 {
		t.Errorf("w1 took no job after it came back")
	}
}

// PostgreSQL restarted (an immediate stop: every connection cut) while
// jobs run and replies go out: the workers renew and end their jobs when
// it is back, the coordinator reads mail and sends again; no lease is
// lost for a restart shorter than the lease.
func TestPostgresRestartedMidRun(t *testing.T) {
	w := newWorld(t, options{dryRun: dryRun, lease: "8s"})
	w.postMany(8)
	w.waitFor("two jobs done and two running", 60*time.Second, func() bool {
		c, _ := w.st.JobCounts(context.Background())
		return c[store.JobDone] >= 2 && c[store.JobRunning] == 2
	})
	before, _ := w.st.JobCounts(context.Background())
	down := time.Now()
	if err := w.pg.Down(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(3 * time.Second)
	if err := w.pg.Up(); err != nil {
		t.Fatal(err)
	}
	up := time.Now()
	// Recovered when a job ends after the restart.
	recovered := w.waitFor("a job to end after the restart", time.Minute, func() bool {
		c, err := w.st.JobCounts(context.Background())
		return err == nil && c[store.JobDone] > before[store.JobDone]
	})
	tl := w.settle(3 * time.Minute)
	w.report("PostgreSQL restarted mid-run", tl, up.Sub(down)+recovered,
		fmt.Sprintf(" (down %s; a job ended %s after it was back, every reply delivered %s after)", up.Sub(down).Round(10*time.Millisecond),
			recovered.Round(10*time.Millisecond), w.settled.Sub(up).Round(10*time.Millisecond)))
	for _, p := range append([]*proc{w.coord}, w.workers["w1"].proc, w.workers["w2"].proc) {
		t.Logf("%s's warnings: %v", p.name, p.warnings())
	}
	if tl.Crashes != 0 {
		t.Errorf("%d leases lost to a restart of %s with a lease of 8 s", tl.Crashes, up.Sub(down).Round(time.Second))
	}
}

// The coordinator killed with SIGKILL while replies wait in the outbox
// (Postfix made slow, a second a mail): restarted, it takes back what it
// was sending, sends every reply once, and collects what the workers
// reported meanwhile.
func TestCoordinatorKilledWithRepliesInTheOutbox(t *testing.T) {
	w := newWorld(t, options{dryRun: "{build: 100ms, round: 50ms}"})
	w.slowPostfix()
	w.postMany(8)
	ctx := context.Background()
	var pending int
	w.waitFor("replies to pile up in the outbox", 90*time.Second, func() bool {
		c, _ := w.st.OutboxCounts(ctx)
		pending = c[store.Queued] + c[store.Sending]
		return c[store.Sent] >= 1 && pending >= 3
	})
	killed := time.Now()
	w.coord.kill()
	c, _ := w.st.OutboxCounts(ctx)
	w.coord.start(t) // as its unit's Restart= would
	w.waitFor("every reply to be delivered", 2*time.Minute, func() bool { return w.count().RepliesLost == 0 })
	recovered := time.Since(killed)
	tl := w.settle(time.Minute)
	w.report("coordinator killed with replies in the outbox", tl, recovered,
		fmt.Sprintf(" (outbox at the kill: %d queued, %d sending, %d delivering, %d sent; all delivered %s after the kill, at a second a mail)",
			c[store.Queued], c[store.Sending], c[store.Delivering], c[store.Sent], recovered.Round(10*time.Millisecond)))
	if n := strings.Count(w.coord.logText(), `"msg":"replies a dead sender was sending queued again"`); c[store.Sending] > 0 && n == 0 {
		t.Errorf("the restarted coordinator did not take back the reply it was sending")
	}
}

// Workers whose clocks run ten minutes slow and ten minutes fast: leases
// are stamped and judged by PostgreSQL's clock, so neither loses a job it
// holds nor holds a job it lost for ten minutes, and the dashboard sees
// both alive. The fast one is killed mid-job: its job is queued again
// after the lease, not after ten minutes more.
func TestWorkerClocksTenMinutesOff(t *testing.T) {
	w := newWorld(t, options{dryRun: dryRun, skew: map[string]time.Duration{"w1": -10 * time.Minute, "w2": 10 * time.Minute}})
	for name, off := range map[string]time.Duration{"w1": -10 * time.Minute, "w2": 10 * time.Minute} {
		started := w.workers[name].lines("worker started")
		if len(started) == 0 {
			t.Fatalf("%s logged no start", name)
		}
		if d := started[0].Time.Sub(time.Now().Add(off)); d > 30*time.Second || d < -30*time.Second {
			t.Fatalf("%s's clock is %s off the wanted skew %s: skewclock did not take", name, d, off)
		}
	}
	w.postMany(8)
	tl := w.settle(2 * time.Minute)
	if tl.Crashes != 0 {
		t.Errorf("%d leases lost by workers whose clocks are off", tl.Crashes)
	}
	for _, n := range []string{"w1", "w2"} {
		if w.jobsOf(n) == 0 {
			t.Errorf("%s ran no job", n)
		}
	}
	dbNow, _ := w.st.Now(context.Background())
	ws, _ := w.st.Workers(context.Background(), dbNow.Add(-time.Hour))
	for _, x := range ws {
		if d := dbNow.Sub(x.Heartbeat); d < 0 || d > 5*time.Second {
			t.Errorf("%s's last heartbeat is %s from the database's now: stamped by its own clock?", x.Name, d)
		}
	}
	w.post(0)
	w.post(1)
	var victim *store.Job
	w.waitFor("w2 (ten minutes fast) to run a job", time.Minute, func() bool {
		victim = w.runningOn("w2", "")
		return victim != nil
	})
	killed := time.Now()
	w.workers["w2"].kill()
	requeued, rerun := w.rerun(victim, "w2", killed)
	if requeued > 10*time.Second {
		t.Errorf("the fast worker's job was queued again %s after its death, with a lease of 4 s", requeued)
	}
	w.startWorker("w2")
	tl = w.settle(time.Minute)
	w.report("worker clocks 10 minutes slow and fast", tl, requeued,
		fmt.Sprintf(" (the fast one killed mid-job: running again on w1 after %s)", rerun.Round(10*time.Millisecond)))
}

// The coordinator needs no build tools, kernel tree, cache or VM: with
// SQLite and no local worker, run as nobody with nothing on its PATH, it
// reads mail, queues the job and serves its dashboard until stopped.
func TestCoordinatorAloneNeedsNothing(t *testing.T) {
	testenv.Long(t)
	testenv.Root(t) // to run the coordinator as nobody
	bin, _ := binaries(t)
	w := &world{t: t, bin: bin}
	dir, err := os.MkdirTemp("", "patchbot-coord-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	os.Chmod(dir, 0o755)
	w.dir = dir
	md := filepath.Join(dir, "list-a")
	for _, sub := range []string{"new", "cur", "tmp"} {
		os.MkdirAll(filepath.Join(md, sub), 0o755)
	}
	w.lists = []string{md}
	addr := freeAddr(t)
	cdir := filepath.Join(dir, "coordinator")
	os.Mkdir(cdir, 0o700)
	cfg := filepath.Join(cdir, "patchbot.yaml")
	os.WriteFile(cfg, []byte(fmt.Sprintf(`state_dir: %s
fleet: {local_worker: false}
sources:
  - {name: list-a, maildir: %s, list: list-a@lists.example.org, poll: 200ms}
http: %s
`, filepath.Join(cdir, "state"), md, addr)), 0o600)
	uid, gid := nobody(t)
	os.Chown(cdir, uid, gid)
	os.Chown(cfg, uid, gid)
	argv, env := readUnit(t, "patchbot-watch.service").command(t, bin, "", map[string]string{"/etc/patchbot/patchbot.yaml": cfg})
	p := &proc{name: "coordinator", argv: argv, dir: dir, cred: &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)},
		env: append(env, "PATH=/nonexistent", "HOME="+cdir, "PATCHBOT_CACHE="+filepath.Join(cdir, "cache"))}
	p.start(t)
	defer func() {
		if t.Failed() {
			t.Logf("its log:\n%s", tail(p.logText(), 3000))
		}
	}()
	w.post(0)
	w.http = addr
	w.waitFor("the series to be queued and shown", 30*time.Second, func() bool {
		if !p.running() {
			t.Fatalf("the coordinator exited:\n%s", p.logText())
		}
		resp, err := http.Get("http://" + addr + "/healthz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		v := w.home()
		return len(v.Queued) == 1 && v.Queued[0].Trigger == "list"
	})
	time.Sleep(2 * time.Second) // nothing runs it, nothing fails
	if !p.running() {
		t.Fatalf("the coordinator exited:\n%s", p.logText())
	}
	p.stop(10 * time.Second)
	if code := p.cmd.ProcessState.ExitCode(); code != 0 {
		t.Errorf("exit status %d after SIGTERM:\n%s", code, tail(p.logText(), 2000))
	}
	if _, err := os.Stat(filepath.Join(cdir, "cache")); err == nil {
		t.Error("the coordinator made a kernel cache")
	}
	if strings.Contains(p.logText(), `"level":"ERROR"`) {
		t.Errorf("the coordinator logged errors:\n%s", p.logText())
	}
}

// checkWorkerRole: a worker's own credentials, from its own host, can
// write no outbox row, read no mail, and end no job it does not hold.
func (w *world) checkWorkerRole() {
	t := w.t
	cfg, err := os.ReadFile(filepath.Join(w.dir, "w1", "worker.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var dsn string
	for _, l := range strings.Split(string(cfg), "\n") {
		if v, ok := strings.CutPrefix(l, "database: "); ok {
			dsn = v
		}
	}
	pw, _ := os.ReadFile(filepath.Join(w.dir, "w1", "db-password"))
	u, _ := url.Parse(dsn)
	u.User = url.UserPassword("w1", strings.TrimSpace(string(pw)))
	// From w1's namespace, as the worker connects: psql over its veth.
	psql := func(q string) (string, error) {
		out, err := exec.Command("ip", "netns", "exec", w.workers["w1"].ns.name, "psql", u.String(), "-v", "ON_ERROR_STOP=1",
			"-c", q).CombinedOutput()
		return string(out), err
	}
	for _, q := range []string{
		`INSERT INTO outbox (message_id, sender, recipients, raw, state, created, updated) VALUES ('x@y', 'bot@x', '["a@b"]', '\x00', 'queued', '', '')`,
		`SELECT raw FROM messages LIMIT 1`,
		`INSERT INTO commands (message_id, sender, at, accepted) VALUES ('c@x', 'a@b', '', 1)`,
		`UPDATE workers SET host = 'x' WHERE name = 'w2'`,
		`UPDATE jobs SET not_before = '9999-01-01T00:00:00.000000000Z' WHERE state = 'queued'`,
		`UPDATE base_rounds SET result = '\x00'`,
		`SELECT * FROM patchbot_claim('w2', 'test', 60, NULL, NULL, 1, 64, 65536, '{}', 0)`,
	} {
		if out, err := psql(q); err == nil && !strings.Contains(out, "UPDATE 0") ||
			err != nil && !strings.Contains(out, "permission denied") && !strings.Contains(out, "may act only in its own name") {
			t.Errorf("w1's role: %s: %v\n%s; want permission denied, or no row", q, err, out)
		}
	}
	// And the same over Go's driver, for the error code.
	db, err := sql.Open("pgx", u.String())
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	_, err = db.Exec(`INSERT INTO outbox (message_id, sender, recipients, raw, state, created, updated) VALUES ('x@y', 'bot@x', '["a@b"]', '\x00', 'queued', '', '')`)
	var pe *pgconn.PgError
	if !errors.As(err, &pe) || pe.Code != "42501" {
		t.Errorf("w1's role inserting into the outbox: %v; want insufficient_privilege", err)
	}
}

// rerun waits, after a fault at at, for the job to be queued again and
// then running (or done) on another worker, and says after how long each.
func (w *world) rerun(victim *store.Job, lost string, at time.Time) (requeued, running time.Duration) {
	ctx := context.Background()
	w.waitFor("the lost job to be queued again", time.Minute, func() bool {
		j, _ := w.st.Job(ctx, victim.ID)
		if j.Crashes >= 1 && requeued == 0 {
			requeued = time.Since(at)
		}
		if j.Crashes >= 1 && j.Owner != lost && (j.State == store.JobRunning || j.State == store.JobDone) {
			running = time.Since(at)
			return true
		}
		return false
	})
	return requeued, running
}

// checkSpread: the lost job ran twice (one crash), every other job once,
// and each worker built in its own cache.
func (w *world) checkSpread(victim int64) {
	ran := map[string]int{}
	for _, j := range w.jobs() {
		ran[j.Owner]++
		wantAttempts, wantCrashes := 1, 0
		if j.ID == victim {
			wantAttempts, wantCrashes = 2, 1
		}
		if j.State != store.JobDone || j.Attempts != wantAttempts || j.Crashes != wantCrashes || j.Blame != "" {
			w.t.Errorf("job %d: %s, %d attempts, %d crashes, blame %q; want done, %d, %d, none", j.ID, j.State, j.Attempts,
				j.Crashes, j.Blame, wantAttempts, wantCrashes)
		}
		if _, err := os.Stat(filepath.Join(w.dir, "coordinator", "state", "runs", fmt.Sprintf("job-%d", j.ID), "run.json")); err != nil {
			w.t.Errorf("job %d's run is not in the coordinator's runs directory: %v", j.ID, err)
		}
	}
	for name, wk := range w.workers {
		if ran[name] == 0 {
			w.t.Errorf("%s ran no job: %v", name, ran)
		}
		b, _ := os.ReadFile(filepath.Join(wk.cache, "dry-run", "builds.log"))
		if n := strings.Count(string(b), "patched\n"); n < ran[name] {
			w.t.Errorf("%s's cache saw %d patched builds for its %d jobs", name, n, ran[name])
		}
	}
}

// jobsOf counts the jobs a worker ended last.
func (w *world) jobsOf(worker string) int {
	n := 0
	for _, j := range w.jobs() {
		if j.Owner == worker && j.State == store.JobDone {
			n++
		}
	}
	return n
}

// slowPostfix makes Postfix's smtpd wait a second before it answers each
// recipient, so that replies wait in the outbox.
func (w *world) slowPostfix() {
	for _, args := range [][]string{
		{"postconf", "-c", w.pf.ConfigDir, "-e", "smtpd_client_restrictions = sleep 1, permit"},
		{"postfix", "-c", w.pf.ConfigDir, "reload"},
	} {
		if out, err := exec.Command(args[0], args[1:]...).CombinedOutput(); err != nil {
			w.t.Fatalf("%s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	time.Sleep(time.Second) // the reload
}

// nobody is the unprivileged user the coordinator runs as.
func nobody(t testing.TB) (uid, gid int) {
	t.Helper()
	u, err := user.Lookup("nobody")
	if err != nil {
		t.Fatal(err)
	}
	uid, _ = strconv.Atoi(u.Uid)
	gid, _ = strconv.Atoi(u.Gid)
	return uid, gid
}

func freeAddr(t testing.TB) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// One worker, in its own namespace, runs the seed series for real: the
// base kernel from the machine's cache, the patched build in the
// sandbox, both booted in QEMU (TCG here), the rounds interleaved. Its
// results and reply reach the coordinator through PostgreSQL, and the
// reply goes out once. Heavy: run it under the shared lock. It runs
// cache-contention's smoke profile, a round in seconds: the path is what
// it tests. With PATCHBOT_FLEET_PROFILE=standard its patch to reply is the
// T of docs/fleet.md's sizing.
func TestRealKernelThroughAWorker(t *testing.T) {
	testenv.NeedsKernel(t)
	testenv.NeedsVM(t)
	testenv.Tools(t, "mksquashfs", "bwrap")
	if _, err := os.Stat("/usr/src/linux-source-6.1.tar.xz"); err != nil {
		t.Skip("Debian's linux-source-6.1 is not installed (scripts/install-deps.sh installs it)")
	}
	cache := os.Getenv("PATCHBOT_CACHE")
	if cache == "" {
		cache = "/var/cache/patchbot"
	}
	profile := cmp.Or(os.Getenv("PATCHBOT_FLEET_PROFILE"), "smoke")
	w := newWorld(t, options{workers: 1, lists: 1, lease: "30s", cache: cache, profile: profile,
		extraWorker: "vm: {backend: qemu, cpus: 2, mem_mib: 1024}\n"})
	start := time.Now()
	id := w.post(0)
	tl := w.settle(40 * time.Minute)
	took := w.settled.Sub(start)
	w.report("a real kernel through a worker", tl, 0, fmt.Sprintf(" (patch to reply %s)", took.Round(time.Second)))
	jobs := w.jobs()
	if len(jobs) != 1 {
		t.Fatalf("%d jobs, want 1", len(jobs))
	}
	j := jobs[0]
	if j.Owner != "w1" || j.Attempts != 1 || j.Blame != "" || j.State != store.JobDone {
		t.Errorf("job = %s on %s, %d attempts, blame %q, error %q", j.State, j.Owner, j.Attempts, j.Blame, j.Error)
	}
	sent, _ := w.st.OutboxIn(context.Background(), store.Sent)
	if len(sent) != 1 {
		t.Fatalf("%d replies sent, want 1", len(sent))
	}
	reply := string(sent[0].Raw)
	for _, want := range []string{"In-Reply-To: <" + id + ">", "sched_wakeup", "TCG"} {
		if !strings.Contains(reply, want) {
			t.Errorf("the reply lacks %q:\n%s", want, reply)
		}
	}
	run := filepath.Join(w.dir, "coordinator", "state", "runs", fmt.Sprintf("job-%d", j.ID))
	w.waitFor("the coordinator to collect the run", time.Minute, func() bool {
		_, err := os.Stat(filepath.Join(run, "run.json"))
		return err == nil
	})
	for _, f := range []string{"run.json", "base.json", "patched.json", "build-patched.log", "reply.eml", "series.mbox"} {
		if _, err := os.Stat(filepath.Join(run, f)); err != nil {
			t.Errorf("the coordinator's run lacks %s: %v", f, err)
		}
	}
	w.checkCoordinatorBuiltNothing()
	t.Logf("T for the seed series through a worker, %d rounds a side of %s: %s", w.o.runs, profile, took.Round(time.Second))
}

// A worker drained (SIGHUP, docs/fleet.md) while it runs a job finishes
// that job, takes no other, and exits 0; the dashboard shows it stopped,
// and the other worker runs the rest.
func TestWorkerDrained(t *testing.T) {
	w := newWorld(t, options{dryRun: dryRun})
	w.postMany(6)
	var held *store.Job
	w.waitFor("w1 to run a job", 60*time.Second, func() bool {
		held = w.runningOn("w1", "")
		return held != nil
	})
	w1 := w.workers["w1"]
	w1.cmd.Process.Signal(syscall.SIGHUP)
	select {
	case <-w1.done:
	case <-time.After(time.Minute):
		t.Fatal("w1 did not stop after its job")
	}
	if code := w1.cmd.ProcessState.ExitCode(); code != 0 {
		t.Errorf("w1 exited %d after draining", code)
	}
	j, _ := w.st.Job(context.Background(), held.ID)
	if j.State != store.JobDone || j.Owner != "w1" || j.Attempts != 1 || j.Crashes != 0 {
		t.Errorf("the job w1 held when drained: %s on %s, %d attempts, %d crashes; want done by w1 once", j.State, j.Owner, j.Attempts, j.Crashes)
	}
	if s := workerState(w.home(), "w1"); s != "stopped" {
		t.Errorf("the dashboard shows the drained w1 %q, want stopped", s)
	}
	tl := w.settle(2 * time.Minute)
	w.report("worker drained", tl, 0, "")
	if n := w.jobsOf("w1"); n != 1 {
		t.Errorf("w1 ended %d jobs, want the one it held when drained", n)
	}
}
