package publish

import (
	"context"
	"crypto/sha1"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// fakeGitHub implements the Git data REST calls Publish uses, over an
// in-memory object store, as api.github.com answers them.
type fakeGitHub struct {
	mu      sync.Mutex
	token   string
	blobs   map[string][]byte
	trees   map[string]map[string]string // sha -> path -> blob sha
	commits map[string]fakeCommit
	refs    map[string]string
	// raceOnce, if set, runs once before the next ref update: another
	// publisher moving the branch in between.
	raceOnce func()
}

type fakeCommit struct {
	tree, message string
	parents       []string
}

func newFakeGitHub(token string) *fakeGitHub {
	return &fakeGitHub{token: token, blobs: map[string][]byte{}, trees: map[string]map[string]string{},
		commits: map[string]fakeCommit{}, refs: map[string]string{}}
}

func hash(parts ...any) string {
	h := sha1.New()
	fmt.Fprint(h, parts...)
	return hex.EncodeToString(h.Sum(nil))
}

func (f *fakeGitHub) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	reply := func(code int, v any) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(code)
		json.NewEncoder(w).Encode(v)
	}
	if r.Header.Get("Authorization") != "Bearer "+f.token {
		reply(401, map[string]string{"message": "Bad credentials"})
		return
	}
	const prefix = "/repos/lab/results/git/"
	if !strings.HasPrefix(r.URL.Path, prefix) {
		reply(404, map[string]string{"message": "Not Found"})
		return
	}
	p := strings.TrimPrefix(r.URL.Path, prefix)
	var body map[string]any
	if r.Body != nil {
		json.NewDecoder(r.Body).Decode(&body)
	}
	str := func(k string) string { s, _ := body[k].(string); return s }
	refJSON := func(ref string) map[string]any {
		return map[string]any{"ref": ref, "object": map[string]string{"sha": f.refs[ref], "type": "commit"}}
	}
	switch {
	case r.Method == "GET" && strings.HasPrefix(p, "ref/"):
		ref := "refs/" + strings.TrimPrefix(p, "ref/")
		if _, ok := f.refs[ref]; !ok {
			reply(404, map[string]string{"message": "Not Found"})
			return
		}
		reply(200, refJSON(ref))
	case r.Method == "GET" && strings.HasPrefix(p, "commits/"):
		c, ok := f.commits[strings.TrimPrefix(p, "commits/")]
		if !ok {
			reply(404, map[string]string{"message": "Not Found"})
			return
		}
		reply(200, map[string]any{"sha": strings.TrimPrefix(p, "commits/"), "tree": map[string]string{"sha": c.tree}})
	case r.Method == "POST" && p == "blobs":
		if str("encoding") != "base64" {
			reply(422, map[string]string{"message": "encoding"})
			return
		}
		data, err := base64.StdEncoding.DecodeString(str("content"))
		if err != nil {
			reply(422, map[string]string{"message": err.Error()})
			return
		}
		sha := hash("blob", string(data))
		f.blobs[sha] = data
		reply(201, map[string]string{"sha": sha})
	case r.Method == "POST" && p == "trees":
		tree := map[string]string{}
		if base := str("base_tree"); base != "" {
			for k, v := range f.trees[base] {
				tree[k] = v
			}
		}
		entries, _ := body["tree"].([]any)
		for _, e := range entries {
			m := e.(map[string]any)
			sha := m["sha"].(string)
			if _, ok := f.blobs[sha]; !ok {
				reply(422, map[string]string{"message": "unknown blob " + sha})
				return
			}
			tree[m["path"].(string)] = sha
		}
		sha := hash("tree", tree)
		f.trees[sha] = tree
		reply(201, map[string]string{"sha": sha})
	case r.Method == "POST" && p == "commits":
		var parents []string
		ps, _ := body["parents"].([]any)
		for _, x := range ps {
			parents = append(parents, x.(string))
		}
		c := fakeCommit{tree: str("tree"), message: str("message"), parents: parents}
		sha := hash("commit", c.tree, c.message, parents)
		f.commits[sha] = c
		reply(201, map[string]any{"sha": sha, "html_url": "https://github.test/lab/results/commit/" + sha})
	case r.Method == "POST" && p == "refs":
		f.refs[str("ref")] = str("sha")
		reply(201, refJSON(str("ref")))
	case r.Method == "PATCH" && strings.HasPrefix(p, "refs/"):
		ref := "refs/" + strings.TrimPrefix(p, "refs/")
		if race := f.raceOnce; race != nil {
			f.raceOnce = nil
			race()
		}
		sha := str("sha")
		force, _ := body["force"].(bool)
		if !force && !contains(f.commits[sha].parents, f.refs[ref]) {
			reply(422, map[string]string{"message": "Update is not a fast forward"})
			return
		}
		f.refs[ref] = sha
		reply(200, refJSON(ref))
	default:
		reply(404, map[string]string{"message": "Not Found"})
	}
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

func writeRun(t *testing.T, files map[string]string) string {
	dir := t.TempDir()
	for name, content := range files {
		p := filepath.Join(dir, name)
		os.MkdirAll(filepath.Dir(p), 0o755)
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func TestPublishCommitsEachRun(t *testing.T) {
	gh := newFakeGitHub("t0ken")
	srv := httptest.NewServer(gh)
	defer srv.Close()
	p, err := New(Config{Owner: "lab", Repo: "results", Token: "t0ken", APIURL: srv.URL}, srv.Client())
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	run1 := writeRun(t, map[string]string{"run.json": `{"a":1}`, "base.json": "[]", "logs/build.log": "CC fs/squashfs/cache.o\n"})
	url1, err := p.Publish(ctx, run1, "2026-11-29-squashfs", "squashfs: avoid thundering-herd cache wakeups")
	if err != nil {
		t.Fatal(err)
	}
	run2 := writeRun(t, map[string]string{"run.json": `{"b":2}`, "reply.eml": "Subject: Re: x\r\n\r\nhi\r\n"})
	url2, err := p.Publish(ctx, run2, "2026-11-29-fuse", "RFC fuse waitq latency")
	if err != nil {
		t.Fatal(err)
	}

	head := gh.refs["refs/heads/main"]
	if !strings.HasSuffix(url2, head) || url1 == url2 {
		t.Errorf("urls %s, %s; head %s", url1, url2, head)
	}
	c := gh.commits[head]
	if len(c.parents) != 1 || !strings.HasSuffix(url1, c.parents[0]) {
		t.Errorf("second commit's parents %v, want the first", c.parents)
	}
	tree := gh.trees[c.tree]
	want := map[string]string{
		"runs/2026-11-29-squashfs/run.json":       `{"a":1}`,
		"runs/2026-11-29-squashfs/logs/build.log": "CC fs/squashfs/cache.o\n",
		"runs/2026-11-29-fuse/reply.eml":          "Subject: Re: x\r\n\r\nhi\r\n",
	}
	for path, content := range want {
		if got := string(gh.blobs[tree[path]]); got != content {
			t.Errorf("%s = %q, want %q", path, got, content)
		}
	}
	if len(tree) != 5 {
		t.Errorf("tree has %d files, want 5: %v", len(tree), tree)
	}
}

func TestPublishErrors(t *testing.T) {
	gh := newFakeGitHub("right")
	srv := httptest.NewServer(gh)
	defer srv.Close()
	ctx := context.Background()
	run := writeRun(t, map[string]string{"run.json": "{}"})

	bad, _ := New(Config{Owner: "lab", Repo: "results", Token: "wrong", APIURL: srv.URL}, srv.Client())
	if _, err := bad.Publish(ctx, run, "r1", "m"); err == nil || !strings.Contains(err.Error(), "401") {
		t.Errorf("bad token: %v, want a 401 error", err)
	}
	good, _ := New(Config{Owner: "lab", Repo: "results", Token: "right", APIURL: srv.URL}, srv.Client())
	for _, name := range []string{"", "a/b", ".."} {
		if _, err := good.Publish(ctx, run, name, "m"); err == nil {
			t.Errorf("run name %q accepted", name)
		}
	}
	if _, err := good.Publish(ctx, t.TempDir(), "empty", "m"); err == nil {
		t.Error("an empty run directory was published")
	}
	if _, err := New(Config{Owner: "lab", Repo: "results"}, nil); err == nil {
		t.Error("a config without a token was accepted")
	}
}

func TestPublishRetriesWhenTheBranchMoved(t *testing.T) {
	gh := newFakeGitHub("t0ken")
	srv := httptest.NewServer(gh)
	defer srv.Close()
	p, _ := New(Config{Owner: "lab", Repo: "results", Token: "t0ken", APIURL: srv.URL}, srv.Client())
	ctx := context.Background()
	if _, err := p.Publish(ctx, writeRun(t, map[string]string{"run.json": "1"}), "first", "first"); err != nil {
		t.Fatal(err)
	}
	// Another publisher commits on top of "first" while we work.
	gh.raceOnce = func() {
		head := gh.refs["refs/heads/main"]
		tree := map[string]string{}
		for k, v := range gh.trees[gh.commits[head].tree] {
			tree[k] = v
		}
		gh.blobs[hash("blob", "other")] = []byte("other")
		tree["runs/other/run.json"] = hash("blob", "other")
		gh.trees[hash("tree", tree)] = tree
		c := fakeCommit{tree: hash("tree", tree), message: "other", parents: []string{head}}
		sha := hash("commit", c.tree, c.message, c.parents)
		gh.commits[sha] = c
		gh.refs["refs/heads/main"] = sha
	}
	if _, err := p.Publish(ctx, writeRun(t, map[string]string{"run.json": "2"}), "second", "second"); err != nil {
		t.Fatal(err)
	}
	tree := gh.trees[gh.commits[gh.refs["refs/heads/main"]].tree]
	for _, f := range []string{"runs/first/run.json", "runs/other/run.json", "runs/second/run.json"} {
		if _, ok := tree[f]; !ok {
			t.Errorf("%s lost after a concurrent publish: %v", f, tree)
		}
	}
}
