package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/patchbot/patchbot/mailbox/sender/smtptest"
	"github.com/patchbot/patchbot/store"
)

const replyTestRuns = "../../reports/testdata/runs"

func TestCompareCommand(t *testing.T) {
	dir := filepath.Join(replyTestRuns, "squashfs-improvement")
	var out bytes.Buffer
	if err := runCompare([]string{filepath.Join(dir, "base.json"), filepath.Join(dir, "patched.json")}, &out); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"Improvement: the patch", "%stddev", "wakeups_per_release (count)"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("compare output lacks %q:\n%s", want, out.String())
		}
	}
	out.Reset()
	if err := runCompare([]string{filepath.Join(dir, "base.json"), "--json", filepath.Join(dir, "patched.json")}, &out); err != nil {
		t.Fatal(err)
	}
	var c struct {
		Rows []struct {
			Metric      string
			Significant bool
		}
	}
	if err := json.Unmarshal(out.Bytes(), &c); err != nil || len(c.Rows) != 16 {
		t.Fatalf("--json: %d rows, %v", len(c.Rows), err)
	}
	for _, bad := range [][]string{{"one.json"}, {"missing.json", "missing2.json"}, {"a", "b", "--test", "nonsense"}} {
		if err := runCompare(bad, &out); err == nil {
			t.Errorf("compare %v succeeded", bad)
		}
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

func TestReplyCommandQueuesAndSendsOnlyWhenEnabled(t *testing.T) {
	ctx := context.Background()
	fake := smtptest.StartFake(t, smtptest.FakeOptions{})
	tmp := t.TempDir()
	db := filepath.Join(tmp, "patchbot.db")
	dir := copyReplyTestRun(t, "fuse-rfc-build-failure")

	// Default: printed, kept in the run directory, queued, not sent.
	var out bytes.Buffer
	if err := runReply(ctx, []string{dir, "--outbox", db}, &out); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "'expires' undeclared") {
		t.Errorf("printed reply lacks the compiler error:\n%s", out.String())
	}
	if _, err := os.Stat(filepath.Join(dir, "reply.eml")); err != nil {
		t.Error("reply.eml not kept in the run directory")
	}
	if n := len(fake.Messages()); n != 0 {
		t.Fatalf("%d messages sent with sending off", n)
	}

	// Switched on in the config: the queued reply goes out, once.
	cfg := filepath.Join(tmp, "patchbot.yaml")
	os.WriteFile(cfg, []byte("reply:\n  from: patchbot <bot@patchbot.test>\noutbox: "+db+
		"\nsender:\n  enabled: true\n  addr: "+fake.Addr+"\n  from: bot@patchbot.test\n"), 0o644)
	if err := runReply(ctx, []string{dir, "--config", cfg}, &out); err != nil {
		t.Fatal(err)
	}
	if n := len(fake.Messages()); n != 2 {
		// The first render had another From, so another Message-ID: both
		// replies were queued, both go out.
		t.Fatalf("%d messages sent, want 2", n)
	}
	if err := runReply(ctx, []string{dir, "--config", cfg}, &out); err != nil {
		t.Fatal(err)
	}
	if n := len(fake.Messages()); n != 2 {
		t.Errorf("rendering the same reply again sent it again: %d messages", n)
	}
	st, err := store.Open(db)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if p, _ := st.Pending(ctx); len(p) != 0 {
		t.Errorf("%d replies still pending", len(p))
	}

	bad := filepath.Join(tmp, "bad.yaml")
	os.WriteFile(bad, []byte("sendr:\n  enabled: true\n"), 0o644)
	if err := runReply(ctx, []string{dir, "--config", bad}, &out); err == nil {
		t.Error("a misspelt config key was accepted")
	}
}
