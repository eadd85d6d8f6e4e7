package main

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/patchbot/patchbot/internal/testenv"
	"github.com/patchbot/patchbot/store"
)

// hostileSubject moves a terminal every way a subject can: a window title
// (OSC … BEL), a cleared screen and colours (CSI), an 8-bit CSI (U+009B),
// a DEL, and a carriage return that would let the rest overwrite the line.
const hostileSubject = "[PATCH] squashfs: fix \x1b]0;pwned\x07title \x1b[2J\x1b[31mred \u009b1mbold \x7fdel \r overwritten"

// hostileMbox is one patch whose subject and diff carry those sequences.
const hostileMbox = "From dev@example.org Mon Sep 17 00:00:00 2001\n" +
	"From: Evil <dev@example.org>\nTo: list@example.org\nSubject: " + hostileSubject + "\n" +
	"Date: Fri, 24 Jul 2026 12:05:56 -0700\nMessage-ID: <hostile-1@example.org>\nMIME-Version: 1.0\n" +
	"Content-Type: text/plain; charset=UTF-8\nContent-Transfer-Encoding: 8bit\n\nA patch.\n\n---\n" +
	" fs/squashfs/cache.c | 2 +-\n 1 file changed, 1 insertion(+), 1 deletion(-)\n\n" +
	"diff --git a/fs/squashfs/cache.c b/fs/squashfs/cache.c\n--- a/fs/squashfs/cache.c\n+++ b/fs/squashfs/cache.c\n" +
	"@@ -1,3 +1,3 @@\n line one \x1b[2J\n-line two\n+line two \x1b]0;owned\x07\n line three\n"

// rawControls counts what a terminal would act on: C0 controls but tab
// and newline, DEL, and C1 controls.
func rawControls(s string) int {
	n := 0
	for _, r := range s {
		if (r < 0x20 && r != '\t' && r != '\n') || r == 0x7f || (r >= 0x80 && r <= 0x9f) {
			n++
		}
	}
	return n
}

// The built binary, given a hostile mbox, prints no raw control character
// in any field a stranger controls, whether its output is a terminal or a
// pipe (a listing piped to less -R or kept in a file reaches a terminal
// too): series (text and JSON), build, run's progress and reply, jobs and
// outbox. JSON stays JSON that reads back the same subject; an mbox
// written for git am (-o -) stays byte for byte.
func TestBinaryEscapesStrangersText(t *testing.T) {
	testenv.Tool(t, "git")
	bin := buildBinary(t)
	dir := t.TempDir()
	mbox := filepath.Join(dir, "hostile.mbox")
	writeTestFile(t, mbox, hostileMbox)
	// A tree the patch does not build on: build prints the series and
	// fails at the base's configuration, quickly.
	tree := filepath.Join(dir, "tree")
	os.MkdirAll(filepath.Join(tree, "fs", "squashfs"), 0o755)
	writeTestFile(t, filepath.Join(tree, "fs", "squashfs", "cache.c"), "other\n")
	for _, args := range [][]string{{"init", "-q"}, {"add", "."}, {"-c", "user.email=a@b", "-c", "user.name=a", "commit", "-qm", "init"}} {
		cmd := exec.Command("git", args...)
		cmd.Dir = tree
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
	}
	state := filepath.Join(dir, "state")
	cfg := filepath.Join(dir, "patchbot.yaml")
	writeTestFile(t, cfg, "state_dir: "+state+"\nreply: {from: \"patchbot <bot@example.org>\"}\ndry_run: {build: 0s, round: 0s}\n")
	env := []string{"PATCHBOT_CACHE=" + filepath.Join(dir, "cache")}

	printed := map[string]string{}
	check := func(name string, r result, wantCode int, wantIn string) {
		t.Helper()
		if r.code != wantCode {
			t.Errorf("%s: exit %d, want %d\nstderr: %s", name, r.code, wantCode, r.stderr)
		}
		for what, out := range map[string]string{"stdout": r.stdout, "stderr": r.stderr} {
			if n := rawControls(out); n > 0 {
				t.Errorf("%s: %d raw control characters on %s:\n%q", name, n, what, out)
			}
		}
		if !strings.Contains(r.stdout+r.stderr, wantIn) {
			t.Errorf("%s: the hostile field is not printed (escaped) at all; want %q in\n%s\n%s", name, wantIn, r.stdout, r.stderr)
		}
		printed[name] = r.stdout
	}
	const escaped = `fix \x1b]0;pwned\x07title \x1b[2J\x1b[31mred \u009b1mbold \x7fdel`
	check("series", runBinary(t, bin, env, "series", "--mbox", mbox), 0, escaped)
	js := runBinary(t, bin, env, "series", "--mbox", mbox, "--json")
	check("series --json", js, 0, `\u001b]0;pwned\u0007title`)
	var listed struct {
		Series []struct{ Subject string } `json:"series"`
	}
	if err := json.Unmarshal([]byte(js.stdout), &listed); err != nil || len(listed.Series) != 1 ||
		!strings.Contains(listed.Series[0].Subject, "\x1b]0;pwned\x07title \x1b[2J\x1b[31mred \u009b1mbold \x7fdel") {
		t.Errorf("series --json does not read back as the subject: %+v, %v", listed, err)
	}
	check("build", runBinary(t, bin, env, "build", "--mbox", mbox, "--tree", tree), exitInfra, "series: [PATCH] squashfs: "+escaped)
	check("run (dry)", runBinary(t, bin, env, "run", "--mbox", mbox, "--config", cfg), 0, "squashfs: "+escaped)

	// The jobs and the outbox, as a daemon would have kept them.
	st, err := store.Open(filepath.Join(state, "state.db"))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, _, err := st.AddJob(ctx, store.Job{Dedupe: "x", Trigger: "list", Title: hostileSubject, Request: []byte("{}")}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := st.Enqueue(ctx, store.OutboxMessage{MessageID: "a\x1b]0;pwned\x07\n9\tsent\t1@x", From: "bot@example.org",
		Recipients: []string{"a@b"}, Raw: []byte("x")}); err != nil {
		t.Fatal(err)
	}
	st.Close()
	check("jobs", runBinary(t, bin, env, "jobs", "--state", state), 0, `fix \x1b]0;pwned\x07title`)
	check("outbox", runBinary(t, bin, env, "outbox", "--state", state), 0, `a\x1b]0;pwned\x07\n9\tsent\t1@x`)
	if lines := strings.Count(printed["outbox"], "\n"); lines != 3 { // the header, the run's reply, the forged one
		t.Errorf("outbox printed %d lines, want 3: a Message-ID's newline made a row of its own?\n%s", lines, printed["outbox"])
	}
	check("jobs --json", runBinary(t, bin, env, "jobs", "--state", state, "--json"), 0, `\u001b]0;pwned\u0007title`)

	// Data stays data: the mbox for git am is the patch's own bytes.
	raw := runBinary(t, bin, env, "series", "--mbox", mbox, "-o", "-")
	if raw.code != 0 || !strings.Contains(raw.stdout, "+line two \x1b]0;owned\x07\n") || !utf8.ValidString(raw.stdout) {
		t.Errorf("series -o - into a pipe changed the patch: exit %d\n%q", raw.code, raw.stdout)
	}
}

func writeTestFile(t *testing.T, path, s string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
}
