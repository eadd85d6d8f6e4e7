package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/patchbot/patchbot/internal/testenv"
	"github.com/patchbot/patchbot/reports"
)

// The kernel-trouble corpus (testdata/trouble): patches whose kernels get
// into trouble under the suites' own load, each run through the real
// binary on real kernels (`patchbot run`), on the shared base kernel, in
// one suite, for the fewest rounds that reach the trouble. The reply must
// quote the kernel's report with its trace decoded to the changed code's
// file:line, say in which suite and round, and patchbot run must exit 3.
type troubleCase struct {
	name  string // testdata/trouble/NAME.mbox
	suite string
	runs  int
	// kinds are the report kinds the trouble may come as (a spinning
	// CPU is seen by RCU or by the soft-lockup watchdog, whichever is
	// first, or, when they stay quiet, as a hang the host's samples
	// of the vCPUs place); file is the source file its guilty frame
	// must decode to.
	kinds []string
	file  string
	// fatal: the trouble ends the run (all but a warning, after which
	// the run measures and counts it).
	fatal bool
	// ci: run in the full tier's test; every case runs in
	// BenchmarkTroubleCorpus.
	ci bool
}

var troubleCorpus = []troubleCase{
	{"null-at-mount", "cache-contention", 1, []string{"oops"}, "fs/squashfs/super.c", true, true},
	{"bug-on-load", "cache-contention", 1, []string{"kernel BUG"}, "fs/squashfs/cache.c", true, true},
	{"warn-once-on-load", "cache-contention", 1, []string{"WARNING"}, "fs/squashfs/cache.c", false, false},
	{"soft-lockup-on-load", "cache-contention", 1, []string{"soft lockup", "RCU stall"}, "fs/squashfs/cache.c", true, false},
	{"hung-task-on-load", "cache-contention", 2, []string{"hung task"}, "fs/squashfs/cache.c", true, false},
	{"loop-in-syscall", "locks", 1, []string{"soft lockup", "RCU stall", "hang"}, "fs/locks.c", true, false},
}

// troubleOutcome is one case's run, as measured.
type troubleOutcome struct {
	exit int
	// run is the run's record (run.json); reply what patchbot run
	// printed.
	run   *reports.Run
	reply string
	// seen is when the host saw the kernel's report (its "kernel
	// trouble" log line; zero for a warning), done when patchbot run
	// ended, start when it began.
	start, seen, done time.Time
}

var troubleLogTime = regexp.MustCompile(`^time=(\S+) level=WARN msg="kernel trouble"`)

// runTrouble runs one case through the binary with a state directory of
// its own, the kernels in the shared cache.
func runTrouble(t testing.TB, bin string, c troubleCase) troubleOutcome {
	t.Helper()
	dir := t.TempDir()
	cfg := filepath.Join(dir, "patchbot.yaml")
	if err := os.WriteFile(cfg, []byte(fmt.Sprintf("state_dir: %s\nvm: {backend: qemu, cpus: 2, mem_mib: 1024}\nsuites: {profile: quick}\nreply: {from: \"patchbot <patchbot@patchbot.test>\"}\n",
		filepath.Join(dir, "state"))), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "run", "--config", cfg, "--mbox", filepath.Join("..", "testdata", "trouble", c.name+".mbox"),
		"--suites", c.suite, "--runs", fmt.Sprint(c.runs))
	var stdout, stderr bytes.Buffer
	cmd.Stdout = &stdout
	pr, pw := io.Pipe()
	cmd.Stderr = pw
	var out troubleOutcome
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			line := sc.Text()
			stderr.WriteString(line + "\n")
			if m := troubleLogTime.FindStringSubmatch(line); m != nil && out.seen.IsZero() {
				out.seen = time.Now()
			}
		}
	}()
	out.start = time.Now()
	err := cmd.Run()
	out.done = time.Now()
	pw.Close()
	wg.Wait()
	if ee, ok := err.(*exec.ExitError); ok {
		out.exit = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("%s: %v", c.name, err)
	}
	out.reply = stdout.String()
	runs, _ := filepath.Glob(filepath.Join(dir, "state", "runs", "run-*"))
	if len(runs) != 1 {
		t.Fatalf("%s: %d run directories; stderr:\n%s", c.name, len(runs), stderr.String())
	}
	data, rerr := os.ReadFile(filepath.Join(runs[0], reports.RunFile))
	if rerr != nil {
		t.Fatalf("%s: %v; stderr:\n%s", c.name, rerr, stderr.String())
	}
	out.run = &reports.Run{}
	if err := json.Unmarshal(data, out.run); err != nil {
		t.Fatal(err)
	}
	t.Logf("%s: exit %d in %s; stderr's last lines:\n%s", c.name, out.exit, out.done.Sub(out.start).Round(time.Second), lastLines(stderr.String(), 12))
	return out
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// checkTrouble holds a case's outcome to the goals: exit 3, the kernel's
// report quoted with its trace decoded to the changed file, the suite and
// round named, and for a fatal case a reply within two minutes of the
// report.
func checkTrouble(t testing.TB, c troubleCase, o troubleOutcome) {
	t.Helper()
	if o.exit != 3 {
		t.Errorf("%s: exit %d, want 3", c.name, o.exit)
	}
	prose := strings.Join(strings.Fields(o.reply), " ")
	if !c.fatal {
		var found bool
		for _, w := range o.run.KernelWarnings {
			found = found || w.New() && strings.Contains(w.Where, c.file)
		}
		if !found || !strings.Contains(prose, "Kernel warnings: the patched kernel printed") {
			t.Errorf("%s: no new warning at %s in the run (%+v) or the reply:\n%s", c.name, c.file, o.run.KernelWarnings, o.reply)
		}
		return
	}
	f := o.run.Failure
	if f == nil || f.Trouble == nil {
		t.Fatalf("%s: the run records no kernel trouble (failure %+v):\n%s", c.name, f, o.reply)
	}
	tr := f.Trouble
	kindOK := false
	for _, k := range c.kinds {
		kindOK = kindOK || tr.Kind == k
	}
	if !kindOK || !strings.Contains(tr.Where, c.file+":") {
		t.Errorf("%s: trouble %q (%s) at %q, want one of %v at %s:N", c.name, tr.Title, tr.Kind, tr.Where, c.kinds, c.file)
	}
	if !strings.Contains(prose, tr.When()) || !strings.Contains(o.reply, c.file+":") || !strings.Contains(prose, "clean") {
		t.Errorf("%s: the reply does not say when (%q), where (%s) and what the base did:\n%s", c.name, tr.When(), c.file, o.reply)
	}
	if o.seen.IsZero() {
		t.Errorf("%s: the host never logged the kernel's report", c.name)
	} else if d := o.done.Sub(o.seen); d > 2*time.Minute {
		t.Errorf("%s: the reply came %s after the report, want within 2 minutes", c.name, d.Round(time.Second))
	}
}

// The cheapest cases of the corpus, in the full tier: an oops at mount
// (the suite's preparation) and a BUG_ON under load (its first round).
// The rest run in BenchmarkTroubleCorpus (docs/reports.md has their
// figures): all six take about as long as the rest of the full tier.
func TestTroubleCorpus(t *testing.T) {
	testenv.NeedsKernel(t)
	testenv.NeedsVM(t)
	testenv.Root(t) // mounts in the build sandbox
	testenv.Tools(t, "mksquashfs")
	bin := buildPatchbot(t)
	for _, c := range troubleCorpus {
		if !c.ci {
			continue
		}
		t.Run(c.name, func(t *testing.T) {
			checkTrouble(t, c, runTrouble(t, bin, c))
		})
	}
}

// BenchmarkTroubleCorpus runs every case of the corpus once and reports,
// per case, how long the run took, how long after the host saw the
// kernel's report the reply came (report-to-reply-s), and how far into
// its request the kernel showed it (detect-s: the report's After); it
// fails a case that misses its goals as the test does.
//
//	PATCHBOT_FULL_TIER=1 PATCHBOT_CACHE=/var/cache/patchbot \
//	  go test -run '^$' -bench TroubleCorpus -benchtime 1x -timeout 120m ./e2e/
func BenchmarkTroubleCorpus(b *testing.B) {
	testenv.NeedsKernel(b)
	testenv.NeedsVM(b)
	testenv.Root(b)
	testenv.Tools(b, "mksquashfs")
	bin := buildPatchbot(b)
	for _, c := range troubleCorpus {
		b.Run(c.name, func(b *testing.B) {
			for b.Loop() {
				o := runTrouble(b, bin, c)
				checkTrouble(b, c, o)
				b.ReportMetric(o.done.Sub(o.start).Seconds(), "run-s")
				if !o.seen.IsZero() {
					b.ReportMetric(o.done.Sub(o.seen).Seconds(), "report-to-reply-s")
				}
				if f := o.run.Failure; f != nil && f.Trouble != nil {
					b.ReportMetric(f.Trouble.After, "detect-s")
					b.Logf("%s: %s %s; the reply quotes:\n%s", c.name, f.Trouble.Headline(), f.Trouble.When(),
						strings.Join(f.Trouble.Trace[:min(6, len(f.Trouble.Trace))], "\n"))
				}
			}
		})
	}
}
