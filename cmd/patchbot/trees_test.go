package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// upstream is a local bare repository standing in for a remote tree, with
// one commit on branch.
func upstream(t *testing.T, branch, subject string) (dir, commit string) {
	t.Helper()
	work := t.TempDir()
	git := func(args ...string) string {
		cmd := exec.Command("git", args...)
		cmd.Dir = work
		cmd.Env = append(os.Environ(), "GIT_AUTHOR_NAME=a", "GIT_AUTHOR_EMAIL=a@example.org",
			"GIT_COMMITTER_NAME=a", "GIT_COMMITTER_EMAIL=a@example.org",
			"GIT_AUTHOR_DATE=2026-11-20T00:00:00Z", "GIT_COMMITTER_DATE=2026-11-20T00:00:00Z")
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
		return strings.TrimSpace(string(out))
	}
	git("init", "-q")
	os.WriteFile(filepath.Join(work, "Makefile"), []byte("VERSION = 6\n"), 0o644)
	git("add", "Makefile")
	git("commit", "-q", "-m", subject)
	commit = git("rev-parse", "HEAD")
	dir = filepath.Join(t.TempDir(), "up.git")
	git("init", "-q", "--bare", dir)
	git("push", "-q", dir, "HEAD:refs/heads/"+branch)
	return dir, commit
}

func TestTreesCommand(t *testing.T) {
	t.Setenv("PATCHBOT_CACHE", t.TempDir()) // the Debian import is not there: listed as such
	next, head := upstream(t, "master", "Add linux-next specific files for 20261120")
	dir := t.TempDir()
	cfg := filepath.Join(dir, "patchbot.yaml")
	os.WriteFile(cfg, []byte(`state_dir: `+filepath.Join(dir, "state")+`
trees:
  store: `+filepath.Join(dir, "store.git")+`
  list:
    - {name: next, url: `+next+`, branch: master, tags: [linux-next]}
    - {name: gone, url: `+filepath.Join(dir, "nothing.git")+`, branch: master}
`), 0o644)

	code, out, errOut := run(t, "trees", "--config", cfg, "--json")
	if code != 0 {
		t.Fatalf("trees: exit %d: %s", code, errOut)
	}
	var r treesReport
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatal(err)
	}
	if len(r.Trees) != 3 || r.Trees[0].Head != "" || r.Trees[2].Name != "default" {
		t.Errorf("before a fetch: %+v", r.Trees)
	}

	// A fetch that fails for one tree exits 1 and still lists them all.
	code, out, errOut = run(t, "trees", "--config", cfg, "--fetch")
	if code != 1 || !strings.Contains(errOut, "gone") {
		t.Errorf("trees --fetch with a tree gone: exit %d, stderr %q", code, errOut)
	}
	rows := map[string]string{}
	for _, l := range strings.Split(out, "\n") {
		if f := strings.Fields(l); len(f) > 0 {
			rows[f[0]] = strings.Join(f, " ")
		}
	}
	for name, want := range map[string]string{
		"next":    "next master " + head[:12] + " 2026-11-20 ",
		"gone":    "gone master - - never, then failed",
		"default": "default - - - (offline) (not there yet: the first job makes it)",
	} {
		if !strings.HasPrefix(rows[name], want) {
			t.Errorf("row %s = %q, want %q...", name, rows[name], want)
		}
	}
	for _, want := range []string{"(just now)  Add linux-next specific files for 20261120", "next: " + next + " (tags: linux-next)",
		"last fetch failed: git fetch"} {
		if !strings.Contains(out, want) {
			t.Errorf("trees lacks %q:\n%s", want, out)
		}
	}

	code, out, _ = run(t, "trees", "--config", cfg, "--fetch", "--json", "next")
	if code != 0 {
		t.Fatalf("trees --fetch next: exit %d", code)
	}
	r = treesReport{}
	json.Unmarshal([]byte(out), &r)
	if len(r.Trees) != 1 || r.Trees[0].Head != head || r.Trees[0].Fetched.IsZero() || r.Schema != 1 {
		t.Errorf("trees next: %+v", r)
	}

	code, _, errOut = run(t, "trees", "--config", cfg, "nosuch")
	if code != exitUsage || !strings.Contains(errOut, `no tree "nosuch"`) || strings.Count(errOut, "\n") != 1 {
		t.Errorf("trees nosuch: exit %d, %q", code, errOut)
	}
}

func TestRunBaseAndPatchesUsage(t *testing.T) {
	const seed = "../../testdata/mbox/squashfs-thundering-herd.mbox"
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"run", "--mbox", seed, "--base", "a..b"}, `--base "a..b"`},
		{[]string{"run", "--mbox", seed, "--base", "--upload-pack=x"}, `--base "--upload-pack=x"`},
		{[]string{"run", "--mbox", seed, "--patches", "3-2"}, `--patches "3-2"`},
		{[]string{"run", "--mbox", seed, "--patches", "2-3", "--state", t.TempDir()}, "--patches 2-3: the series has 1 patch(es)"},
	} {
		code, _, errOut := run(t, tc.args...)
		if code != exitUsage || !strings.Contains(errOut, tc.want) || strings.Count(errOut, "\n") != 1 {
			t.Errorf("%v: exit %d, stderr %q, want 2 and %q", tc.args, code, errOut, tc.want)
		}
	}
}

// patchbot build chooses its base among the configured trees, as run and
// the daemon do: the seed applies to neither a configured tree nor the
// kernel: base here (two small repositories), so it is the series' fault
// (exit 3), and the JSON says which trees were tried.
func TestBuildTriesTheConfiguredTrees(t *testing.T) {
	t.Setenv("PATCHBOT_CACHE", t.TempDir())
	next, _ := upstream(t, "master", "Add linux-next specific files for 20261120")
	kernel, _ := upstream(t, "master", "Linux 6.13-rc2")
	dir := t.TempDir()
	cfg := filepath.Join(dir, "patchbot.yaml")
	os.WriteFile(cfg, []byte(`state_dir: `+filepath.Join(dir, "state")+`
kernel: {tree: `+kernel+`}
trees:
  store: `+filepath.Join(dir, "store.git")+`
  list:
    - {name: next, url: `+next+`, branch: master}
`), 0o644)
	code, out, errOut := run(t, "build", "--config", cfg, "--mbox", "../../testdata/mbox/squashfs-thundering-herd.mbox", "--json")
	if code != exitPatchFault {
		t.Fatalf("build: exit %d, want %d: %s", code, exitPatchFault, errOut)
	}
	var r buildReport
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatalf("%v:\n%s", err, out)
	}
	if r.Choice == nil || r.Choice.How != "applies" || len(r.Choice.Tried) != 2 ||
		r.Choice.Tried[0].Tree != "next" && r.Choice.Tried[1].Tree != "next" {
		t.Errorf("choice %+v: want next and the default tried", r.Choice)
	}
	if r.Error == nil || r.Error.Blame != "patch" || r.Error.Kind != "apply" || r.Base != nil {
		t.Errorf("error %+v, base %+v: want the series' fault, no kernel built", r.Error, r.Base)
	}
}
