// Package treetest makes local git repositories that stand in for remote
// kernel trees in tests (the test machine reaches no git server). A tree
// borrows the objects of a real repository, such as the Debian import,
// through git's alternates, so a kernel-sized tree costs a few kilobytes;
// its commits are made without a checkout, from the parent's tree and a
// few changed files.
package treetest

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// Git runs git with the repository repo ("" for none) and a fixed
// identity and date, and returns its trimmed output.
func Git(t testing.TB, repo, date string, stdin string, args ...string) string {
	t.Helper()
	if repo != "" {
		args = append([]string{"--git-dir=" + repo}, args...)
	}
	cmd := exec.Command("git", args...)
	cmd.Env = append(os.Environ(), "GIT_AUTHOR_NAME=Tree Keeper", "GIT_AUTHOR_EMAIL=keeper@example.org",
		"GIT_COMMITTER_NAME=Tree Keeper", "GIT_COMMITTER_EMAIL=keeper@example.org",
		"GIT_AUTHOR_DATE="+date, "GIT_COMMITTER_DATE="+date)
	if stdin != "" {
		cmd.Stdin = strings.NewReader(stdin)
	}
	out, err := cmd.Output()
	if err != nil {
		var stderr []byte
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = ee.Stderr
		}
		t.Fatalf("git %s: %v\n%s", strings.Join(args, " "), err, stderr)
	}
	return strings.TrimSpace(string(out))
}

// Borrow makes a bare repository at dir that borrows every object of the
// repository from (a git directory): it has from's commits, and none of
// its refs.
func Borrow(t testing.TB, dir, from string) string {
	t.Helper()
	Git(t, "", "2026-01-01T00:00:00Z", "", "init", "-q", "--bare", dir)
	alt := filepath.Join(dir, "objects", "info", "alternates")
	if err := os.WriteFile(alt, []byte(filepath.Join(from, "objects")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

// Commit makes a commit on parent in repo with files changed (path to new
// content), dated date, and returns its id. No worktree is involved.
func Commit(t testing.TB, repo, parent, date, msg string, files map[string]string) string {
	t.Helper()
	index := filepath.Join(t.TempDir(), "index")
	run := func(stdin string, args ...string) string {
		t.Helper()
		cmd := exec.Command("git", append([]string{"--git-dir=" + repo}, args...)...)
		cmd.Env = append(os.Environ(), "GIT_INDEX_FILE="+index, "GIT_AUTHOR_NAME=Tree Keeper",
			"GIT_AUTHOR_EMAIL=keeper@example.org", "GIT_COMMITTER_NAME=Tree Keeper",
			"GIT_COMMITTER_EMAIL=keeper@example.org", "GIT_AUTHOR_DATE="+date, "GIT_COMMITTER_DATE="+date)
		if stdin != "" {
			cmd.Stdin = strings.NewReader(stdin)
		}
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("git %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return strings.TrimSpace(string(out))
	}
	run("", "read-tree", parent)
	for path, content := range files {
		blob := run(content, "hash-object", "-w", "--stdin")
		run("", "update-index", "--add", "--cacheinfo", "100644,"+blob+","+path)
	}
	tree := run("", "write-tree")
	return run(msg+"\n", "commit-tree", tree, "-p", parent)
}

// Show is a file's content at a commit.
func Show(t testing.TB, repo, commit, path string) string {
	t.Helper()
	cmd := exec.Command("git", "--git-dir="+repo, "show", commit+":"+path)
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("git show %s:%s: %v", commit, path, err)
	}
	return string(out)
}

// Branch points refs/heads/name at commit.
func Branch(t testing.TB, repo, name, commit string) {
	t.Helper()
	Git(t, repo, "2026-01-01T00:00:00Z", "", "update-ref", "refs/heads/"+name, commit)
}

// Kernel is three trees made from one kernel repository and commit (the
// Debian import) for the series of testdata/trees: "mainline" is the
// commit itself; "net" (2026-11-10) rewrote the cache comment that
// squashfs-3.mbox's first patch fixes; "next" (2026-11-20) changed the
// wait the second patch replaces. Tried newest first, the series fails on
// next at patch 2, on net at patch 1, and applies to mainline. Store is an
// empty object store that borrows the same objects, so that fetching
// these trees copies nothing.
type Kernel struct {
	Dir                             string // where the trees are
	Mainline, Next, Net             string // bare repositories, branch master
	MainlineHead, NextHead, NetHead string
	Store                           string
}

// KernelTrees makes the three trees of Kernel from repo at commit.
func KernelTrees(t testing.TB, repo, commit string) Kernel {
	t.Helper()
	dir := t.TempDir()
	k := Kernel{Dir: dir, MainlineHead: commit}
	cache := Show(t, repo, commit, "fs/squashfs/cache.c")
	for _, old := range []string{"layered ontop of the generic", "wait_event(cache->wait_queue, cache->unused);"} {
		if !strings.Contains(cache, old) {
			t.Fatalf("fs/squashfs/cache.c at %s lacks %q: not the tree the fixtures were written for", commit, old)
		}
	}
	k.Mainline = Borrow(t, filepath.Join(dir, "mainline.git"), repo)
	Branch(t, k.Mainline, "master", commit)
	k.Net = Borrow(t, filepath.Join(dir, "net.git"), repo)
	k.NetHead = Commit(t, k.Net, commit, "2026-11-10T00:00:00Z", "squashfs: reword the cache comment",
		map[string]string{"fs/squashfs/cache.c": strings.Replace(cache, "layered ontop of the generic", "layered over the generic", 1)})
	Branch(t, k.Net, "master", k.NetHead)
	k.Next = Borrow(t, filepath.Join(dir, "next.git"), repo)
	k.NextHead = Commit(t, k.Next, commit, "2026-11-20T00:00:00Z", "Add linux-next specific files for 20261120",
		map[string]string{"fs/squashfs/cache.c": strings.Replace(cache,
			"wait_event(cache->wait_queue, cache->unused);", "wait_event(cache->wait_queue, READ_ONCE(cache->unused));", 1)})
	Branch(t, k.Next, "master", k.NextHead)
	k.Store = Borrow(t, filepath.Join(dir, "store.git"), repo)
	return k
}
