package initramfs

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/patchbot/patchbot/internal/testenv"
)

// agentTree writes a small module shaped like patchbot's agent (its main
// package, a package it imports that embeds a file, a package it does not
// import), commits it, and returns the tree and the commit.
func agentTree(t *testing.T) (root, rev string) {
	t.Helper()
	testenv.Tools(t, "git", "go")
	root = t.TempDir()
	files := map[string]string{
		"go.mod":                      "module github.com/patchbot/patchbot\n\ngo 1.22\n",
		"README":                      "not compiled\n",
		"cmd/patchbot-agent/main.go":  "package main\n\nimport \"github.com/patchbot/patchbot/lib\"\n\nfunc main() { println(lib.Spec) }\n",
		"lib/lib.go":                  "package lib\n\nimport _ \"embed\"\n\n//go:embed spec.yaml\nvar Spec string\n",
		"lib/spec.yaml":               "windows: 4\n",
		"lib/lib_test.go":             "package lib\n",
		"lib/sub/sub.go":              "package sub\n",
		"hostonly/hostonly.go":        "package hostonly\n",
		"cmd/patchbot-agent/extra.md": "notes\n",
	}
	for name, data := range files {
		p := filepath.Join(root, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	t.Setenv("GOWORK", "off")
	t.Setenv("GOFLAGS", "-mod=mod")
	git := func(args ...string) string {
		cmd := exec.Command("git", append([]string{"-c", "user.name=t", "-c", "user.email=t@example.org"}, args...)...)
		cmd.Dir = root
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
		return strings.TrimSpace(string(out))
	}
	git("init", "-q")
	git("add", ".")
	git("commit", "-q", "-m", "agent")
	return root, git("rev-parse", "HEAD")
}

func TestCheckAgentSources(t *testing.T) {
	ctx := context.Background()
	root, rev := agentTree(t)
	write := func(name, data string) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(root, name), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	restore := func() {
		t.Helper()
		for _, args := range [][]string{{"checkout", "-q", rev, "--", "."}, {"clean", "-qfd"}} {
			cmd := exec.Command("git", args...)
			cmd.Dir = root
			if out, err := cmd.CombinedOutput(); err != nil {
				t.Fatalf("git %v: %v\n%s", args, err, out)
			}
		}
	}
	if err := checkAgentSources(ctx, root, rev); err != nil {
		t.Fatalf("the tree at its own revision: %v", err)
	}
	// What the agent is not compiled from may change.
	for name, data := range map[string]string{
		"README":                      "edited\n",
		"lib/lib_test.go":             "package lib\n\n// edited\n",
		"lib/broken_test.go":          "not Go\n",
		"lib/sub/sub.go":              "package sub\n\n// edited\n",
		"hostonly/hostonly.go":        "package hostonly\n\n// edited\n",
		"hostonly/new.go":             "package hostonly\n",
		"cmd/patchbot-agent/extra.md": "edited\n",
	} {
		write(name, data)
		if err := checkAgentSources(ctx, root, rev); err != nil {
			t.Errorf("%s changed, which the agent is not built from: %v", name, err)
		}
		restore()
	}
	// What it is compiled from may not: an edit, a new file, a deleted
	// one, an embedded file, the module's requirements.
	for name, data := range map[string]string{
		"lib/lib.go":                  "package lib\n\nimport _ \"embed\"\n\n//go:embed spec.yaml\nvar Spec string // edited\n",
		"lib/new.go":                  "package lib\n",
		"lib/spec.yaml":               "windows: 8\n",
		"go.mod":                      "module github.com/patchbot/patchbot\n\ngo 1.23\n",
		"cmd/patchbot-agent/other.go": "package main\n",
	} {
		write(name, data)
		err := checkAgentSources(ctx, root, rev)
		if err == nil || !strings.Contains(err.Error(), name) || !strings.Contains(err.Error(), rev[:12]) {
			t.Errorf("%s changed: err = %v, want one naming the file and the revision", name, err)
		}
		restore()
	}
	// A test file that does not parse does not hide an edit.
	write("lib/broken_test.go", "not Go\n")
	write("lib/new.go", "package lib\n")
	if err := checkAgentSources(ctx, root, rev); err == nil || !strings.Contains(err.Error(), "lib/new.go") {
		t.Errorf("lib/new.go added beside a broken test: err = %v", err)
	}
	restore()
	if err := os.Remove(filepath.Join(root, "lib/lib.go")); err != nil {
		t.Fatal(err)
	}
	write("lib/renamed.go", "package lib\n\nimport _ \"embed\"\n\n//go:embed spec.yaml\nvar Spec string\n")
	if err := checkAgentSources(ctx, root, rev); err == nil || !strings.Contains(err.Error(), "lib/lib.go") {
		t.Errorf("lib/lib.go deleted: err = %v", err)
	}
	restore()

	// Nothing to compare with: no revision (a binary from a dirty tree, or
	// from go test), a revision the tree does not have, a tree without git.
	write("lib/new.go", "package lib\n")
	for _, r := range []string{"", strings.Repeat("0", 40)} {
		if err := checkAgentSources(ctx, root, r); err != nil {
			t.Errorf("revision %q: %v", r, err)
		}
	}
	if err := os.RemoveAll(filepath.Join(root, ".git")); err != nil {
		t.Fatal(err)
	}
	if err := checkAgentSources(ctx, root, rev); err != nil {
		t.Errorf("no checkout: %v", err)
	}
}
