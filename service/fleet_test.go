package service

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	netmail "net/mail"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/patchbot/patchbot/images"
	"github.com/patchbot/patchbot/internal/testenv"
	"github.com/patchbot/patchbot/mailbox/sender/smtptest"
	"github.com/patchbot/patchbot/reports"
	"github.com/patchbot/patchbot/store"
	"github.com/patchbot/patchbot/store/pgtest"
	"github.com/patchbot/patchbot/suites"
	"github.com/patchbot/patchbot/suites/invm"
	"github.com/patchbot/patchbot/vmrunner"
	"github.com/patchbot/patchbot/vmrunner/proto"
	"github.com/patchbot/patchbot/web"
)

// The fleet tests run the coordinator and the workers as processes of
// their own, on one machine standing in for several hosts: this test
// binary, re-executed with fleetRoleEnv naming the role. The coordinator
// is the real Daemon (Maildir sources, the store on PostgreSQL, the
// outbox, SMTP to a real Postfix, the dashboard); a worker is the real
// Worker, with kernels that a fake builder "builds" into its own cache
// directory and suites measured on the fake VM backend, or, for the one
// heavy test, the real pipeline. None of this is in the patchbot binary
// or its config.
const (
	fleetRoleEnv   = "PATCHBOT_FLEET_ROLE"   // coordinator, worker, real-worker
	fleetConfigEnv = "PATCHBOT_FLEET_CONFIG" // the shared config file
	fleetNameEnv   = "PATCHBOT_FLEET_NAME"   // a worker's name
	fleetBuildEnv  = "PATCHBOT_FLEET_BUILD"  // how long the fake builder takes per kernel
)

func TestMain(m *testing.M) {
	if role := os.Getenv(fleetRoleEnv); role != "" {
		os.Exit(runFleetChild(role))
	}
	os.Exit(m.Run())
}

func runFleetChild(role string) int {
	log := slog.New(slog.NewJSONHandler(os.Stderr, nil))
	fail := func(err error) int {
		log.Error("fleet child", "role", role, "err", err)
		return 1
	}
	cfg, err := LoadConfig(os.Getenv(fleetConfigEnv))
	if err != nil {
		return fail(err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	st, err := OpenStore(cfg)
	if err != nil {
		return fail(err)
	}
	defer st.Close()
	switch role {
	case "sim-coordinator":
		if err := runSimCoordinator(ctx, cfg, st); err != nil {
			return fail(err)
		}
	case "coordinator":
		srcs, err := OpenSources(cfg, log)
		if err != nil {
			return fail(err)
		}
		ob, err := NewOutbox(cfg, st, log)
		if err != nil {
			return fail(err)
		}
		d := &Daemon{Config: cfg, Store: st, Sources: srcs, Outbox: ob, Log: log, Metrics: NewMetrics(),
			Poll: 200 * time.Millisecond, FlushEvery: 500 * time.Millisecond}
		dash, err := web.New(web.Options{Store: st, StateDir: cfg.StateDir, Lease: cfg.Fleet.Lease, Progress: d.Progress, Log: log})
		if err != nil {
			return fail(err)
		}
		go d.Metrics.Serve(ctx, cfg.HTTP, log, dash)
		if err := d.Run(ctx); err != nil {
			return fail(err)
		}
	case "worker", "real-worker":
		p := &Pipeline{Reply: cfg.Reply, VM: cfg.VM, Tree: cfg.Kernel}
		if role == "real-worker" {
			if p, err = NewPipeline(cfg, os.Stderr); err != nil {
				return fail(err)
			}
		} else {
			delay, _ := time.ParseDuration(os.Getenv(fleetBuildEnv))
			cache, err := images.CacheDir()
			if err != nil {
				return fail(err)
			}
			p.Builder = &cachedFakeBuilder{dir: cache, delay: delay}
			p.Tester = fakeVMTester{round: 50 * time.Millisecond}
		}
		w := &Worker{Config: cfg, Store: st, Pipeline: p, Name: os.Getenv(fleetNameEnv), Log: log, Retry: Retry{Backoff: time.Second}}
		if err := w.Run(ctx); err != nil {
			return fail(err)
		}
	default:
		return fail(fmt.Errorf("no role %q", role))
	}
	return 0
}

// cachedFakeBuilder "builds" kernels into its cache directory (a file
// each, and a line in builds.log), taking delay per kernel: a worker's
// builds stay on its own host.
type cachedFakeBuilder struct {
	dir   string
	delay time.Duration
}

func (b *cachedFakeBuilder) build(ctx context.Context, name string) (string, error) {
	select {
	case <-ctx.Done():
		return "", ctx.Err()
	case <-time.After(b.delay):
	}
	p := filepath.Join(b.dir, name)
	if err := os.WriteFile(p, []byte("not a kernel"), 0o644); err != nil {
		return "", err
	}
	f, err := os.OpenFile(filepath.Join(b.dir, "builds.log"), os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		return "", err
	}
	defer f.Close()
	fmt.Fprintln(f, name)
	return p, nil
}

func (b *cachedFakeBuilder) Choose(ctx context.Context, w images.Want) (*images.Choice, error) {
	return &images.Choice{Tree: images.DefaultTree, How: images.ByDefault}, nil
}

func (b *cachedFakeBuilder) Base(ctx context.Context, base images.Base) (*images.Build, error) {
	p, err := b.build(ctx, "base")
	if err != nil {
		return nil, err
	}
	return &images.Build{BzImage: p, Commit: strings.Repeat("1", 40), ConfigHash: "cafe", Compiler: "gcc (Debian 12.2.0-14) 12.2.0"}, nil
}

func (b *cachedFakeBuilder) Patched(ctx context.Context, base *images.Build, patches [][]byte) (*images.Build, error) {
	p, err := b.build(ctx, "patched")
	if err != nil {
		return nil, err
	}
	return &images.Build{BzImage: p, Commit: base.Commit, Head: strings.Repeat("2", 40), ConfigHash: base.ConfigHash,
		Compiler: base.Compiler, Series: len(patches)}, nil
}

// fakeVMTester measures a suite on the fake VM backend: two VMs up at
// once (the A/B pair on one host), rounds interleaved base, patched, …,
// over the real agent protocol; the "guest" answers each round with
// samples in which the patched kernel wakes far fewer tasks.
type fakeVMTester struct{ round time.Duration }

func (f fakeVMTester) Test(ctx context.Context, s invm.Spec) (*invm.Outcome, error) {
	pool, err := vmrunner.New("fake", vmrunner.Config{Limit: 2, RunSuite: func(ctx context.Context, req proto.Request) (any, error) {
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(f.round):
		}
		wpr := 9.6
		if req.Params[suites.ParamKernel] == "patched" {
			wpr = 1.1
		}
		noise := float64(req.Round%3-1) * 0.02
		return &suites.Result{Suite: req.Suite, Profile: req.Profile, Kernel: req.Params[suites.ParamKernel],
			Accel: "tcg", CPUs: 2, MemMiB: 1024, Samples: []suites.Sample{{Suite: req.Suite, Workload: "read-storm",
				Metric: "wakeups_per_release", Unit: "count", Round: req.Round, Value: wpr * (1 + noise)}}}, nil
	}})
	if err != nil {
		return nil, err
	}
	defer pool.Close()
	sides := []struct {
		label string
		k     *images.Build
	}{{"base", s.Base}, {"patched", s.Patched}}
	var guests []vmrunner.Instance
	for _, side := range sides {
		vm, err := pool.Create(ctx, vmrunner.Spec{Name: side.label, Kernel: side.k.BzImage, CPUs: 2, MemMiB: 1024})
		if err != nil {
			return nil, err
		}
		if _, err := vm.Boot(ctx); err != nil {
			return nil, err
		}
		guests = append(guests, vm)
	}
	rounds := make([][]*suites.Result, 2)
	for n := 1; n <= max(s.Runs, 1); n++ {
		for i, side := range sides {
			raw, err := guests[i].Do(ctx, proto.Request{Op: proto.OpRunSuite, Suite: s.Suite, Profile: s.Profile, Round: n,
				Params: map[string]string{suites.ParamKernel: side.label}}, nil)
			if err != nil {
				return nil, err
			}
			var r suites.Result
			if err := json.Unmarshal(raw, &r); err != nil {
				return nil, err
			}
			rounds[i] = append(rounds[i], &r)
		}
	}
	return &invm.Outcome{Base: suites.Merge(rounds[0]), Patched: suites.Merge(rounds[1]), Backend: "fake", Accel: "tcg",
		CPUs: 2, MemMiB: 1024}, nil
}

// fleetWorld is one fleet: PostgreSQL, Postfix, the lists' Maildirs, the
// shared config, and the processes.
type fleetWorld struct {
	t      *testing.T
	dir    string
	cfg    string
	state  string
	http   string
	pf     *smtptest.Postfix
	st     *store.Store // the test's own look at the database
	lists  []string     // Maildirs, one per list
	procs  map[string]*exec.Cmd
	starts int
}

// newFleetWorld makes a fleet of lists lists; fleet is the config's fleet
// part and extra more of the config.
func newFleetWorld(t *testing.T, lists int, fleet, extra string) *fleetWorld {
	t.Helper()
	pg := pgtest.Start(t)
	dsn, err := pg.NewDB()
	if err != nil {
		t.Fatal(err)
	}
	w := &fleetWorld{t: t, dir: t.TempDir(), procs: map[string]*exec.Cmd{}}
	w.pf = smtptest.StartPostfix(t, filepath.Join(w.dir, "delivered"))
	w.state = filepath.Join(w.dir, "coordinator")
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	w.http = l.Addr().String()
	l.Close()
	var srcs strings.Builder
	for i := 0; i < lists; i++ {
		md := filepath.Join(w.dir, fmt.Sprintf("list-%c", 'a'+i))
		for _, sub := range []string{"new", "cur", "tmp"} {
			os.MkdirAll(filepath.Join(md, sub), 0o755)
		}
		w.lists = append(w.lists, md)
		fmt.Fprintf(&srcs, "  - {name: list-%c, maildir: %s, list: list-%c@lists.example.org, poll: 200ms}\n", 'a'+i, md, 'a'+i)
	}
	w.cfg = filepath.Join(w.dir, "patchbot.yaml")
	conf := fmt.Sprintf(`state_dir: %s
database: %s
fleet: %s
sources:
%ssmtp: {enabled: true, addr: %q, from: bot@patchbot.test, ca_file: %s}
reply: {from: "patchbot <bot@patchbot.test>"}
http: %s
%s`, w.state, dsn, fleet, srcs.String(), w.pf.Addr, filepath.Join(w.pf.ConfigDir, "cert.pem"), w.http, extra)
	if err := os.WriteFile(w.cfg, []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
	if w.st, err = store.Open(dsn); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.st.Close() })
	return w
}

// start runs a role as a process of its own, with its environment.
func (w *fleetWorld) start(name, role string, env ...string) *exec.Cmd {
	w.t.Helper()
	w.starts++
	logf, err := os.Create(filepath.Join(w.dir, fmt.Sprintf("%s-%d.log", strings.ReplaceAll(name, "/", "_"), w.starts)))
	if err != nil {
		w.t.Fatal(err)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), fleetRoleEnv+"="+role, fleetConfigEnv+"="+w.cfg, fleetNameEnv+"="+name)
	cmd.Env = append(cmd.Env, env...)
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		w.t.Fatal(err)
	}
	w.procs[name] = cmd
	w.t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGTERM)
		done := make(chan struct{})
		go func() { cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			cmd.Process.Kill()
		}
		logf.Close()
		if w.t.Failed() {
			b, _ := os.ReadFile(logf.Name())
			w.t.Logf("%s's log (last 3000 bytes):\n%s", name, tail(b, 3000))
		}
	})
	return cmd
}

func tail(b []byte, n int) []byte {
	if len(b) > n {
		return b[len(b)-n:]
	}
	return b
}

// kill -9s a process, as a power cut or the OOM killer would.
func (w *fleetWorld) kill(name string) {
	cmd := w.procs[name]
	cmd.Process.Signal(syscall.SIGKILL)
	cmd.Wait()
}

// post delivers a series of one patch into a list's Maildir, as the
// list's server would: the seed patch's body, under a subject and
// Message-ID of its own, from the list's one author.
func (w *fleetWorld) post(list, n int, seed []byte) string {
	w.t.Helper()
	_, body, ok := bytes.Cut(seed, []byte("\n\n"))
	if !ok {
		w.t.Fatal("the seed mail has no body")
	}
	addr := fmt.Sprintf("list-%c@lists.example.org", 'a'+list)
	id := fmt.Sprintf("fleet-%d-%d@example.org", list, n)
	mail := fmt.Sprintf(`From: Dev %c <dev-%c@example.org>
To: %s
Subject: [PATCH] squashfs: cache wakeups, take %d of list %c
Date: Fri, 24 Jul 2026 12:05:56 -0700
Message-ID: <%s>
List-Id: <list-%c.lists.example.org>
MIME-Version: 1.0
Content-Type: text/plain; charset=UTF-8

%s`, 'a'+list, 'a'+list, addr, n, 'a'+list, id, 'a'+list, body)
	name := fmt.Sprintf("%d.M%d.fleet", 1800000000+list*1000+n, n)
	if err := os.WriteFile(filepath.Join(w.lists[list], "new", name), []byte(mail), 0o644); err != nil {
		w.t.Fatal(err)
	}
	return id
}

func seedPatch(t testing.TB) []byte {
	t.Helper()
	b, err := os.ReadFile("../testdata/mbox/squashfs-thundering-herd.mbox")
	if err != nil {
		t.Fatal(err)
	}
	// The first mail of the mbox, without its "From " line.
	_, b, _ = bytes.Cut(b, []byte("\n"))
	if i := bytes.Index(b, []byte("\nFrom ")); i >= 0 {
		b = b[:i+1]
	}
	return b
}

// waitFor polls cond until it holds or the time is up.
func (w *fleetWorld) waitFor(what string, timeout time.Duration, cond func() bool) {
	w.t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			w.t.Fatalf("timed out after %v waiting for %s", timeout, what)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func (w *fleetWorld) jobs() []*store.Job {
	jobs, err := w.st.Jobs(context.Background())
	if err != nil {
		w.t.Fatal(err)
	}
	return jobs
}

// home is the coordinator's dashboard's /api/home.
func (w *fleetWorld) home() *web.HomeView {
	w.t.Helper()
	resp, err := http.Get("http://" + w.http + "/api/home")
	if err != nil {
		w.t.Fatal(err)
	}
	defer resp.Body.Close()
	var v web.HomeView
	b, _ := io.ReadAll(resp.Body)
	if err := json.Unmarshal(b, &v); err != nil {
		w.t.Fatalf("/api/home: %v: %s", err, b)
	}
	return &v
}

func workerState(v *web.HomeView, name string) string {
	for _, ws := range v.Workers {
		if ws.Name == name {
			return ws.State
		}
	}
	return ""
}

// delivered counts the replies Postfix delivered: copies by Message-ID,
// and by Message-ID and recipient.
func (w *fleetWorld) delivered() (copies map[string]int, perRcpt map[string]int) {
	w.t.Helper()
	msgs, err := smtptest.ReadMaildir(w.pf.Maildir)
	if err != nil {
		w.t.Fatal(err)
	}
	copies, perRcpt = map[string]int{}, map[string]int{}
	for _, raw := range msgs {
		m, err := netmail.ReadMessage(bytes.NewReader(raw))
		if err != nil {
			continue
		}
		id := strings.Trim(m.Header.Get("Message-Id"), "<>")
		copies[id]++
		perRcpt[id+" "+strings.ToLower(m.Header.Get("Delivered-To"))]++
	}
	return copies, perRcpt
}

// The fleet on one machine: a coordinator and two workers, each with its
// own cache, on PostgreSQL. Jobs spread over both; one worker is killed
// with SIGKILL in the middle of a job, its lease runs out and the other
// worker runs the job; every job ends once, every reply reaches each of
// its recipients once, every run reaches the coordinator's runs
// directory, and the dashboard shows both workers.
func TestFleetSurvivesAWorkerKilledMidJob(t *testing.T) {
	testenv.Long(t) // PostgreSQL, Postfix and three processes
	w := newFleetWorld(t, 2, "{local_worker: false, lease: 2s, poll: 200ms}", "suites: {runs: 2}\n")
	seed := seedPatch(t)
	const perList = 5
	var posted []string
	for n := 0; n < perList; n++ {
		for list := 0; list < 2; list++ {
			posted = append(posted, w.post(list, n, seed))
		}
	}
	cacheOf := map[string]string{"w1": filepath.Join(w.dir, "cache-w1"), "w2": filepath.Join(w.dir, "cache-w2")}
	startWorker := func(name string) {
		os.MkdirAll(cacheOf[name], 0o755)
		w.start(name, "worker", "PATCHBOT_CACHE="+cacheOf[name], fleetBuildEnv+"=700ms")
	}
	w.start("coordinator", "coordinator")
	startWorker("w1")
	startWorker("w2")

	// w1 takes a job and is killed while it builds the patched kernel.
	var victim *store.Job
	w.waitFor("w1 to build a patched kernel", 60*time.Second, func() bool {
		for _, j := range w.jobs() {
			if j.State == store.JobRunning && j.Owner == "w1" && j.Stage == "apply and build patched" {
				victim = j
				return true
			}
		}
		return false
	})
	w.kill("w1")
	t.Logf("killed w1 during job %d (%s)", victim.ID, victim.Title)

	// Its lease runs out (2 s): the dashboard says it is down, and the job
	// is another worker's to run.
	w.waitFor("the dashboard to show w1 down and w2 alive", 20*time.Second, func() bool {
		v := w.home()
		s2 := workerState(v, "w2")
		return workerState(v, "w1") == "down" && (s2 == "busy" || s2 == "idle")
	})
	w.waitFor("the killed job to run elsewhere", 30*time.Second, func() bool {
		j, _ := w.st.Job(context.Background(), victim.ID)
		return j.Crashes == 1 && (j.State == store.JobRunning || j.State == store.JobDone) && j.Owner == "w2"
	})
	// w1 comes back under its name, and takes jobs again.
	startWorker("w1")

	w.waitFor("every job to be done and every reply sent", 120*time.Second, func() bool {
		jobs := w.jobs()
		if len(jobs) != len(posted) {
			return false
		}
		for _, j := range jobs {
			if j.State != store.JobDone {
				return false
			}
		}
		ms, _ := w.st.OutboxIn(context.Background(), store.Sent)
		if len(ms) != len(posted) {
			return false
		}
		// A worker's run reaches the coordinator's runs directory when the
		// coordinator collects it, after the job is done and its reply
		// queued: wait for that too.
		for _, j := range jobs {
			if _, err := os.Stat(filepath.Join(w.state, "runs", fmt.Sprintf("job-%d", j.ID), "run.json")); err != nil {
				return false
			}
		}
		return true
	})
	ctx := context.Background()
	sent, _ := w.st.OutboxIn(ctx, store.Sent)
	w.waitFor("Postfix to deliver every copy", 30*time.Second, func() bool {
		copies, _ := w.delivered()
		want := 0
		for _, m := range sent {
			want += len(m.Recipients)
		}
		got := 0
		for _, n := range copies {
			got += n
		}
		return got >= want
	})

	ranOn := map[string]int{}
	for _, j := range w.jobs() {
		ranOn[j.Owner]++
		wantAttempts, wantCrashes := 1, 0
		if j.ID == victim.ID {
			wantAttempts, wantCrashes = 2, 1
		}
		if j.Attempts != wantAttempts || j.Crashes != wantCrashes || j.Blame != "" {
			t.Errorf("job %d: %d attempts, %d crashes, blame %q; want %d, %d, none", j.ID, j.Attempts, j.Crashes, j.Blame,
				wantAttempts, wantCrashes)
		}
		// The run reached the coordinator, the reply in it is the one sent.
		kept, err := os.ReadFile(filepath.Join(w.state, "runs", fmt.Sprintf("job-%d", j.ID), "reply.eml"))
		if err != nil {
			t.Errorf("job %d's run is not in the coordinator's runs directory: %v", j.ID, err)
			continue
		}
		if _, err := os.Stat(filepath.Join(w.state, "runs", fmt.Sprintf("job-%d", j.ID), "run.json")); err != nil {
			t.Errorf("job %d's run has no run.json: %v", j.ID, err)
		}
		if !bytes.Contains(kept, []byte(jobReplyID(Config{Reply: reports.ReplyOptions{From: "bot@patchbot.test"}}, j))) {
			t.Errorf("job %d's reply.eml does not carry the job's Message-ID", j.ID)
		}
	}
	if ranOn["w1"] == 0 || ranOn["w2"] == 0 || ranOn["w1"]+ranOn["w2"] != len(posted) {
		t.Errorf("jobs ran on %v; want them spread over w1 and w2", ranOn)
	}
	copies, perRcpt := w.delivered()
	if len(copies) != len(posted) {
		t.Errorf("%d replies delivered, want %d", len(copies), len(posted))
	}
	for _, m := range sent {
		if copies[m.MessageID] != len(m.Recipients) {
			t.Errorf("reply %s: %d copies for %d recipients", m.MessageID, copies[m.MessageID], len(m.Recipients))
		}
	}
	for k, n := range perRcpt {
		if n != 1 {
			t.Errorf("reply and recipient %s: %d copies, want 1", k, n)
		}
	}
	// Each worker built in its own cache, and only there.
	for name, dir := range cacheOf {
		b, _ := os.ReadFile(filepath.Join(dir, "builds.log"))
		if n := strings.Count(string(b), "patched\n"); n < ranOn[name] {
			t.Errorf("%s's cache saw %d patched builds for %d jobs", name, n, ranOn[name])
		}
	}
	// The dashboard shows both workers, the fleet's results and no job left.
	v := w.home()
	if workerState(v, "w1") == "" || workerState(v, "w2") == "" {
		t.Errorf("the dashboard's workers: %+v", v.Workers)
	}
	if len(v.Running)+len(v.Queued)+len(v.Waiting)+len(v.Parked) != 0 || v.Runs != len(posted) {
		t.Errorf("the dashboard after the fleet's work: %d running, %d queued, %d runs", len(v.Running), len(v.Queued), v.Runs)
	}
	resp, err := http.Get("http://" + w.http + "/")
	if err == nil {
		page, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		for _, want := range []string{"<td>w1</td>", "<td>w2</td>"} {
			if !bytes.Contains(page, []byte(want)) {
				t.Errorf("the dashboard's page lacks %s", want)
			}
		}
	}
}

// One worker on this host runs the seed series for real: the base kernel
// from the cache, the patched build in the sandbox, both kernels booted
// in QEMU (TCG here), the suite's rounds interleaved. Its results reach
// the coordinator through the database and its reply goes out once.
// Heavy: run it under the shared lock.
func TestFleetRealKernel(t *testing.T) {
	testenv.NeedsKernel(t)
	testenv.NeedsVM(t)
	testenv.Root(t) // Postfix, mounts in the build sandbox
	testenv.Tools(t, "mksquashfs", "postfix")
	// One round a side: the point is that a real measurement travels from
	// the worker to the coordinator and out; judging it is the end-to-end
	// test's, which measures the seed change in VMs too.
	w := newFleetWorld(t, 1, "{local_worker: false, lease: 30s, poll: 500ms}",
		"vm: {backend: qemu, cpus: 2, mem_mib: 1024}\nsuites: {profile: quick, runs: 1}\n")
	id := w.post(0, 0, seedPatch(t))
	cache := os.Getenv("PATCHBOT_CACHE")
	if cache == "" {
		cache = "/var/cache/patchbot"
	}
	w.start("coordinator", "coordinator")
	start := time.Now()
	w.start("kvm-less", "real-worker", "PATCHBOT_CACHE="+cache)
	w.waitFor("the job to be done and its reply sent", 25*time.Minute, func() bool {
		jobs := w.jobs()
		if len(jobs) != 1 || jobs[0].State == store.JobFailed || jobs[0].State == store.JobParked {
			if len(jobs) == 1 {
				w.t.Fatalf("job %s: %s", jobs[0].State, jobs[0].Error)
			}
			return false
		}
		ms, _ := w.st.OutboxIn(context.Background(), store.Sent)
		return jobs[0].State == store.JobDone && len(ms) == 1
	})
	t.Logf("patch to reply in %s", time.Since(start).Round(time.Second))
	j := w.jobs()[0]
	if j.Owner != "kvm-less" || j.Attempts != 1 || j.Blame != "" {
		t.Errorf("job = owner %s, %d attempts, blame %q, error %q", j.Owner, j.Attempts, j.Blame, j.Error)
	}
	sent, _ := w.st.OutboxIn(context.Background(), store.Sent)
	w.waitFor("Postfix to deliver every copy", time.Minute, func() bool {
		copies, _ := w.delivered()
		return copies[sent[0].MessageID] >= len(sent[0].Recipients)
	})
	copies, perRcpt := w.delivered()
	if len(copies) != 1 || copies[sent[0].MessageID] != len(sent[0].Recipients) {
		t.Errorf("delivered %v, want one reply to each of %v", copies, sent[0].Recipients)
	}
	for k, n := range perRcpt {
		if n != 1 {
			t.Errorf("%s: %d copies", k, n)
		}
	}
	reply := string(sent[0].Raw)
	for _, want := range []string{"In-Reply-To: <" + id + ">", "sched_wakeup", "TCG"} {
		if !strings.Contains(reply, want) {
			t.Errorf("the reply lacks %q:\n%s", want, reply)
		}
	}
	// The outbox may send the reply before the coordinator's next poll
	// collects the run the worker stored with it.
	run := filepath.Join(w.state, "runs", fmt.Sprintf("job-%d", j.ID))
	w.waitFor("the coordinator to collect the run", time.Minute, func() bool {
		_, err := os.Stat(filepath.Join(run, "run.json"))
		return err == nil
	})
	for _, f := range []string{"run.json", "base.json", "patched.json", "build-patched.log", "reply.eml", "series.mbox"} {
		if _, err := os.Stat(filepath.Join(run, f)); err != nil {
			t.Errorf("the coordinator's run lacks %s: %v", f, err)
		}
	}
	if v := w.home(); workerState(v, "kvm-less") != "idle" || v.Runs != 1 {
		t.Errorf("the dashboard: workers %+v, %d runs", v.Workers, v.Runs)
	}
}
