package service

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/patchbot/patchbot/images"
	"github.com/patchbot/patchbot/intake"
	"github.com/patchbot/patchbot/store"
)

func TestDecodeTreesConfig(t *testing.T) {
	for _, tc := range []struct {
		name, yaml, wantErr string
		check               func(t *testing.T, c Config)
	}{
		{name: "defaults: no tree, fetched every 6h when there are", check: func(t *testing.T, c Config) {
			if len(c.Trees.List) != 0 || c.Trees.FetchEvery != 6*time.Hour {
				t.Errorf("trees = %+v", c.Trees)
			}
		}},
		{name: "two trees", yaml: "trees:\n  fetch_every: 1h\n  list:\n  - {name: mainline, url: /srv/linux.git, branch: master}\n" +
			"  - {name: net-next, url: 'https://git.kernel.org/pub/scm/linux/kernel/git/netdev/net-next.git', branch: main, tags: [net-next]}\n",
			check: func(t *testing.T, c Config) {
				if len(c.Trees.List) != 2 || c.Trees.List[1].Tags[0] != "net-next" || c.Trees.FetchEvery != time.Hour {
					t.Errorf("trees = %+v", c.Trees)
				}
			}},
		{name: "unknown key", yaml: "trees:\n  list:\n  - {name: a, url: b, branch: c, brnach: d}\n", wantErr: "field brnach not found"},
		{name: "ext transport", yaml: "trees:\n  list:\n  - {name: a, url: 'ext::sh -c id', branch: master}\n", wantErr: "url"},
		{name: "the default's name", yaml: "trees:\n  list:\n  - {name: default, url: /x, branch: master}\n", wantErr: "kernel: base"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := DefaultConfig()
			c.StateDir = t.TempDir()
			err := DecodeConfig([]byte(tc.yaml), &c)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			tc.check(t, c)
		})
	}
	c, err := LoadConfig("../patchbot.example.yaml")
	if err != nil || len(c.Trees.List) != 3 {
		t.Errorf("example config: %v, trees %+v", err, c.Trees.List)
	}
}

// "#patchbot test base=... patches=..." reaches the job; a range the
// series does not have is answered, not queued.
func TestDaemonTestCommandBaseAndPatches(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	d := newTestDaemon(t, dir)
	d.ingestFile(t, "list", "../testdata/trees/squashfs-3.mbox")
	cmd := func(id, line string) string {
		path := filepath.Join(dir, id+".mbox")
		os.WriteFile(path, []byte(fmt.Sprintf(`From x Mon Nov 30 12:00:00 2026
From: Maintainer <maintainer@example.org>
To: linux-fsdevel@vger.kernel.org
Subject: Re: [PATCH 0/3] squashfs: fewer cache wake-ups, and what the docs say of them
Date: Mon, 30 Nov 2026 12:00:00 +0000
Message-ID: <%s@example.org>
In-Reply-To: <20261130100000.3-0-author@example.org>
References: <20261130100000.3-0-author@example.org>

%s

`, id, line)), 0o644) // the blank line closes the mbox entry
		return path
	}
	// The maintainer is allow-listed; a trusted server vouches for the mail.
	d.ingestAs(t, "c1", cmd("c1", "#patchbot test base=next patches=2-3"), listID+dkimPass("example.org"))
	d.ingestAs(t, "c2", cmd("c2", "#patchbot test patches=2-5"), listID+dkimPass("example.org"))
	all, _ := d.Store.Jobs(ctx)
	var jobs []*store.Job
	for _, j := range all {
		if j.Trigger != "incomplete" { // the first mails' wait for the rest
			jobs = append(jobs, j)
		}
	}
	if len(jobs) != 2 {
		t.Fatalf("jobs = %d, want the list's and c1's", len(jobs))
	}
	var req intake.Request
	if err := json.Unmarshal(jobs[1].Request, &req); err != nil {
		t.Fatal(err)
	}
	if req.BaseOverride != "next" || req.First != 2 || req.Last != 3 || len(req.Series.Patches) != 3 {
		t.Errorf("request base %q patches %d-%d, subjects %d", req.BaseOverride, req.First, req.Last, len(req.Series.Patches))
	}
	var list intake.Request
	json.Unmarshal(jobs[0].Request, &list)
	if list.Series.SeriesKey != (intake.SeriesKey{Author: "author@example.org", Title: "squashfs: fewer cache wake-ups, and what the docs say of them", Version: 1,
		Identity: "author@example.org/unverified"}) {
		t.Errorf("series key %+v", list.Series)
	}
	var answer string
	for _, m := range d.outbox(t) {
		if strings.Contains(string(m.Raw), "In-Reply-To: <c2@example.org>") {
			answer = string(m.Raw)
		}
	}
	if !says(answer, "patches=2-5: the series has 3 patch(es)") {
		t.Errorf("c2 not answered with the reason:\n%s", answer)
	}
}

// The daemon fetches the configured trees at start and on its schedule.
func TestDaemonFetchesTrees(t *testing.T) {
	src := t.TempDir()
	gitT := func(dir string, args ...string) {
		t.Helper()
		if out, err := gitCmd(dir, args...); err != nil {
			t.Fatalf("git %v: %v %s", args, err, out)
		}
	}
	gitT(src, "init", "-q", "-b", "master")
	os.WriteFile(filepath.Join(src, "Makefile"), []byte("VERSION = 6\n"), 0o644)
	gitT(src, "add", "Makefile")
	gitT(src, "commit", "-q", "-m", "Linux 6.13")
	d := newTestDaemon(t, t.TempDir())
	d.Pipeline.Trees = images.NewTrees(images.TreesConfig{Store: filepath.Join(t.TempDir(), "store.git"), FetchEvery: time.Minute,
		List: []images.Tree{{Name: "mainline", URL: src, Branch: "master"}}}, "")
	ctx, cancel := context.WithCancel(context.Background())
	d.defaults()
	done := make(chan struct{})
	go func() { d.fetchTrees(ctx); close(done) }()
	deadline := time.Now().Add(20 * time.Second)
	for len(d.Pipeline.Trees.Stale(time.Now())) > 0 && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	cancel()
	<-done
	heads, _ := d.Pipeline.Trees.Heads(context.Background())
	if heads[0].Commit == "" || heads[0].Title != "Linux 6.13" {
		t.Errorf("after the daemon's first fetch: %+v", heads[0])
	}
}

func gitCmd(dir string, args ...string) ([]byte, error) {
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GIT_AUTHOR_NAME=a", "GIT_AUTHOR_EMAIL=a@example.org",
		"GIT_COMMITTER_NAME=a", "GIT_COMMITTER_EMAIL=a@example.org")
	return cmd.CombinedOutput()
}
