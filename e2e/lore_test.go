package e2e

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/patchbot/patchbot/internal/testenv"
	"github.com/patchbot/patchbot/mailbox/loretest"
	"github.com/patchbot/patchbot/store"
)

// sharedBin is one build of patchbot for the tests of this file that
// only run it (TestMain removes it).
var sharedBin struct {
	once      sync.Once
	dir, path string
	err       error
}

func sharedPatchbot(t testing.TB) string {
	t.Helper()
	sharedBin.once.Do(func() {
		if sharedBin.dir, sharedBin.err = os.MkdirTemp("", "patchbot-e2e-"); sharedBin.err != nil {
			return
		}
		sharedBin.path = filepath.Join(sharedBin.dir, "patchbot")
		if out, err := exec.Command("go", "build", "-o", sharedBin.path, "../cmd/patchbot").CombinedOutput(); err != nil {
			sharedBin.err = fmt.Errorf("building patchbot: %v\n%s", err, out)
		}
	})
	if sharedBin.err != nil {
		t.Fatal(sharedBin.err)
	}
	return sharedBin.path
}

// loreWorld is patchbot watch, the binary, following a real public-inbox
// over HTTP by its git log, with only the coordinator (no worker: the
// jobs it queues are counted, not run).
type loreWorld struct {
	bin, dir, cfg, state, log string
	srv                       *loretest.Server
}

func newLoreWorld(t testing.TB, poll string) *loreWorld {
	t.Helper()
	testenv.Tools(t, "git")
	w := &loreWorld{srv: loretest.Start(t, "linux-fsdevel", "linux-fsdevel@vger.kernel.org")}
	w.bin = sharedPatchbot(t)
	w.dir = t.TempDir()
	w.state = filepath.Join(w.dir, "state")
	w.cfg = filepath.Join(w.dir, "patchbot.yaml")
	w.log = filepath.Join(w.dir, "watch.log")
	writeFile(t, w.cfg, fmt.Sprintf("state_dir: %s\nfleet: {local_worker: false}\nsources:\n  - name: lore\n    lore: %s\n    poll: %s\n",
		w.state, w.srv.URL(), poll))
	// Every mail the daemon keeps is counted as it is written, in the
	// transaction that writes it: a mail read again after a kill counts
	// twice (the store itself keeps it once, so this is the only way to
	// see it), a write a kill undid not at all.
	if err := os.MkdirAll(w.state, 0o700); err != nil {
		t.Fatal(err)
	}
	st, err := store.Open(filepath.Join(w.state, "state.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if _, err := st.DB().Exec(`CREATE TABLE test_reads (message_id TEXT NOT NULL);
		CREATE TRIGGER test_count BEFORE INSERT ON messages BEGIN INSERT INTO test_reads VALUES (NEW.message_id); END;`); err != nil {
		t.Fatal(err)
	}
	return w
}

// start runs patchbot watch, its output appended to the world's log.
func (w *loreWorld) start() (*exec.Cmd, error) {
	logf, err := os.OpenFile(w.log, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(w.bin, "watch", "--config", w.cfg)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	err = cmd.Start()
	logf.Close()
	return cmd, err
}

func (w *loreWorld) logTail() string {
	data, _ := os.ReadFile(w.log)
	lines := strings.Split(strings.TrimSpace(string(data)), "\n")
	return strings.Join(lines[max(0, len(lines)-30):], "\n")
}

// reads returns how many times each mail was written to the store.
func (w *loreWorld) reads(t testing.TB) map[string]int {
	t.Helper()
	st, err := store.Open(filepath.Join(w.state, "state.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	rows, err := st.DB().Query(`SELECT message_id, count(*) FROM test_reads GROUP BY message_id`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	out := map[string]int{}
	for rows.Next() {
		var id string
		var n int
		if err := rows.Scan(&id, &n); err != nil {
			t.Fatal(err)
		}
		out[id] = n
	}
	return out
}

// gitChildren lists the git processes whose parent is pid, with their
// arguments.
func gitChildren(pid int) []string {
	var out []string
	procs, _ := filepath.Glob("/proc/[0-9]*/stat")
	for _, p := range procs {
		data, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		s := string(data)
		open, end := strings.IndexByte(s, '('), strings.LastIndexByte(s, ')')
		if open < 0 || end < open || s[open+1:end] != "git" {
			continue
		}
		f := strings.Fields(s[end+1:])
		if len(f) < 2 || f[1] != strconv.Itoa(pid) {
			continue
		}
		args, _ := os.ReadFile(filepath.Join(filepath.Dir(p), "cmdline"))
		out = append(out, strings.ReplaceAll(string(args), "\x00", " "))
	}
	return out
}

// processesNaming lists the live processes whose command line holds s:
// not one that is dying (SIGKILL pending, as a git killed along with
// the daemon is while it waits on a busy disk) or dead.
func processesNaming(s string) []string {
	var out []string
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, p := range procs {
		args, err := os.ReadFile(p)
		if err != nil || !bytes.Contains(args, []byte(s)) {
			continue
		}
		status, _ := os.ReadFile(filepath.Join(filepath.Dir(p), "status"))
		stat, _ := os.ReadFile(filepath.Join(filepath.Dir(p), "stat"))
		if dying(string(status)) || exiting(string(stat)) {
			continue
		}
		out = append(out, strings.ReplaceAll(string(args), "\x00", " "))
	}
	return out
}

// dying reads /proc/PID/status: the process is a zombie or has SIGKILL
// pending.
func dying(status string) bool {
	for line := range strings.Lines(status) {
		k, v, _ := strings.Cut(strings.TrimSpace(line), ":")
		v = strings.TrimSpace(v)
		switch k {
		case "State":
			if strings.HasPrefix(v, "Z") || strings.HasPrefix(v, "X") {
				return true
			}
		case "SigPnd", "ShdPnd":
			if mask, err := strconv.ParseUint(v, 16, 64); err == nil && mask&(1<<(syscall.SIGKILL-1)) != 0 {
				return true
			}
		}
	}
	return false
}

// exiting reads /proc/PID/stat: the process has taken its fatal signal
// (PF_SIGNALED) or is on its way out (PF_EXITING). A git killed with the
// daemon is so from when it takes the SIGKILL, which clears the pending
// bit dying looks for, until it has let go of its memory, which empties
// its command line; on a loaded host that can be a while.
func exiting(stat string) bool {
	const pfExiting, pfSignaled = 0x4, 0x400
	i := strings.LastIndex(stat, ")") // past the command, which may hold spaces and parentheses
	if i < 0 {
		return false
	}
	f := strings.Fields(stat[i+1:]) // state, ppid, pgrp, session, tty, tpgid, flags, ...
	if len(f) < 7 {
		return false
	}
	flags, err := strconv.ParseUint(f[6], 10, 64)
	return err == nil && flags&(pfExiting|pfSignaled) != 0
}

func listMailAt(id string, at time.Time) []byte {
	return []byte(fmt.Sprintf("From: Ada Dev <ada@example.org>\nTo: linux-fsdevel@vger.kernel.org\n"+
		"Subject: mail %s\nDate: %s\nMessage-ID: <%s>\n\nbody of %s\n", id, at.Format(time.RFC1123Z), id, id))
}

// TestLoreWatchKill9 (full tier) kills `patchbot watch`, the binary, with
// SIGKILL 20 times while mail arrives in the archive it follows: every
// other time just after it started a git child (a fetch, or the read of
// the new commits), else at a random point of its first 1.5 s. Then it
// runs to the end. Every mail must be kept exactly once (counted by a
// trigger inside the store's transactions), and no git may outlive a
// killed daemon.
func TestLoreWatchKill9(t *testing.T) {
	testenv.Long(t)
	w := newLoreWorld(t, "100ms")
	const kills = 20
	type outcome struct {
		midFetch, midRead int
		orphans           []string
		err               error
	}
	done := make(chan outcome, 1)
	go func() {
		var o outcome
		defer func() { done <- o }()
		for i := 0; i < kills; i++ {
			cmd, err := w.start()
			if err != nil {
				o.err = err
				return
			}
			pid := cmd.Process.Pid
			if i%2 == 0 {
				// Wait for a git child, then kill within 20 ms of seeing it.
				for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); {
					if kids := gitChildren(pid); len(kids) > 0 {
						time.Sleep(time.Duration(rand.IntN(20)) * time.Millisecond)
						if strings.Contains(strings.Join(kids, "\n"), " fetch ") {
							o.midFetch++
						} else {
							o.midRead++
						}
						break
					}
					time.Sleep(time.Millisecond)
				}
			} else {
				time.Sleep(time.Duration(rand.IntN(1500)) * time.Millisecond)
			}
			syscall.Kill(pid, syscall.SIGKILL) // the daemon alone, as the OOM killer would
			cmd.Wait()
			// A git it started dies with it (PR_SET_PDEATHSIG): the kernel
			// signals the children before the parent can be waited for, so
			// by now each is gone, has SIGKILL pending, or is exiting.
			left := processesNaming(filepath.Join(w.state, "lore"))
			if len(left) > 0 {
				// One that took its SIGKILL a moment ago may not show it
				// yet; a git that outlived the daemon is still there.
				time.Sleep(100 * time.Millisecond)
				left = processesNaming(filepath.Join(w.state, "lore"))
			}
			if len(left) > 0 {
				o.orphans = append(o.orphans, left...)
				syscall.Kill(-pid, syscall.SIGKILL)
			}
		}
	}()
	// Mail arrives all the while, 25 at a time.
	var ids []string
	var o outcome
	for batch := 0; ; batch++ {
		var raws [][]byte
		for i := range 25 {
			id := fmt.Sprintf("kill-%d-%d@example.org", batch, i)
			ids = append(ids, id)
			raws = append(raws, listMailAt(id, time.Now()))
		}
		w.srv.DeliverMany(t, raws)
		select {
		case o = <-done:
		default:
			continue
		}
		break
	}
	if o.err != nil {
		t.Fatal(o.err)
	}
	// Then it runs until it has read everything.
	cmd, err := w.start()
	if err != nil {
		t.Fatal(err)
	}
	defer func() { syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL); cmd.Wait() }()
	deadline := time.Now().Add(2 * time.Minute)
	var reads map[string]int
	for {
		reads = w.reads(t)
		n := 0
		for _, id := range ids {
			if reads[id] > 0 {
				n++
			}
		}
		if n == len(ids) || time.Now().After(deadline) {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	syscall.Kill(cmd.Process.Pid, syscall.SIGTERM)
	cmd.Wait()
	lost, dups := 0, 0
	for _, id := range ids {
		switch n := reads[id]; {
		case n == 0:
			lost++
		case n > 1:
			dups += n - 1
		}
	}
	t.Logf("%d kills (%d just after a git fetch started, %d after another git started, the rest at random), %d mails: %d lost, %d duplicated",
		kills, o.midFetch, o.midRead, len(ids), lost, dups)
	if lost != 0 || dups != 0 {
		t.Errorf("%d mails lost, %d duplicated\n%s", lost, dups, w.logTail())
	}
	if o.midFetch == 0 {
		t.Errorf("no kill hit a git fetch")
	}
	if len(o.orphans) > 0 {
		t.Errorf("git outlived the killed daemon: %q", o.orphans)
	}
	// What a killed git left in the mirror (locks, a half pack) never
	// made a later fetch fail.
	if log, _ := os.ReadFile(w.log); bytes.Contains(log, []byte("source failed")) {
		t.Errorf("the source failed after a kill:\n%s", w.logTail())
	}
}

// TestWatchRefusesIgnoredKeys: patchbot watch refuses, at start, a config
// key its source's kind would ignore.
func TestWatchRefusesIgnoredKeys(t *testing.T) {
	bin := sharedPatchbot(t)
	dir := t.TempDir()
	cfg := filepath.Join(dir, "patchbot.yaml")
	writeFile(t, cfg, fmt.Sprintf("state_dir: %s\nsources:\n  - mbox: %s\n    since: 2026-12-01\n", dir, filepath.Join(dir, "list.mbox")))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, bin, "watch", "--config", cfg).CombinedOutput()
	if err == nil || !strings.Contains(string(out), "since: only a lore list") {
		t.Fatalf("watch with since: on an mbox: %v\n%s", err, out)
	}
}

// TestSeriesCLIReadsEveryMail runs patchbot series, the binary, on a
// pipe (/dev/stdin, and <(...) from bash) and on a file written a moment
// ago that does not end with a blank line: every mail is read.
func TestSeriesCLIReadsEveryMail(t *testing.T) {
	bin := sharedPatchbot(t)
	data, err := os.ReadFile("../testdata/mailbox/reroll.mbox")
	if err != nil {
		t.Fatal(err)
	}
	data = bytes.TrimRight(data, "\n")
	fresh := filepath.Join(t.TempDir(), "fresh.mbox")
	writeFile(t, fresh, string(data))
	count := func(out []byte) int { return strings.Count(string(out), `"message_id"`) }
	want := 0
	for _, c := range []struct {
		name string
		cmd  *exec.Cmd
	}{
		{"a file written a moment ago", exec.Command(bin, "series", "--json", "--mbox", fresh)},
		{"/dev/stdin", exec.Command("sh", "-c", `cat "$1" | "$0" series --json --mbox /dev/stdin`, bin, fresh)},
		{"<(...)", exec.Command("bash", "-c", `"$0" series --json --mbox <(cat "$1")`, bin, fresh)},
		{"- (standard input)", exec.Command("sh", "-c", `"$0" series --json --mbox - < "$1"`, bin, fresh)},
	} {
		out, err := c.cmd.Output()
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if want == 0 {
			want = count(out)
		}
		// The last mail of reroll.mbox is v2's patch 3/3: without it v2
		// is incomplete.
		if count(out) != want || !strings.Contains(string(out), `"v2-3@demo.example"`) || !strings.Contains(string(out), `"complete": true`) {
			t.Errorf("%s: %d patches (want %d), last mail lost?\n%s", c.name, count(out), want, out)
		}
	}
	{
		testenv.Tools(t, "git")
		// -o - too: the am mbox of the series.
		out, err := exec.Command("sh", "-c", `cat "$1" | "$0" series --mbox /dev/stdin -o -`, bin, fresh).Output()
		if err != nil || strings.Count(string(out), "\nSubject: [PATCH v2 ") != 3 {
			t.Errorf("series -o - on a pipe: %v\n%s", err, out)
		}
	}
}

// BenchmarkLoreQueueLatency measures, for patchbot watch (the binary)
// following a real public-inbox at poll: 1s, the time from a mail's
// arrival in the archive (the first moment public-inbox-httpd serves it)
// to its series' job in the queue, over a burst of 50 one-patch series
// imported at once. Run it with -benchtime 1x.
func BenchmarkLoreQueueLatency(b *testing.B) {
	w := newLoreWorld(b, "1s")
	cmd, err := w.start()
	if err != nil {
		b.Fatal(err)
	}
	defer func() { syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL); cmd.Wait() }()
	time.Sleep(2 * time.Second) // its start point, on the empty list
	var lat []time.Duration
	b.ResetTimer()
	for n := 0; n < b.N; n++ {
		const series = 50
		var raws [][]byte
		titles := map[string]int{}
		for i := range series {
			title := fmt.Sprintf("squashfs: burst %d-%d", n, i)
			titles["[PATCH] "+title] = i
			raws = append(raws, []byte(fmt.Sprintf("From: Ada Dev <ada@example.org>\nTo: linux-fsdevel@vger.kernel.org\n"+
				"Subject: [PATCH] %s\nDate: %s\nMessage-ID: <lat-%d-%d@example.org>\n\nA change.\n\n"+
				"Signed-off-by: Ada Dev <ada@example.org>\n---\n fs/squashfs/cache.c | 2 +-\n\n"+
				"diff --git a/fs/squashfs/cache.c b/fs/squashfs/cache.c\nindex 1111111..2222222 100644\n"+
				"--- a/fs/squashfs/cache.c\n+++ b/fs/squashfs/cache.c\n@@ -%d,3 +%d,3 @@\n line\n-old\n+new\n line\n-- \n2.39.5\n",
				title, time.Now().Format(time.RFC1123Z), n, i, i+1, i+1)))
		}
		served := w.srv.DeliverManyTimed(b, raws)
		queued := map[int]time.Time{}
		for deadline := time.Now().Add(2 * time.Minute); len(queued) < series && time.Now().Before(deadline); {
			st, err := store.Open(filepath.Join(w.state, "state.db"))
			if err != nil {
				b.Fatal(err)
			}
			jobs, err := st.Jobs(context.Background())
			st.Close()
			if err != nil {
				b.Fatal(err)
			}
			for _, j := range jobs {
				if i, ok := titles[j.Title]; ok && j.Trigger == "list" {
					queued[i] = j.Created
				}
			}
			time.Sleep(100 * time.Millisecond)
		}
		if len(queued) < series {
			b.Fatalf("%d of %d series queued\n%s", len(queued), series, w.logTail())
		}
		for i := range series {
			lat = append(lat, queued[i].Sub(served[i]))
		}
	}
	b.StopTimer()
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2].Milliseconds()), "median-ms")
	b.ReportMetric(float64(lat[len(lat)-1].Milliseconds()), "max-ms")
	b.ReportMetric(float64(lat[0].Milliseconds()), "min-ms")
}
