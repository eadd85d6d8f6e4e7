package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/patchbot/patchbot/mailbox/sender/smtptest"
	"github.com/patchbot/patchbot/store"
)

const replyTestRuns = "../../reports/testdata/runs"

func TestCompareCommand(t *testing.T) {
	dir := filepath.Join(replyTestRuns, "squashfs-improvement")
	code, out, errOut := run(t, "compare", filepath.Join(dir, "base.json"), filepath.Join(dir, "patched.json"))
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	for _, want := range []string{"Improvement: the patch", "%stddev", "wakeups_per_release (count)"} {
		if !strings.Contains(out, want) {
			t.Errorf("compare output lacks %q:\n%s", want, out)
		}
	}
	_, out, _ = run(t, "compare", filepath.Join(dir, "base.json"), "--json", filepath.Join(dir, "patched.json"))
	var c struct {
		Schema     int `json:"schema"`
		Comparison struct {
			Test string
			Rows []struct {
				Metric      string
				Significant bool
			}
		} `json:"comparison"`
	}
	if err := json.Unmarshal([]byte(out), &c); err != nil || c.Schema != 1 || len(c.Comparison.Rows) != 16 {
		t.Fatalf("--json: schema %d, %d rows, %v", c.Schema, len(c.Comparison.Rows), err)
	}
	// By default compare judges as the pipeline does: on the log scale.
	if c.Comparison.Test != "Welch's t-test on log values" {
		t.Errorf("default test %q, want the pipeline's log-welch", c.Comparison.Test)
	}
	for _, bad := range [][]string{{"one.json"}, {"a", "b", "--test", "nonsense"}, {"a", "b", "--alpha", "2"}} {
		if code, _, _ := run(t, append([]string{"compare"}, bad...)...); code != exitUsage {
			t.Errorf("compare %v: exit %d, want 2", bad, code)
		}
	}
	if code, _, _ := run(t, "compare", "missing.json", "missing2.json"); code != exitInfra {
		t.Errorf("compare of missing files: exit %d, want 1", code)
	}
}

func copyReplyTestRun(t *testing.T, name string) string {
	dst := filepath.Join(t.TempDir(), name)
	os.MkdirAll(dst, 0o755)
	ents, err := os.ReadDir(filepath.Join(replyTestRuns, name))
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		b, _ := os.ReadFile(filepath.Join(replyTestRuns, name, e.Name()))
		os.WriteFile(filepath.Join(dst, e.Name()), b, 0o644)
	}
	return dst
}

// patchbot reply reads patchbot.yaml, the same file as run and watch, and
// queues in the state directory's database, which the daemon sends from.
func TestReplyCommandQueuesAndSendsOnlyWhenEnabled(t *testing.T) {
	ctx := context.Background()
	fake := smtptest.StartFake(t, smtptest.FakeOptions{})
	tmp := t.TempDir()
	state := filepath.Join(tmp, "state")
	dir := copyReplyTestRun(t, "fuse-rfc-build-failure")

	// Default: printed, kept in the run directory, queued, not sent.
	code, out, errOut := run(t, "reply", dir, "--state", state)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	if !strings.Contains(out, "'expires' undeclared") {
		t.Errorf("printed reply lacks the compiler error:\n%s", out)
	}
	if _, err := os.Stat(filepath.Join(dir, "reply.eml")); err != nil {
		t.Error("reply.eml not kept in the run directory")
	}
	if n := len(fake.Messages()); n != 0 {
		t.Fatalf("%d messages sent with sending off", n)
	}
	if st, err := os.Stat(state); err != nil || st.Mode().Perm() != 0o700 {
		t.Errorf("state directory mode %v (%v), want 0700", st.Mode().Perm(), err)
	}

	// Switched on in the config: the queued reply goes out, once.
	cfg := filepath.Join(tmp, "patchbot.yaml")
	os.WriteFile(cfg, []byte("state_dir: "+state+"\nreply:\n  from: patchbot <bot@patchbot.test>\n"+
		"smtp:\n  enabled: true\n  addr: "+fake.Addr+"\n  from: bot@patchbot.test\n"), 0o644)
	if code, _, errOut := run(t, "reply", dir, "--config", cfg); code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	if n := len(fake.Messages()); n != 2 {
		// The first render had another From, so another Message-ID: both
		// replies were queued, both go out.
		t.Fatalf("%d messages sent, want 2", n)
	}
	if code, _, _ := run(t, "reply", dir, "--config", cfg); code != 0 {
		t.Fatal("second reply failed")
	}
	if n := len(fake.Messages()); n != 2 {
		t.Errorf("rendering the same reply again sent it again: %d messages", n)
	}
	st, err := store.Open(filepath.Join(state, "state.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if p, _ := st.OutboxIn(ctx, store.Queued, store.Sending); len(p) != 0 {
		t.Errorf("%d replies still pending", len(p))
	}

	bad := filepath.Join(tmp, "bad.yaml")
	os.WriteFile(bad, []byte("smpt:\n  enabled: true\n"), 0o644)
	if code, _, errOut := run(t, "reply", dir, "--config", bad); code == 0 || !strings.Contains(errOut, "smpt") {
		t.Errorf("a misspelt config key was accepted: exit %d, %s", code, errOut)
	}
}

// patchbot serve shows a state directory's runs on loopback.
func TestServeShowsTheStateDirectory(t *testing.T) {
	state := t.TempDir()
	runs := filepath.Join(state, "runs")
	os.MkdirAll(runs, 0o700)
	src := "../../web/testdata/runs/squashfs-seed"
	dst := filepath.Join(runs, "run-20261201-100000")
	os.MkdirAll(dst, 0o700)
	ents, _ := os.ReadDir(src)
	for _, e := range ents {
		if b, err := os.ReadFile(filepath.Join(src, e.Name())); err == nil {
			os.WriteFile(filepath.Join(dst, e.Name()), b, 0o600)
		}
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan int)
	go func() {
		var out, errOut bytes.Buffer
		done <- runMain(ctx, []string{"serve", "--state", state, "--http", addr}, &out, &errOut)
	}()
	var body string
	for i := 0; i < 100; i++ {
		resp, err := http.Get("http://" + addr + "/runs/run-20261201-100000/")
		if err == nil {
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			body = string(b)
			if resp.StatusCode != 200 {
				t.Fatalf("run page: %s\n%s", resp.Status, body)
			}
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	cancel()
	if code := <-done; code != 0 {
		t.Errorf("serve exited %d", code)
	}
	if !strings.Contains(body, "squashfs: avoid thundering-herd cache wakeups") || !strings.Contains(body, "wakeups_per_release") {
		t.Errorf("the run page does not show the seed run:\n%.2000s", body)
	}
}
