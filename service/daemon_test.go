package service

import (
	"context"
	"errors"
	"fmt"

	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/patchbot/patchbot/blame"
	"github.com/patchbot/patchbot/config"
	"github.com/patchbot/patchbot/images"
	"github.com/patchbot/patchbot/mailbox"
	"github.com/patchbot/patchbot/reports"
	"github.com/patchbot/patchbot/store"
	"github.com/patchbot/patchbot/suites"
	"github.com/patchbot/patchbot/suites/invm"
	"github.com/patchbot/patchbot/vmrunner"
)

// fakeBuilder builds nothing: it returns kernels, or the error it is told.
type fakeBuilder struct {
	patchedErr error
	onPatched  func() // called as the patched kernel "builds"
	builds     int
	bzImage    string // directory of the "base" and "patched" kernel files
}

func (f *fakeBuilder) path(name string) string {
	if f.bzImage == "" {
		return "/nonexistent/" + name
	}
	return filepath.Join(f.bzImage, name)
}

func (f *fakeBuilder) Choose(ctx context.Context, w images.Want) (*images.Choice, error) {
	return &images.Choice{Tree: images.DefaultTree, How: images.ByDefault}, nil
}

func (f *fakeBuilder) Base(ctx context.Context, base images.Base) (*images.Build, error) {
	return &images.Build{BzImage: f.path("base"), Commit: "1111111111111111111111111111111111111111",
		ConfigHash: "cafe", Compiler: "gcc (Debian 12.2.0-14) 12.2.0"}, nil
}

func (f *fakeBuilder) Patched(ctx context.Context, base *images.Build, patches [][]byte) (*images.Build, error) {
	f.builds++
	if f.onPatched != nil {
		f.onPatched()
	}
	if f.patchedErr != nil {
		return nil, f.patchedErr
	}
	return &images.Build{BzImage: f.path("patched"), Commit: "1111111111111111111111111111111111111111", Head: "2222222222222222222222222222222222222222",
		ConfigHash: base.ConfigHash, Compiler: base.Compiler, Series: len(patches)}, nil
}

// fakeTester returns fixed samples: the patched kernel wakes far fewer
// tasks per release and reads more files a second in the read storm (a
// primary metric: an improvement), with a little noise.
type fakeTester struct {
	err   error
	tests []invm.Spec
	// same measures the patched kernel as the base: no change.
	same bool
}

func (f *fakeTester) Test(ctx context.Context, t invm.Spec) (*invm.Outcome, error) {
	f.tests = append(f.tests, t)
	if f.err != nil {
		return nil, f.err
	}
	mk := func(label string, wpr, fps float64) *suites.Result {
		r := &suites.Result{Suite: t.Suite, Profile: t.Plan.Profile, Kernel: label, Accel: "tcg", CPUs: 4, MemMiB: 1024}
		for i := 0; i < 4; i++ {
			noise := float64(i%3-1) * 0.02
			r.Samples = append(r.Samples,
				suites.Sample{Suite: t.Suite, Workload: "read-storm", Metric: "wakeups_per_release", Unit: "count",
					Round: i + 1, Value: wpr * (1 + noise)},
				suites.Sample{Suite: t.Suite, Workload: "read-storm", Metric: "files_per_s", Unit: "files/s",
					HigherIsBetter: true, Round: i + 1, Value: fps * (1 - noise)})
		}
		return r
	}
	patched := mk("patched", 1.1, 1800)
	if f.same {
		patched = mk("patched", 9.6, 1000)
	}
	return &invm.Outcome{Base: mk("base", 9.6, 1000), Patched: patched,
		Backend: "fake", Accel: "tcg", CPUs: 4, MemMiB: 1024}, nil
}

type testDaemon struct {
	*Daemon
	builder *fakeBuilder
	tester  *fakeTester
	dbPath  string
}

func newTestDaemon(t *testing.T, dir string) *testDaemon {
	t.Helper()
	cfg := config.Default()
	cfg.StateDir = dir
	cfg.Commands.Allow = []string{"maintainer@example.org"}
	cfg.Commands.AuthservIDs = []string{testAuthserv}
	// The sources the tests feed: three bound to the list (so their mail
	// is list mail), "mail" and "inbox" not.
	for _, name := range []string{"list", "lore", "imap"} {
		cfg.Sources = append(cfg.Sources, mailbox.SourceConfig{Name: name, Mbox: "/nonexistent/" + name, List: "linux-fsdevel@vger.kernel.org"})
	}
	dbPath := filepath.Join(dir, "state.db")
	st, err := store.Open(dbPath)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	b, te := &fakeBuilder{}, &fakeTester{}
	d := &Daemon{Config: cfg, Store: st, Pipeline: &Pipeline{Builder: b, Tester: te, Reply: cfg.Reply},
		Verifier: &mailbox.Verifier{LookupTXT: testKeys.LookupTXT, AuthservIDs: cfg.Commands.AuthservIDs}}
	return &testDaemon{Daemon: d, builder: b, tester: te, dbPath: dbPath}
}

// testAuthserv is the receiving server the test daemon trusts.
const testAuthserv = "mx.patchbot.test"

// listID is the List-Id that vger puts on linux-fsdevel mail. It proves
// nothing: the mail is list mail because its source is bound to the list.
const listID = "List-Id: <linux-fsdevel.vger.kernel.org>\n"

// ingestFile feeds every mail of an mbox to the daemon as a source would,
// as list mail: each gets the List-Id that the list's server adds.
func (d *testDaemon) ingestFile(t *testing.T, source, path string) {
	t.Helper()
	d.ingestAs(t, source, path, listID)
}

// ingestAs feeds an mbox's mail with header lines prepended, as the
// servers on the way would (List-Id, Authentication-Results).
func (d *testDaemon) ingestAs(t *testing.T, source, path, header string) {
	t.Helper()
	src := &mailbox.Mbox{Path: path}
	ctx := context.Background()
	cur, _ := d.Store.Cursor(ctx, source)
	if _, err := src.Poll(ctx, cur, func(m *mailbox.Message, cur string) error {
		m, err := mailbox.ParseBytes(testKeys.sign(t, append([]byte(header), m.Raw...)))
		if err != nil {
			t.Fatal(err)
		}
		return d.Ingest(ctx, source, m, cur)
	}); err != nil {
		t.Fatal(err)
	}
}

// ingestRaw feeds one mail, signed where dkimPass says.
func (d *testDaemon) ingestRaw(t *testing.T, source, raw string) {
	t.Helper()
	m, err := mailbox.ParseBytes(testKeys.sign(t, []byte(raw)))
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Ingest(context.Background(), source, m, m.MessageID); err != nil {
		t.Fatal(err)
	}
}

// dkimPass marks a mail to be signed with domain's key (a real DKIM
// signature, made by the ingest helpers; testKeys serves the key).
func dkimPass(domain string) string { return signAs + domain + "\n" }

func (d *testDaemon) outbox(t *testing.T) []store.OutboxMessage {
	t.Helper()
	msgs, err := d.Store.OutboxIn(context.Background(), store.Queued)
	if err != nil {
		t.Fatal(err)
	}
	return msgs
}

func TestDaemonSeedSeriesOneJobOneReply(t *testing.T) {
	ctx := context.Background()
	d := newTestDaemon(t, t.TempDir())
	d.ingestFile(t, "list", "../testdata/mbox/squashfs-thundering-herd.mbox")
	jobs, _ := d.Store.Jobs(ctx)
	if len(jobs) != 1 {
		t.Fatalf("jobs = %d, want 1 (the patch; the ping and the review are not patches)", len(jobs))
	}
	if ran, err := d.RunOnce(ctx); !ran || err != nil {
		t.Fatalf("RunOnce = %v, %v", ran, err)
	}
	if ran, _ := d.RunOnce(ctx); ran {
		t.Error("a second job ran")
	}
	j, _ := d.Store.Job(ctx, jobs[0].ID)
	if j.State != store.JobDone || j.Blame != "" {
		t.Fatalf("job = %+v", j)
	}
	if len(d.tester.tests) != 1 || d.tester.tests[0].Suite != "cache-contention" {
		t.Errorf("suites run = %+v, want cache-contention chosen by fs/squashfs/cache.c", d.tester.tests)
	}
	out := d.outbox(t)
	if len(out) != 1 {
		t.Fatalf("outbox = %d, want 1", len(out))
	}
	raw := string(out[0].Raw)
	for _, want := range []string{
		"In-Reply-To: <20260724190556.1950693-1-usama.arif@linux.dev>",
		"Subject: Re: [PATCH] squashfs: avoid thundering-herd cache wakeups",
		"wakeups_per_release",
	} {
		if !strings.Contains(raw, want) {
			t.Errorf("reply lacks %q:\n%s", want, raw)
		}
	}
	if _, err := os.Stat(filepath.Join(j.RunDir, "run.json")); err != nil {
		t.Errorf("run directory: %v", err)
	}
	// The run directory keeps the very mail the outbox holds.
	if kept, err := os.ReadFile(filepath.Join(j.RunDir, "reply.eml")); err != nil || string(kept) != raw {
		t.Errorf("run directory's reply.eml differs from the outbox's mail (err %v)", err)
	}
	// The run directory's series.mbox is what the reply's commands rerun.
	var kept []*mailbox.Message
	if _, err := (&mailbox.Mbox{Path: filepath.Join(j.RunDir, "series.mbox")}).Poll(ctx, "",
		func(m *mailbox.Message, _ string) error { kept = append(kept, m); return nil }); err != nil {
		t.Fatal(err)
	}
	if ss := mailbox.Assemble(kept); len(ss) != 1 || len(ss[0].Patches) != 1 ||
		ss[0].Patches[0].MessageID != "20260724190556.1950693-1-usama.arif@linux.dev" {
		t.Errorf("series.mbox does not hold the seed patch: %d mails", len(kept))
	}

	// The same mail again (a restarted source re-reading from scratch):
	// no new job.
	d.Store.SaveMessage(ctx, "list", "", "", "", nil)
	d.ingestFile(t, "list", "../testdata/mbox/squashfs-thundering-herd.mbox")
	if jobs, _ := d.Store.Jobs(ctx); len(jobs) != 1 {
		t.Errorf("jobs after reading the list again = %d, want 1", len(jobs))
	}
}

func TestDaemonCrashAfterReplySendsOnce(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	d := newTestDaemon(t, dir)
	d.ingestFile(t, "list", "../testdata/mbox/squashfs-thundering-herd.mbox")
	d.RunOnce(ctx)
	// Simulate a kill -9 after the reply was queued but before the job was
	// marked done: the job is running again in the store.
	jobs, _ := d.Store.Jobs(ctx)
	j := jobs[0]
	j.State = store.JobRunning
	d.Store.UpdateJob(ctx, j)
	d.Store.Close()

	d2 := newTestDaemon(t, dir)
	d2.defaults()
	if re, _, _ := d2.Store.RecoverJobs(ctx, d2.Worker.Name, 2); len(re) != 1 {
		t.Fatalf("requeued %d jobs, want 1", len(re))
	}
	if ran, _ := d2.RunOnce(ctx); !ran {
		t.Fatal("the interrupted job did not run again")
	}
	if out := d2.outbox(t); len(out) != 1 {
		t.Errorf("outbox after the re-run = %d, want still 1", len(out))
	}
}

func TestDaemonPatchFailureIsAnswered(t *testing.T) {
	ctx := context.Background()
	d := newTestDaemon(t, t.TempDir())
	d.builder.patchedErr = &images.BuildError{Lines: []string{
		"fs/fuse/dev.c:1240:17: error: 'expires' undeclared (first use in this function)"}}
	d.ingestFile(t, "list", "../testdata/mbox/fuse-waitq-rfc.mbox")
	if ran, _ := d.RunOnce(ctx); !ran {
		t.Fatal("no job for the FUSE RFC")
	}
	jobs, _ := d.Store.Jobs(ctx)
	if jobs[0].State != store.JobDone || jobs[0].Blame != blame.Patch {
		t.Errorf("job = %+v, want done with the patch to blame", jobs[0])
	}
	out := d.outbox(t)
	if len(out) != 1 || !strings.Contains(string(out[0].Raw), "'expires' undeclared") {
		t.Fatalf("reply does not quote the compiler error: %d mails", len(out))
	}
	if len(d.tester.tests) != 0 {
		t.Error("a kernel that does not build was tested")
	}
}

func TestDaemonInfraFailureIsRetriedNotMailed(t *testing.T) {
	ctx := context.Background()
	d := newTestDaemon(t, t.TempDir())
	d.tester.err = &vmrunner.InfraError{Op: "starting QEMU", Err: errors.New("qemu-system-x86_64: not found")}
	d.ingestFile(t, "list", "../testdata/mbox/squashfs-thundering-herd.mbox")
	d.RunOnce(ctx)
	jobs, _ := d.Store.Jobs(ctx)
	j := jobs[0]
	if j.State != store.JobQueued || j.Blame != blame.Infra || !j.NotBefore.After(j.Updated.Add(-1)) {
		t.Errorf("job = %+v, want queued again, blamed on the infrastructure, with a backoff", j)
	}
	if ran, _ := d.RunOnce(ctx); ran {
		t.Error("the job ran again before its backoff")
	}
	if out := d.outbox(t); len(out) != 0 {
		t.Errorf("an infrastructure failure was mailed: %d mails", len(out))
	}
}

// A base kernel that panics at boot is patchbot's problem, not the
// author's: nothing is mailed and the job is retried as the
// infrastructure's. The panic comes from the fake VM backend through the
// real A/B driver, so the blame travels by type from vmrunner up.
func TestDaemonBaseKernelPanicIsRetriedNotMailed(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	d := newTestDaemon(t, dir)
	for _, f := range []string{"base", "patched"} {
		os.WriteFile(filepath.Join(dir, f), []byte("not a kernel"), 0o644)
	}
	d.builder.bzImage = dir
	d.Pipeline.Tester = &invm.Tester{VM: invm.VMConfig{Backend: "fake"}, BaseCmdline: "fake.panic"}
	d.ingestFile(t, "list", "../testdata/mbox/squashfs-thundering-herd.mbox")
	if ran, _ := d.RunOnce(ctx); !ran {
		t.Fatal("no job ran")
	}
	jobs, _ := d.Store.Jobs(ctx)
	j := jobs[0]
	if j.State != store.JobQueued || j.Blame != blame.Infra || !strings.Contains(j.Error, "Kernel panic") {
		t.Errorf("job = state %s, blame %q, error %q; want queued again, the infrastructure's, with the panic", j.State, j.Blame, j.Error)
	}
	if out := d.outbox(t); len(out) != 0 {
		t.Errorf("a base kernel's panic was mailed to the author: %d mails", len(out))
	}
	// The same panic on the patched kernel is the patch's, and answered.
	d.Pipeline.Tester = &invm.Tester{VM: invm.VMConfig{Backend: "fake"}, PatchedCmdline: "fake.panic"}
	j.NotBefore = time.Now().Add(-time.Minute)
	d.Store.UpdateJob(ctx, j)
	if ran, _ := d.RunOnce(ctx); !ran {
		t.Fatal("the retry did not run")
	}
	out := d.outbox(t)
	if len(out) != 1 || !strings.Contains(string(out[0].Raw), "does not boot") {
		t.Fatalf("the patched kernel's panic was not answered: %d mails", len(out))
	}
}

func TestDaemonEmailCommands(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	d := newTestDaemon(t, dir)
	d.ingestFile(t, "list", "../testdata/mbox/squashfs-thundering-herd.mbox")
	d.RunOnce(ctx)

	cmd := func(id, from, line string) string {
		path := filepath.Join(dir, id+".mbox")
		auth := ""
		if strings.Contains(from, "maintainer@") {
			auth = dkimPass("example.org")
		}
		os.WriteFile(path, []byte(fmt.Sprintf(`From x Mon Aug  3 12:00:00 2026
%sFrom: %s
To: linux-fsdevel@vger.kernel.org
Subject: Re: [PATCH] squashfs: avoid thundering-herd cache wakeups
Date: Mon, 3 Aug 2026 12:00:00 +0100
Message-ID: <%s@example.org>
In-Reply-To: <20260724190556.1950693-1-usama.arif@linux.dev>
References: <20260724190556.1950693-1-usama.arif@linux.dev>

> some quoted text
> #patchbot test locks
%s

`, auth, from, id, line)), 0o644)
		return path
	}
	d.ingestFile(t, "cmd1", cmd("cmd1", "Maintainer <maintainer@example.org>", "#patchbot test cache-contention profile=quick"))
	d.ingestFile(t, "cmd2", cmd("cmd2", "Stranger <stranger@example.net>", "#patchbot test"))
	d.ingestFile(t, "cmd3", cmd("cmd3", "Maintainer <maintainer@example.org>", "#patchbot help"))
	jobs, _ := d.Store.Jobs(ctx)
	if len(jobs) != 2 || jobs[1].Trigger != "command" {
		t.Fatalf("jobs = %d, want the list's and the maintainer's command", len(jobs))
	}
	if ran, _ := d.RunOnce(ctx); !ran {
		t.Fatal("command job did not run")
	}
	out := d.outbox(t)
	var replyToCmd, refusal, help string
	for _, m := range out {
		raw := string(m.Raw)
		switch {
		case strings.Contains(raw, "In-Reply-To: <cmd1@example.org>"):
			replyToCmd = raw
		case strings.Join(m.Recipients, " ") == "stranger@example.net":
			refusal = raw
		case strings.Contains(raw, "In-Reply-To: <cmd3@example.org>"):
			help = raw
		}
	}
	if !strings.Contains(replyToCmd, "> #patchbot test cache-contention profile=quick") {
		t.Errorf("the command's reply does not quote it:\n%s", replyToCmd)
	}
	// An address no signature proves gets a fixed answer, nothing of the
	// mail in it.
	if !strings.Contains(refusal, "patchbot did not act on a command") || strings.Contains(refusal, "cmd2@example.org") ||
		strings.Contains(refusal, "#patchbot test") || strings.Contains(refusal, "squashfs") {
		t.Errorf("the stranger's command was not answered with the fixed answer alone:\n%s", refusal)
	}
	if !strings.Contains(help, "#patchbot test [SUITE ...]") {
		t.Errorf("help was not answered:\n%s", help)
	}
}

func TestDaemonAnswersIncompleteSeriesAfterWaiting(t *testing.T) {
	ctx := context.Background()
	d := newTestDaemon(t, t.TempDir())
	d.Config.IncompleteAfter = time.Hour
	// With the default paths the demo series is none of patchbot's
	// business: not a word to its author.
	d.ingestFile(t, "list", "../testdata/mailbox/missing-part.mbox")
	if jobs, _ := d.Store.Jobs(ctx); len(jobs) != 0 {
		t.Fatalf("jobs = %+v for a series that touches no watched path", jobs)
	}
	for _, tc := range []struct {
		name, header string
		want, not    []string
	}{
		// A signed author is answered in the thread.
		{"signed", dkimPass("example.org"),
			[]string{"In-Reply-To: <v1-0@demo.example>", "incomplete", "After waiting an", "hour, patch(es) 2/3 never arrived",
				"Subject: Re: [PATCH 0/3]"}, nil},
		// An author no signature proves may be anyone's name: the answer
		// says nothing the mail said, not even its subject.
		{"unsigned", "",
			[]string{"Subject: " + reports.StrangerSeriesSubject, "incomplete", "After waiting an", "hour, patch(es) 2/3 never arrived"},
			[]string{"In-Reply-To", "v1-0@demo.example", "[PATCH"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := newTestDaemon(t, t.TempDir())
			d.Config.IncompleteAfter = time.Hour
			d.Config.Paths = []string{"fs/demo/"}
			d.ingestAs(t, "list", "../testdata/mailbox/missing-part.mbox", listID+tc.header)
			jobs, _ := d.Store.Jobs(ctx)
			if len(jobs) != 1 || jobs[0].Trigger != "incomplete" {
				t.Fatalf("jobs = %+v, want one waiting incomplete-series job", jobs)
			}
			if ran, _ := d.RunOnce(ctx); ran {
				t.Fatal("the incomplete-series job ran before its wait was over")
			}
			// The wait is over.
			j := jobs[0]
			j.NotBefore = time.Now().Add(-time.Minute)
			d.Store.UpdateJob(ctx, j)
			if ran, _ := d.RunOnce(ctx); !ran {
				t.Fatal("the incomplete-series job did not run after its wait")
			}
			out := d.outbox(t)
			if len(out) != 1 {
				t.Fatalf("outbox = %d mails, want 1", len(out))
			}
			raw := string(out[0].Raw)
			for _, want := range tc.want {
				if !strings.Contains(raw, want) {
					t.Errorf("answer lacks %q:\n%s", want, raw)
				}
			}
			for _, not := range tc.not {
				if strings.Contains(raw, not) {
					t.Errorf("answer holds %q:\n%s", not, raw)
				}
			}
			if d.builder.builds != 0 {
				t.Error("an incomplete series was built")
			}
		})
	}
}

// A list hears findings, not silence: a series seen on the list whose run
// finds no change is answered to nobody (its run is on the dashboard); a
// maintainer who asks for the run gets its "No change", alone; a source
// whose list hears everything gets it in the thread.
func TestNoChangeIsNotMailedToTheList(t *testing.T) {
	ctx := context.Background()
	d := newTestDaemon(t, t.TempDir())
	d.tester.same = true
	d.ingestFile(t, "list", "../testdata/mbox/squashfs-thundering-herd.mbox")
	if ran, _ := d.RunOnce(ctx); !ran {
		t.Fatal("no job ran")
	}
	jobs, _ := d.Store.Jobs(ctx)
	if len(jobs) != 1 || jobs[0].State != store.JobDone {
		t.Fatalf("jobs %+v, want the series' done", jobs)
	}
	if kept, err := os.ReadFile(filepath.Join(jobs[0].RunDir, "reply.eml")); err != nil || !strings.Contains(string(kept), "No change") {
		t.Fatalf("the run's reply.eml (%v) does not say it found nothing:\n%s", err, kept)
	}
	if out := d.outboxAll(t); len(out) != 0 {
		t.Fatalf("a No change was mailed to %v", out[0].Recipients)
	}
	d.ingestRaw(t, "list", reply{id: "ask@example.org", from: "Maintainer <maintainer@example.org>",
		header: listID + dkimPass("example.org"), body: "#patchbot test\n"}.raw())
	if ran, _ := d.RunOnce(ctx); !ran {
		t.Fatal("the maintainer's job did not run")
	}
	out := d.outboxAll(t)
	if len(out) != 1 || strings.Join(out[0].Recipients, " ") != "maintainer@example.org" ||
		!strings.Contains(string(out[0].Raw), "In-Reply-To: <ask@example.org>") {
		t.Fatalf("the asked-for No change went to %d mails, %v; want the maintainer alone", len(out), out)
	}
	// The mail names no one it is not sent to.
	if raw := string(out[0].Raw); strings.Contains(raw, "vger.kernel.org") || strings.Contains(raw, "\r\nCc:") {
		t.Errorf("the maintainer's No change names the thread's lists:\n%s", raw[:strings.Index(raw, "\r\n\r\n")])
	}

	// The list of a source that hears everything hears the No change.
	d = newTestDaemon(t, t.TempDir())
	d.tester.same = true
	d.Config.Sources[0].ListHears = mailbox.ListHearsEverything
	d.ingestFile(t, "list", "../testdata/mbox/squashfs-thundering-herd.mbox")
	if ran, _ := d.RunOnce(ctx); !ran {
		t.Fatal("no job ran")
	}
	out = d.outboxAll(t)
	if len(out) != 1 || !strings.Contains(strings.Join(out[0].Recipients, " "), "linux-fsdevel@vger.kernel.org") {
		t.Fatalf("with list_hears: everything, %d mails (%v); want the No change in the thread", len(out), out)
	}
}
