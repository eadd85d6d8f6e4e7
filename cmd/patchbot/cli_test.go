package main

import (
	"context"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/patchbot/patchbot/store"
)

// Every command follows git's habits: -h describes it and exits 0, help
// CMD says the same, a usage error is one line and exit 2.
func TestEveryCommandHasHelp(t *testing.T) {
	for name := range commands {
		args := append(strings.Fields(name), "-h")
		code, out, errOut := run(t, args...)
		if code != 0 || errOut != "" {
			t.Errorf("%s -h: exit %d, stderr %q", name, code, errOut)
		}
		for _, want := range []string{"usage: patchbot " + strings.Fields(name)[0], "example:\n"} {
			if !strings.Contains(out, want) {
				t.Errorf("%s -h lacks %q:\n%s", name, want, out)
			}
		}
		if strings.Count(out, "\n") < 6 {
			t.Errorf("%s -h is a bare flag list:\n%s", name, out)
		}
		code, out2, _ := run(t, append([]string{"help"}, strings.Fields(name)...)...)
		if code != 0 || out2 != out {
			t.Errorf("help %s: exit %d, differs from -h", name, code)
		}
	}
	for _, args := range [][]string{{"--version"}, {"version"}, {"help"}, {"--help"}} {
		if code, out, _ := run(t, args...); code != 0 || out == "" {
			t.Errorf("%v: exit %d, output %q", args, code, out)
		}
	}
	if _, out, _ := run(t, "--version"); !strings.HasPrefix(out, "patchbot ") {
		t.Errorf("--version: %q", out)
	}
}

func TestUsageErrorsExit2WithOneLine(t *testing.T) {
	const seed = "../../testdata/mbox/squashfs-thundering-herd.mbox"
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{}, "usage: patchbot COMMAND"},
		{[]string{"nosuch"}, `"nosuch" is not a command`},
		{[]string{"series", "--mbox", seed, "junk"}, `unexpected argument "junk"`},
		{[]string{"run", seed}, `unexpected argument`},
		{[]string{"run"}, "give one of --mbox"},
		{[]string{"run", "--mbox", seed, "--maildir", "x"}, "give only one of"},
		{[]string{"run", "--mbox", seed, "--cpus", "-3"}, "--cpus -3: want 1..64"},
		{[]string{"run", "--mbox", seed, "--boot", "uefi"}, `--boot "uefi": want legacy or pvh`},
		{[]string{"run", "--mbox", seed, "--mem", "12"}, "--mem 12"},
		{[]string{"run", "--mbox", seed, "--runs", "0"}, "--runs 0: want 1..100"},
		{[]string{"run", "--mbox", seed, "--suites", "nosuch"}, `no suite "nosuch"`},
		{[]string{"run", "--mbox", seed, "--profile", "nope"}, `no suite has a profile "nope"`},
		{[]string{"run", "--mbox", seed, "--suites", "locks", "--profile", "nope"}, `no profile "nope"`},
		{[]string{"run", "--mbox", seed, "--backend", "xen"}, `--backend "xen"`},
		{[]string{"run", "--imap", "imap://bot:secret@127.0.0.1/INBOX"}, "password in the URL"},
		{[]string{"run", "--mbox", seed, "--nosuchflag"}, "flag provided but not defined: -nosuchflag"},
		{[]string{"build", "--mbox", seed, "--timeout", "0s"}, "--timeout 0s"},
		{[]string{"compare", "a.json"}, "want two result files"},
		{[]string{"model", "check", "--max-states", "-1"}, "--max-states -1: want at least 1"},
		{[]string{"model", "--policy", "nosuch"}, "nosuch"},
		{[]string{"model", "--threads", "0"}, "--threads 0"},
		{[]string{"vm", "boot"}, "--kernel is required"},
		{[]string{"vm", "boot", "--kernel", "/nonexistent", "--cpus", "0"}, "--cpus 0"},
		{[]string{"suite", "run", "--suites", "locks"}, "give exactly one of --local and --kernel"},
		{[]string{"suite", "run", "--suites", "nosuch", "--local"}, `no suite "nosuch"`},
		{[]string{"reply"}, "want one run directory"},
		{[]string{"watch", "extra"}, `unexpected argument "extra"`},
		{[]string{"worker", "extra"}, `unexpected argument "extra"`},
		{[]string{"worker", "--name", "two words"}, `--name "two words"`},
		{[]string{"worker", "--suites", "nosuch"}, `no suite "nosuch"`},
		{[]string{"worker", "--http", "nope"}, `--http "nope": want host:port`},
	} {
		code, out, errOut := run(t, tc.args...)
		if code != exitUsage {
			t.Errorf("%v: exit %d, want 2 (stderr %q)", tc.args, code, errOut)
			continue
		}
		if !strings.Contains(errOut, tc.want) {
			t.Errorf("%v: stderr %q, want it to say %q", tc.args, errOut, tc.want)
		}
		if len(tc.args) > 0 && (strings.Count(errOut, "\n") != 1 || out != "") {
			t.Errorf("%v: want one line on stderr and nothing on stdout, got %q / %q", tc.args, errOut, out)
		}
	}
}

// jobs and outbox show the state database, and put back what was parked.
func TestJobsAndOutboxCommands(t *testing.T) {
	state := t.TempDir()
	code, out, errOut := run(t, "jobs", "--state", state, "--json")
	if code != 0 || !strings.Contains(out, `"jobs": []`) {
		t.Fatalf("jobs on an empty state: exit %d, %s %s", code, out, errOut)
	}
	if code, _, errOut := run(t, "jobs", "--state", state, "--status", "nosuch"); code != exitUsage || !strings.Contains(errOut, "--status") {
		t.Errorf("jobs --status nosuch: exit %d, %s", code, errOut)
	}
	if code, _, errOut := run(t, "jobs", "unpark", "--state", state, "x"); code != exitUsage || !strings.Contains(errOut, "not an id") {
		t.Errorf("jobs unpark x: exit %d, %s", code, errOut)
	}
	if code, _, _ := run(t, "jobs", "unpark", "--state", state, "42"); code != exitInfra {
		t.Errorf("unparking a job that does not exist: exit %d, want 1", code)
	}
	if code, out, _ := run(t, "outbox", "--state", state, "--status", "uncertain"); code != 0 || !strings.Contains(out, "MESSAGE-ID") {
		t.Errorf("outbox --status uncertain: exit %d, %s", code, out)
	}

	// A job the daemon died on twice is parked; unparking queues it.
	st, err := store.Open(filepath.Join(state, "state.db"))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	id, _, _ := st.AddJob(ctx, store.Job{Dedupe: "series:x:v1", Trigger: "list", Title: "[PATCH] x", Request: []byte("{}")})
	if _, err := st.ClaimJob(ctx, store.Claim{Worker: "w", Lease: time.Hour, At: time.Now()}); err != nil {
		t.Fatal(err)
	}
	st.RecoverJobs(ctx, "w", 1) // one crash is enough to park, here
	st.Close()
	if _, out, _ := run(t, "jobs", "--state", state, "--status", "parked"); !strings.Contains(out, "[PATCH] x") {
		t.Fatalf("the parked job is not listed:\n%s", out)
	}
	if code, _, errOut := run(t, "jobs", "unpark", "--state", state, strconv.FormatInt(id, 10)); code != 0 {
		t.Fatalf("unpark: exit %d, %s", code, errOut)
	}
	if _, out, _ := run(t, "jobs", "--state", state, "--status", "queued"); !strings.Contains(out, "[PATCH] x") {
		t.Errorf("the unparked job is not queued:\n%s", out)
	}
}
