package images

import (
	"context"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

// KeepFresh (the daemon's loop over the trees) fetches the stale trees at
// once, then on its schedule.
func TestKeepFreshFetchesStaleTrees(t *testing.T) {
	src := t.TempDir()
	gitT := func(dir string, args ...string) {
		t.Helper()
		if out, err := keepFreshGit(dir, args...); err != nil {
			t.Fatalf("git %v: %v %s", args, err, out)
		}
	}
	gitT(src, "init", "-q", "-b", "master")
	os.WriteFile(filepath.Join(src, "Makefile"), []byte("VERSION = 6\n"), 0o644)
	gitT(src, "add", "Makefile")
	gitT(src, "commit", "-q", "-m", "Linux 6.13")
	trees := NewTrees(TreesConfig{Store: filepath.Join(t.TempDir(), "store.git"), FetchEvery: time.Minute,
		List: []Tree{{Name: "mainline", URL: src, Branch: "master"}}}, "")
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { trees.KeepFresh(ctx, slog.Default()); close(done) }()
	deadline := time.Now().Add(20 * time.Second)
	for len(trees.Stale(time.Now())) > 0 && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	cancel()
	<-done
	heads, _ := trees.Heads(context.Background())
	if heads[0].Commit == "" || heads[0].Title != "Linux 6.13" {
		t.Errorf("after the first fetch: %+v", heads[0])
	}
}

func keepFreshGit(dir string, args ...string) ([]byte, error) {
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GIT_AUTHOR_NAME=a", "GIT_AUTHOR_EMAIL=a@example.org",
		"GIT_COMMITTER_NAME=a", "GIT_COMMITTER_EMAIL=a@example.org")
	return cmd.CombinedOutput()
}
