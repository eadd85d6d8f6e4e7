package images

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/patchbot/patchbot/internal/testenv"
)

// These tests use the real tools: git, make, gcc, ccache, bwrap, prlimit,
// unshare, setpriv and Debian's linux-source-6.1. The first run on a machine builds the
// default kernel (about 10 minutes on 2 cores); later runs take it from
// PATCHBOT_CACHE.

func needTools(t testing.TB) {
	t.Helper()
	testenv.NeedsKernel(t)
}

// patchMails reads a fixture mbox and returns the mails that carry a diff,
// in order: the review and ping replies of a thread are not patches.
func patchMails(t testing.TB, file string) [][]byte {
	t.Helper()
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var mails [][]byte
	for _, m := range bytes.Split(data, []byte("\nFrom ")) {
		if bytes.Contains(m, []byte("\ndiff --git ")) {
			if !bytes.HasPrefix(m, []byte("From ")) {
				m = append([]byte("From "), m...)
			}
			mails = append(mails, m)
		}
	}
	if len(mails) == 0 {
		t.Fatalf("%s holds no patch", file)
	}
	return mails
}

func debianBase(t testing.TB) (string, Base) {
	t.Helper()
	needTools(t)
	cache, err := CacheDir()
	if err != nil {
		t.Fatal(err)
	}
	base, err := ImportDebian(context.Background(), cache, testWriter{t})
	if err != nil {
		t.Fatalf("ImportDebian: %v", err)
	}
	return cache, base
}

// testWriter sends progress lines to the test log.
type testWriter struct{ t testing.TB }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// worktree checks base out in a temporary directory and removes it after.
func worktree(t testing.TB, base Base) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "tree")
	ctx := context.Background()
	if _, err := git(ctx, "", "--git-dir="+base.Repo, "worktree", "add", "--no-checkout", "--detach", dir, base.Commit); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		os.RemoveAll(dir)
		git(ctx, "", "--git-dir="+base.Repo, "worktree", "prune")
	})
	// Only the folders the fixtures patch: a full checkout is 1.3 GB.
	for _, args := range [][]string{{"sparse-checkout", "set", "--cone", "fs/squashfs", "fs/fuse"}, {"checkout", "-q", "--detach", base.Commit}} {
		if _, err := git(ctx, dir, args...); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func TestImportDebianIsStable(t *testing.T) {
	_, base := debianBase(t)
	// The import is a root commit with a fixed author and date, so that a
	// series' base-commit names the same tree on every machine.
	out, err := git(context.Background(), "", "--git-dir="+base.Repo, "log", "--format=%an %ad %P", "--date=iso-strict", "-1", base.Commit)
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.TrimSpace(string(out)); got != "patchbot 2000-01-01T00:00:00+00:00" {
		t.Errorf("import commit is %q", got)
	}
	// A user's own tree and ref resolve the same way.
	if own, err := OpenBase(context.Background(), base.Repo, base.Commit[:12]); err != nil || own.Commit != base.Commit {
		t.Errorf("OpenBase(%s, %s) = %v, %v", base.Repo, base.Commit[:12], own, err)
	}
	if _, err := OpenBase(context.Background(), base.Repo, "no-such-branch"); err == nil {
		t.Error("OpenBase with an unknown ref succeeded")
	}
	if got, err := base.WithBaseCommit(context.Background(), base.Commit[:12]); err != nil || got.Commit != base.Commit {
		t.Errorf("WithBaseCommit(own commit) = %v, %v", got, err)
	}
	if _, err := base.WithBaseCommit(context.Background(), strings.Repeat("ab", 20)); !errors.Is(err, ErrNoCommit) {
		t.Errorf("WithBaseCommit(unknown) error = %v, want ErrNoCommit", err)
	}
}

func TestApply(t *testing.T) {
	_, base := debianBase(t)
	seed := patchMails(t, "../testdata/mbox/squashfs-thundering-herd.mbox")
	broken := patchMails(t, "testdata/does-not-apply.mbox")
	tests := []struct {
		name    string
		series  [][]byte
		index   int    // failing patch, 0 when the series applies
		subject string // of the failing patch
	}{
		{"seed applies", seed, 0, ""},
		{"second patch does not apply", append(seed[:1:1], broken...), 2, "squashfs: drop readahead from a file that moved on"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tree := worktree(t, base)
			err := applySeries(context.Background(), tree, tt.series)
			if tt.index == 0 {
				if err != nil {
					t.Fatalf("applySeries: %v", err)
				}
				out, _ := git(context.Background(), tree, "log", "--format=%s", "-1")
				if !strings.Contains(string(out), "avoid thundering-herd") {
					t.Errorf("HEAD is %q, want the seed patch", out)
				}
				return
			}
			var ae *ApplyError
			if !errors.As(err, &ae) {
				t.Fatalf("applySeries error = %v, want *ApplyError", err)
			}
			if ae.Index != tt.index || ae.Subject != tt.subject {
				t.Errorf("failing patch = %d %q, want %d %q", ae.Index, ae.Subject, tt.index, tt.subject)
			}
			t.Logf("%v\n%s", ae, ae.Hunk)
			if !strings.Contains(ae.Hunk, "squashfs_read_page") || !strings.Contains(ae.Hunk, "fs/squashfs/file.c") {
				t.Errorf("hunk does not show the failing context:\n%s", ae.Hunk)
			}
		})
	}
}

// defaultKernel builds (or finds) the default base once per test binary.
func defaultKernel(t *testing.T) *Build {
	t.Helper()
	needTools(t)
	bd, err := DefaultKernel(context.Background(), testWriter{t})
	if err != nil {
		t.Fatalf("DefaultKernel: %v", err)
	}
	return bd
}

func TestDefaultKernel(t *testing.T) {
	bd := defaultKernel(t)
	for _, p := range []string{bd.BzImage, bd.Config, bd.Log} {
		if fi, err := os.Stat(p); err != nil || fi.Size() == 0 {
			t.Errorf("build output %s missing or empty: %v", p, err)
		}
	}
	if !strings.HasPrefix(bd.Compiler, "gcc") || bd.Commit == "" || bd.ConfigHash != DefaultConfig().Hash() {
		t.Errorf("build record incomplete: %+v", bd)
	}
	again, err := DefaultKernel(context.Background(), testWriter{t})
	if err != nil {
		t.Fatal(err)
	}
	if !again.Cached || again.BzImage != bd.BzImage {
		t.Errorf("second DefaultKernel: cached=%v bzImage=%s, want a cache hit on %s", again.Cached, again.BzImage, bd.BzImage)
	}
	// The build's step count (from its record, or its log for an older
	// one) is what the next cold build of this config estimates from, and
	// defaultConfigSteps, what a fresh machine's first build estimates
	// from, must be within a tenth of it.
	n := lastSteps(filepath.Dir(bd.Dir), bd.ConfigHash)
	if d := float64(n-defaultConfigSteps) / defaultConfigSteps; d < -0.1 || d > 0.1 {
		t.Errorf("the default kernel's build took %d kbuild steps by its record; defaultConfigSteps (%d) is stale: update it", n, defaultConfigSteps)
	}
}

func TestPatchedBuilds(t *testing.T) {
	base := defaultKernel(t)
	b := patchedBuilder(t)
	t.Run("readahead-off adds one warning", func(t *testing.T) {
		bd, err := b.Patched(context.Background(), base, patchMails(t, "../testdata/mbox/squashfs-readahead-off.mbox"))
		if err != nil {
			t.Fatalf("Patched: %v", err)
		}
		if len(bd.NewWarnings) != 1 || bd.NewWarnings[0].Flag != "-Wunused-function" ||
			!strings.Contains(bd.NewWarnings[0].Message, "squashfs_readahead") {
			t.Errorf("new warnings = %v, want one -Wunused-function for squashfs_readahead", bd.NewWarnings)
		}
		if len(bd.Dropped) != 0 {
			t.Errorf("series dropped config options: %v", bd.Dropped)
		}
		if bd.BzImage == base.BzImage {
			t.Error("patched build shares the base's bzImage")
		}
		// The patched tree's files are hard links of the base's: git am
		// must have replaced the patched file, not written through the
		// link (the patched build's warning shows its file.c was the
		// patched one; its tree is gone with the build).
		const op = ".readahead = squashfs_readahead"
		src, err := os.ReadFile(filepath.Join(base.Dir, treeDir, "fs/squashfs/file.c"))
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(src), op) {
			t.Errorf("the base's file.c lost %q: git am wrote through a hard link", op)
		}
		if _, err := os.Stat(filepath.Join(bd.Dir, treeDir)); err == nil {
			t.Error("the patched build kept its tree")
		}
	})
	t.Run("cache directory removed by hand", func(t *testing.T) {
		// Deleting a cached build leaves its worktree registered in the
		// base repository; the next build of that series must still work.
		mails := patchMails(t, "../testdata/mbox/squashfs-thundering-herd.mbox")
		bd, err := b.Patched(context.Background(), base, mails)
		if err != nil {
			t.Fatalf("Patched: %v", err)
		}
		if err := os.RemoveAll(bd.Dir); err != nil {
			t.Fatal(err)
		}
		again, err := b.Patched(context.Background(), base, mails)
		if err != nil {
			t.Fatalf("Patched after removing %s: %v", bd.Dir, err)
		}
		if again.Cached || again.Head == "" {
			t.Errorf("rebuild: cached %v, head %q; want a fresh build with its commit", again.Cached, again.Head)
		}
	})
	t.Run("fuse rfc does not build", func(t *testing.T) {
		_, err := b.Patched(context.Background(), base, patchMails(t, "../testdata/mbox/fuse-waitq-rfc.mbox"))
		var be *BuildError
		if !errors.As(err, &be) {
			t.Fatalf("Patched error = %v, want *BuildError", err)
		}
		if !strings.Contains(strings.Join(be.Lines, "\n"), "'expires' undeclared") {
			t.Errorf("error lines do not quote the compiler:\n%s", strings.Join(be.Lines, "\n"))
		}
	})
}

func TestConfigReportsDroppedOption(t *testing.T) {
	base := defaultKernel(t)
	cache, err := CacheDir()
	if err != nil {
		t.Fatal(err)
	}
	// A scratch copy of the base tree where the build user can write.
	scratch, err := os.MkdirTemp(filepath.Join(cache, "kernels"), "test-config.")
	if err != nil {
		t.Fatal(err)
	}
	os.Chmod(scratch, 0o755)
	t.Cleanup(func() {
		os.RemoveAll(scratch)
		git(context.Background(), "", "--git-dir="+base.Repo, "worktree", "prune")
	})
	tree := filepath.Join(scratch, treeDir)
	ctx := context.Background()
	b, err := DefaultBuilder(testWriter{t})
	if err != nil {
		t.Fatal(err)
	}
	if err := b.copyTree(ctx, base, tree); err != nil {
		t.Fatal(err)
	}
	// i915 needs DRM, which the fragments leave off: olddefconfig drops it.
	b.Config.Fragments = append(b.Config.Fragments, Fragment{Name: "gpu.config", Data: []byte("CONFIG_DRM_I915=y\n")})
	sb, err := newSandbox(b.Limits, filepath.Join(b.Cache, "sandbox"))
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.Create(filepath.Join(scratch, logFile))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	ctx, cancel := context.WithTimeout(ctx, 10*time.Minute)
	defer cancel()
	err = b.configure(ctx, sb, newBuildLog(f, DefaultLimits.Log), b.baseView(scratch))
	var ce *ConfigError
	if !errors.As(err, &ce) {
		t.Fatalf("configure error = %v, want *ConfigError", err)
	}
	if len(ce.Dropped) != 1 || ce.Dropped[0].Option != "CONFIG_DRM_I915" {
		t.Errorf("dropped = %v, want only CONFIG_DRM_I915", ce.Dropped)
	}
}
