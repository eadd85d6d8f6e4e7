package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/patchbot/patchbot/internal/testenv"
)

// TestBinaryRefusesMovedAgentSources builds patchbot as a user does, in a
// clean checkout with its revision recorded, then edits the guest agent's
// source there: the binary must refuse to boot a guest with an agent of
// other code than its own, naming the file and its revision.
func TestBinaryRefusesMovedAgentSources(t *testing.T) {
	testenv.Long(t) // a clone and a build of patchbot
	testenv.Tools(t, "git", "go")
	kernels, _ := filepath.Glob("/boot/vmlinuz-*")
	if len(kernels) == 0 {
		testenv.Missing(t, "no /boot/vmlinuz-* (scripts/install-deps.sh installs linux-image-amd64)")
	}
	run := func(dir, name string, args ...string) string {
		t.Helper()
		cmd := exec.Command(name, args...)
		cmd.Dir = dir
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
		}
		return strings.TrimSpace(string(out))
	}
	// The tree under test as it is (not its last commit), committed anew.
	top := run(".", "git", "rev-parse", "--show-toplevel")
	tree := t.TempDir()
	for _, name := range strings.Split(run(top, "git", "ls-files", "--cached", "--others", "--exclude-standard"), "\n") {
		b, err := os.ReadFile(filepath.Join(top, name))
		if os.IsNotExist(err) {
			continue // deleted, not yet committed
		} else if err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(tree, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	run(tree, "git", "init", "-q")
	run(tree, "git", "add", ".")
	run(tree, "git", "-c", "user.name=t", "-c", "user.email=t@example.org", "commit", "-q", "-m", "tree")
	rev := run(tree, "git", "rev-parse", "HEAD")
	bin := filepath.Join(t.TempDir(), "patchbot")
	// -buildvcs=true: a machine's GOFLAGS may turn the record off.
	run(tree, "go", "build", "-buildvcs=true", "-o", bin, "./cmd/patchbot")
	if v := runBinary(t, bin, nil, "version"); !strings.Contains(v.stdout, rev[:12]) || strings.Contains(v.stdout, "dirty") {
		t.Fatalf("patchbot version = %q, want the clean revision %s", v.stdout, rev[:12])
	}

	main := filepath.Join(tree, "cmd", "patchbot-agent", "main.go")
	f, err := os.OpenFile(main, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteString("\n// edited after the build\n"); err != nil {
		t.Fatal(err)
	}
	f.Close()
	r := runBinary(t, bin, []string{"PATCHBOT_CACHE=" + t.TempDir()}, "vm", "boot", "--kernel", kernels[len(kernels)-1])
	if r.code == 0 || !strings.Contains(r.stderr, "cmd/patchbot-agent/main.go") || !strings.Contains(r.stderr, rev[:12]) {
		t.Errorf("vm boot with the agent's source edited: exit %d, stderr %q; want a refusal naming the file and %s", r.code, r.stderr, rev[:12])
	}
}
