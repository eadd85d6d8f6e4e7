package images

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/patchbot/patchbot/blame"
)

// Local bare repositories stand in for remote trees (this machine reaches
// no git server). Each is a small kernel-like tree: the choosing logic
// needs files, commits and dates, not a kernel.

// gitRun runs git in dir with fixed identities and the given date.
func gitRun(t *testing.T, dir, date string, args ...string) string {
	t.Helper()
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GIT_AUTHOR_NAME=Test Author", "GIT_AUTHOR_EMAIL=author@example.org",
		"GIT_COMMITTER_NAME=Test Author", "GIT_COMMITTER_EMAIL=author@example.org",
		"GIT_AUTHOR_DATE="+date, "GIT_COMMITTER_DATE="+date)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("git %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return strings.TrimSpace(string(out))
}

// work is a scratch clone in which upstream trees are written.
type work struct {
	t   *testing.T
	dir string
}

func newWork(t *testing.T) *work {
	dir := filepath.Join(t.TempDir(), "work")
	os.MkdirAll(dir, 0o755)
	gitRun(t, dir, "2026-01-01T00:00:00Z", "init", "-q", "-b", "master")
	return &work{t: t, dir: dir}
}

func (w *work) write(path, content string) {
	w.t.Helper()
	p := filepath.Join(w.dir, path)
	os.MkdirAll(filepath.Dir(p), 0o755)
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		w.t.Fatal(err)
	}
}

func (w *work) commit(date, msg string) string {
	gitRun(w.t, w.dir, date, "add", "-A")
	gitRun(w.t, w.dir, date, "commit", "-q", "-m", msg)
	return gitRun(w.t, w.dir, date, "rev-parse", "HEAD")
}

// publish makes a bare repository holding commit as branch.
func (w *work) publish(name, commit, branch string) string {
	w.t.Helper()
	bare := filepath.Join(filepath.Dir(w.dir), name+".git")
	if _, err := os.Stat(bare); err != nil {
		gitRun(w.t, "", "2026-01-01T00:00:00Z", "init", "-q", "--bare", bare)
	}
	gitRun(w.t, w.dir, "2026-01-01T00:00:00Z", "push", "-q", "-f", bare, commit+":refs/heads/"+branch)
	return bare
}

// patches are the mails of git format-patch from..to.
func (w *work) patches(from, to string) [][]byte {
	w.t.Helper()
	out := filepath.Join(w.t.TempDir(), "series")
	gitRun(w.t, w.dir, "2026-01-01T00:00:00Z", "format-patch", "-q", "-o", out, from+".."+to)
	files, _ := filepath.Glob(filepath.Join(out, "*.patch"))
	sort.Strings(files)
	var mails [][]byte
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			w.t.Fatal(err)
		}
		mails = append(mails, data)
	}
	return mails
}

const cacheC = `// SPDX-License-Identifier: GPL-2.0-or-later
/*
 * cache.c: a small stand-in for fs/squashfs/cache.c
 */
#include "squashfs.h"

static int cache_get(struct cache *c)
{
	wait_event(c->wait_queue, c->unused);
	return 0;
}

static void cache_put(struct cache *c)
{
	wake_up(&c->wait_queue);
}
`

// fixture is three trees and a two-patch series written on "mainline":
// "next" is newer and changed the lines patch 2 touches, so the series
// does not apply there; "net" is older, has a commit no other tree has and
// is named by the subject tag net-next.
type fixture struct {
	trees               TreesConfig
	defaultTree         string   // the kernel: base, an old tree of its own
	mainline, next, net string   // head commits
	hidden              string   // a commit of net's server on no branch
	series              [][]byte // applies to mainline (and net, default), not to next
	orphan              [][]byte // applies nowhere
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	w := newWork(t)
	f := &fixture{}
	w.write("Makefile", "VERSION = 6\nPATCHLEVEL = 1\n")
	w.write("fs/squashfs/cache.c", cacheC)
	root := w.commit("2026-01-01T00:00:00Z", "Linux 6.1")
	f.defaultTree = w.publish("old", root, "master")

	w.write("README", "mainline\n")
	f.mainline = w.commit("2026-11-01T00:00:00Z", "Linux 6.13-rc2")
	w.publish("mainline", f.mainline, "master")

	// The series, written on mainline; and a patch on a commit that was
	// never published, which applies nowhere.
	fixed := strings.Replace(cacheC, "a small stand-in", "a small stand-in (comment fixed)", 1)
	w.write("fs/squashfs/cache.c", fixed)
	w.commit("2026-11-02T00:00:00Z", "squashfs: fix a comment")
	w.write("fs/squashfs/cache.c", strings.Replace(fixed, "\twake_up(&c->wait_queue);", "\twake_up_nr(&c->wait_queue, 1);", 1))
	w.commit("2026-11-03T00:00:00Z", "squashfs: wake one waiter")
	f.series = w.patches(f.mainline, "HEAD")
	w.write("fs/squashfs/cache.c", strings.Replace(fixed, "c->unused);", "READ_ONCE(c->unused));", 1))
	unpublished := w.commit("2026-11-04T00:00:00Z", "squashfs: read unused once")
	w.write("fs/squashfs/cache.c", strings.Replace(fixed, "c->unused);", "READ_ONCE(c->unused) > 0);", 1))
	w.commit("2026-11-05T00:00:00Z", "squashfs: compare unused")
	f.orphan = w.patches(unpublished, "HEAD")

	// next: newer, and cache_put changed under the series.
	gitRun(t, w.dir, "2026-01-01T00:00:00Z", "checkout", "-q", f.mainline)
	w.write("fs/squashfs/cache.c", strings.Replace(cacheC, "\twake_up(&c->wait_queue);", "\twake_up_all(&c->wait_queue);", 1))
	f.next = w.commit("2026-11-20T00:00:00Z", "Add linux-next specific files for 20261120")
	w.publish("next", f.next, "master")

	// net: older, its own commit, and one more its server has off-branch.
	gitRun(t, w.dir, "2026-01-01T00:00:00Z", "checkout", "-q", f.mainline)
	w.write("net/core/dev.c", "int dev;\n")
	f.net = w.commit("2026-10-01T00:00:00Z", "net: add dev.c")
	w.publish("net", f.net, "main")
	w.write("net/core/dev.c", "int dev, more;\n")
	f.hidden = w.commit("2026-10-02T00:00:00Z", "net: a commit on no branch")
	gitRun(t, w.dir, "2026-01-01T00:00:00Z", "push", "-q", filepath.Join(filepath.Dir(w.dir), "net.git"), f.hidden+":refs/archive/x")

	dir := filepath.Dir(w.dir)
	f.trees = TreesConfig{
		Store: filepath.Join(t.TempDir(), "store.git"),
		List: []Tree{
			{Name: "mainline", URL: filepath.Join(dir, "mainline.git"), Branch: "master"},
			{Name: "next", URL: filepath.Join(dir, "next.git"), Branch: "master"},
			{Name: "net", URL: filepath.Join(dir, "net.git"), Branch: "main", Tags: []string{"net-next"}},
		},
	}
	return f
}

// kernels chooses among the fixture's trees with a store of its own,
// empty until the first choice fetches.
func (f *fixture) kernels(t *testing.T) *Kernels {
	c := f.trees
	c.Store = filepath.Join(t.TempDir(), "store.git")
	return &Kernels{Builder: &Builder{Cache: t.TempDir()}, Tree: TreeConfig{Tree: f.defaultTree, Base: "master"},
		Trees: NewTrees(c, "")}
}

func TestTreesFetchAndHeads(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t)
	tr := NewTrees(f.trees, "")
	if got := tr.Stale(time.Now()); len(got) != 3 {
		t.Fatalf("Stale before any fetch = %v, want all three", got)
	}
	before := time.Now().UTC().Add(-time.Second)
	if err := tr.Fetch(ctx); err != nil {
		t.Fatal(err)
	}
	heads, err := tr.Heads(ctx)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"mainline": f.mainline, "next": f.next, "net": f.net}
	for _, h := range heads {
		if h.Commit != want[h.Name] {
			t.Errorf("%s head = %s, want %s", h.Name, h.Commit, want[h.Name])
		}
		if h.Fetched.Before(before) || h.FetchError != "" {
			t.Errorf("%s: fetched %v, error %q", h.Name, h.Fetched, h.FetchError)
		}
	}
	if heads[1].Title != "Add linux-next specific files for 20261120" || heads[1].Date.Format("2006-01-02") != "2026-11-20" {
		t.Errorf("next head = %q at %v", heads[1].Title, heads[1].Date)
	}
	// One object store: a remote per tree, a person can fetch by hand.
	if out := gitRun(t, "", "2026-01-01T00:00:00Z", "--git-dir="+tr.Dir, "remote"); out != "mainline\nnet\nnext" {
		t.Errorf("remotes = %q", out)
	}
	if got := tr.Stale(time.Now()); len(got) != 0 {
		t.Errorf("Stale after fetching = %v", got)
	}
	tr.Config.FetchEvery = time.Minute
	if got := tr.Stale(time.Now().Add(2 * time.Minute)); len(got) != 3 {
		t.Errorf("Stale two minutes later with fetch_every 1m = %v", got)
	}

	// A tree whose server is gone: the others are fetched, the failure kept.
	tr.Config.List = append(tr.Config.List, Tree{Name: "gone", URL: filepath.Join(t.TempDir(), "nothing.git"), Branch: "master"})
	if err := tr.Fetch(ctx); err == nil || !strings.Contains(err.Error(), "gone") {
		t.Errorf("Fetch with a missing server = %v, want an error naming it", err)
	}
	heads, _ = tr.Heads(ctx)
	if g := heads[3]; g.Commit != "" || g.FetchError == "" || !g.Fetched.IsZero() {
		t.Errorf("gone = %+v, want no head and the error", g)
	}
}

func TestChoose(t *testing.T) {
	f := newFixture(t)
	for _, tc := range []struct {
		name       string
		want       func(f *fixture) Want
		tree       string
		how        How
		commit     func(f *fixture) string
		tried      []string // trees in the order tried
		noteSubstr string
	}{
		{name: "applies: newest first, next fails, mainline applies",
			want: func(f *fixture) Want { return Want{Patches: f.series} },
			tree: "mainline", how: ByApplying, commit: func(f *fixture) string { return f.mainline },
			tried: []string{"next", "mainline"}},
		{name: "base-commit only net has",
			want: func(f *fixture) Want { return Want{BaseCommit: f.net, Patches: f.series} },
			tree: "net", how: ByBaseCommit, commit: func(f *fixture) string { return f.net }},
		{name: "base-commit on no branch, fetched from the server that has it",
			want: func(f *fixture) Want { return Want{BaseCommit: f.hidden, Patches: f.series} },
			tree: "net", how: ByBaseCommit, commit: func(f *fixture) string { return f.hidden }},
		{name: "base-commit nowhere: said, then try-apply",
			want: func(f *fixture) Want {
				return Want{BaseCommit: "0123456789abcdef0123456789abcdef01234567", Patches: f.series}
			},
			tree: "mainline", how: ByApplying, commit: func(f *fixture) string { return f.mainline },
			tried: []string{"next", "mainline"}, noteSubstr: "base-commit 0123456789ab is in none of the trees"},
		{name: "subject tag mapped to net",
			want: func(f *fixture) Want { return Want{Tags: []string{"net-next"}, Patches: f.series} },
			tree: "net", how: ByTag, commit: func(f *fixture) string { return f.net }},
		{name: "subject tag that is a tree's name",
			want: func(f *fixture) Want { return Want{Tags: []string{"RFC-ish", "next"}, Patches: f.series} },
			tree: "next", how: ByTag, commit: func(f *fixture) string { return f.next }},
		{name: "override names a tree, even one the series does not apply to",
			want: func(f *fixture) Want { return Want{Override: "next", BaseCommit: f.net, Patches: f.series} },
			tree: "next", how: ByOverride, commit: func(f *fixture) string { return f.next }},
		{name: "override names the default",
			want: func(f *fixture) Want { return Want{Override: "default", Patches: f.series} },
			tree: DefaultTree, how: ByOverride},
		{name: "override is a commit of a tree",
			want: func(f *fixture) Want { return Want{Override: f.net[:12], Patches: f.series} },
			tree: "net", how: ByOverride, commit: func(f *fixture) string { return f.net }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			k := f.kernels(t) // a fresh store each time: every case fetches
			c, err := k.Choose(context.Background(), tc.want(f))
			if err != nil {
				t.Fatal(err)
			}
			if c.Tree != tc.tree || c.How != tc.how {
				t.Errorf("chose %s by %s, want %s by %s", c.Tree, c.How, tc.tree, tc.how)
			}
			if tc.commit != nil && c.Base.Commit != tc.commit(f) {
				t.Errorf("commit %s, want %s", c.Base.Commit, tc.commit(f))
			}
			var tried []string
			for _, a := range c.Tried {
				tried = append(tried, a.Tree)
			}
			if strings.Join(tried, ",") != strings.Join(tc.tried, ",") {
				t.Errorf("tried %v, want %v", tried, tc.tried)
			}
			if tc.noteSubstr != "" && !strings.Contains(strings.Join(c.Notes, "\n"), tc.noteSubstr) {
				t.Errorf("notes %q, want %q", c.Notes, tc.noteSubstr)
			}
			if len(c.Tried) > 0 && c.Tried[0].Tree == "next" {
				e := c.Tried[0].Err
				if e == nil || e.Index != 2 || e.Subject != "squashfs: wake one waiter" ||
					!strings.Contains(e.Hunk, "while searching for") || !strings.Contains(e.Hunk, "wake_up(&c->wait_queue);") {
					t.Errorf("next's attempt = %+v, want patch 2 and its failing hunk", e)
				}
			}
		})
	}
}

func TestChooseNoneApplies(t *testing.T) {
	f := newFixture(t)
	k := f.kernels(t)
	// Written on a commit no tree has: no context matches, and 3-way has
	// no blob to fall back on.
	_, err := k.Choose(context.Background(), Want{Patches: f.orphan})
	var nb *NoBaseError
	if !errors.As(err, &nb) {
		t.Fatalf("Choose = %v, want a NoBaseError", err)
	}
	if blame.Of(err) != blame.Patch {
		t.Errorf("blame %q, want the patch's: every tree was tried", blame.Of(err))
	}
	var order []string
	for _, a := range nb.Tried {
		order = append(order, a.Tree)
		if a.Err == nil || a.Err.Index != 1 || a.Err.Hunk == "" {
			t.Errorf("%s: %+v, want patch 1 and a hunk", a.Tree, a.Err)
		}
	}
	if got := strings.Join(order, ","); got != "next,mainline,net,default" {
		t.Errorf("tried %s, want newest first and the default last", got)
	}

	// A tree that cannot be fetched makes it the machine's: retried later.
	f.trees.List = append(f.trees.List, Tree{Name: "gone", URL: filepath.Join(t.TempDir(), "x.git"), Branch: "master"})
	_, err = f.kernels(t).Choose(context.Background(), Want{Patches: f.orphan})
	if !errors.As(err, &nb) || blame.Of(err) != blame.Infra || nb.Tried[0].Unavailable == "" {
		t.Errorf("with a tree unavailable: %v (blame %q), want an infrastructure NoBaseError", err, blame.Of(err))
	}
}

func TestChooseOverrideUnknown(t *testing.T) {
	f := newFixture(t)
	for _, ref := range []string{"nosuch", "--upload-pack=touch /tmp/x", "HEAD~1", "deadbeefdeadbeef"} {
		_, err := f.kernels(t).Choose(context.Background(), Want{Override: ref})
		var ub *UnknownBaseError
		if !errors.As(err, &ub) || blame.Of(err) != blame.Patch {
			t.Errorf("override %q: %v, want an UnknownBaseError answered to the asker", ref, err)
		}
	}
}

func TestChooseNoTreesKeepsTheDefault(t *testing.T) {
	f := newFixture(t)
	k := &Kernels{Builder: &Builder{Cache: t.TempDir()}, Tree: TreeConfig{Tree: f.defaultTree, Base: "master"}}
	c, err := k.Choose(context.Background(), Want{BaseCommit: f.net, Patches: f.series})
	if err != nil {
		t.Fatal(err)
	}
	if c.How != ByDefault || c.Tree != DefaultTree || len(c.Tried) != 0 {
		t.Errorf("chose %+v, want the default without a try-apply", c)
	}
	if len(c.Notes) != 1 || !strings.Contains(c.Notes[0], "is not in the tree") {
		t.Errorf("notes %q", c.Notes)
	}
}

func TestTryApplyAlreadyApplied(t *testing.T) {
	f := newFixture(t)
	k := f.kernels(t)
	if err := k.Trees.Fetch(context.Background()); err != nil {
		t.Fatal(err)
	}
	base := Base{Repo: k.Trees.Dir, Commit: f.mainline}
	if err := TryApply(context.Background(), base, f.series); err != nil {
		t.Fatalf("the series on mainline: %v", err)
	}
	err := TryApply(context.Background(), base, [][]byte{f.series[0], f.series[0]})
	var ae *ApplyError
	if !errors.As(err, &ae) || ae.Index != 2 || !strings.Contains(ae.Hunk, "already applied") {
		t.Errorf("a patch twice: %v, want patch 2 already applied", err)
	}
}

func TestTreesConfigValidate(t *testing.T) {
	ok := Tree{Name: "mainline", URL: "https://git.kernel.org/pub/scm/linux/kernel/git/torvalds/linux.git", Branch: "master"}
	for _, tc := range []struct {
		name string
		c    TreesConfig
		want string // empty: valid
	}{
		{"ok", TreesConfig{List: []Tree{ok}, FetchEvery: time.Hour}, ""},
		{"on demand", TreesConfig{List: []Tree{ok}}, ""},
		{"bad name", TreesConfig{List: []Tree{{Name: "a b", URL: "x", Branch: "m"}}}, "name"},
		{"reserved name", TreesConfig{List: []Tree{{Name: "Default", URL: "x", Branch: "m"}}}, "kernel: base"},
		{"duplicate", TreesConfig{List: []Tree{ok, ok}}, "two trees"},
		{"ext transport", TreesConfig{List: []Tree{{Name: "x", URL: "ext::sh -c touch% /tmp/pwned", Branch: "m"}}}, "url"},
		{"option url", TreesConfig{List: []Tree{{Name: "x", URL: "--upload-pack=x", Branch: "m"}}}, "url"},
		{"no branch", TreesConfig{List: []Tree{{Name: "x", URL: "y"}}}, "branch"},
		{"branch syntax", TreesConfig{List: []Tree{{Name: "x", URL: "y", Branch: "a..b"}}}, "branch"},
		{"tag twice", TreesConfig{List: []Tree{
			{Name: "x", URL: "y", Branch: "m", Tags: []string{"net-next"}},
			{Name: "z", URL: "y", Branch: "m", Tags: []string{"NET-NEXT"}}}}, "already names"},
		{"fetch too often", TreesConfig{List: []Tree{ok}, FetchEvery: time.Second}, "fetch_every"},
	} {
		err := tc.c.Validate()
		if (err == nil) != (tc.want == "") || (err != nil && !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("%s: Validate = %v, want %q", tc.name, err, tc.want)
		}
	}
}

func TestTryApplyWritesNothingToTheTree(t *testing.T) {
	f := newFixture(t)
	repo := filepath.Join(filepath.Dir(f.defaultTree), "mainline.git")
	count := func() string { return gitRun(t, "", "2026-01-01T00:00:00Z", "--git-dir="+repo, "count-objects") }
	before := count()
	if err := TryApply(context.Background(), Base{Repo: repo, Commit: f.mainline}, f.series); err != nil {
		t.Fatal(err)
	}
	if after := count(); after != before {
		t.Errorf("objects %q before, %q after a try-apply", before, after)
	}
}

// Processes that find the imported tree at once (test packages starting
// together) each make sure its gc is off, and none fails on git's lock of
// the config file: a value already set is not written again.
func TestNoAutoGCConcurrent(t *testing.T) {
	repo := filepath.Join(t.TempDir(), "r.git")
	if out, err := exec.Command("git", "init", "-q", "--bare", repo).CombinedOutput(); err != nil {
		t.Fatalf("git init: %v: %s", err, out)
	}
	if err := noAutoGC(context.Background(), repo); err != nil {
		t.Fatal(err)
	}
	errs := make(chan error, 16)
	for range 16 {
		go func() { errs <- noAutoGC(context.Background(), repo) }()
	}
	for range 16 {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
	out, err := exec.Command("git", "--git-dir="+repo, "config", "--get", "gc.auto").Output()
	if err != nil || strings.TrimSpace(string(out)) != "0" {
		t.Errorf("gc.auto %q, %v", out, err)
	}
}
