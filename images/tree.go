package images

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// DebianSource is Debian's kernel source package, the default base.
const DebianSource = "linux-source-6.1"

// debianTarball is where the package installs the source.
var debianTarball = "/usr/src/" + DebianSource + ".tar.xz"

// Base is a kernel tree and the commit that series apply to.
type Base struct {
	Repo   string // a git repository (bare or not)
	Commit string // full commit id
}

// ImportDebian imports Debian's linux-source-6.1 tarball into a bare git
// repository under the cache, once per package version, and returns it as
// a Base. The commit has a fixed author and date, so the same package
// version gives the same commit id on every machine.
func ImportDebian(ctx context.Context, cache string, progress io.Writer) (Base, error) {
	out, err := exec.CommandContext(ctx, "dpkg-query", "-W", "-f=${Version}", DebianSource).Output()
	if err != nil || len(out) == 0 {
		return Base{}, infra("finding the "+DebianSource+" package (install it with scripts/install-deps.sh)", fmt.Errorf("dpkg-query: %v", err))
	}
	version := string(out)
	repo := filepath.Join(cache, "trees", DebianSource+".git")
	tag := "debian/" + version

	if b, err := resolve(ctx, repo, "refs/tags/"+tag); err == nil {
		return b, noAutoGC(ctx, repo)
	}
	unlock, err := lockFile(ctx, repo+".lock", progress)
	if err != nil {
		return Base{}, err
	}
	defer unlock()
	if b, err := resolve(ctx, repo, "refs/tags/"+tag); err == nil {
		return b, nil // imported while we waited
	}
	st := newStages(progress, "import")
	err = st.run("importing "+debianTarball+" ("+version+")", func() error {
		return importTarball(ctx, repo, debianTarball, version, tag)
	})
	if err != nil {
		return Base{}, err
	}
	return resolve(ctx, repo, "refs/tags/"+tag)
}

// importTarball adds the tarball's tree as a new root commit tagged tag.
func importTarball(ctx context.Context, repo, tarball, version, tag string) error {
	if _, err := os.Stat(tarball); err != nil {
		return infra("reading kernel source", err)
	}
	if _, err := os.Stat(filepath.Join(repo, "HEAD")); err != nil {
		os.RemoveAll(repo)
		if _, err := git(ctx, "", "init", "-q", "--bare", repo); err != nil {
			return infra("creating "+repo, err)
		}
	}
	if err := noAutoGC(ctx, repo); err != nil {
		return err
	}
	tmp, err := os.MkdirTemp(filepath.Dir(repo), "import.")
	if err != nil {
		return infra("creating import directory", err)
	}
	defer os.RemoveAll(tmp)
	if out, err := exec.CommandContext(ctx, "tar", "-xf", tarball, "-C", tmp, "--strip-components=1").CombinedOutput(); err != nil {
		return infra("extracting "+tarball, fmt.Errorf("%w: %s", err, out))
	}
	// A separate index, and a root commit made with commit-tree: the commit
	// id depends only on the tarball, not on earlier imports in the repo.
	index := tmp + ".index"
	defer os.Remove(index)
	gitIn := func(args ...string) (string, error) {
		cmd := exec.CommandContext(ctx, "git", append([]string{"-c", "gc.auto=0", "-c", "maintenance.auto=false"}, args...)...)
		cmd.Env = append(os.Environ(), "GIT_DIR="+repo, "GIT_WORK_TREE="+tmp, "GIT_INDEX_FILE="+index,
			"GIT_AUTHOR_NAME=patchbot", "GIT_AUTHOR_EMAIL=patchbot@localhost",
			"GIT_COMMITTER_NAME=patchbot", "GIT_COMMITTER_EMAIL=patchbot@localhost",
			"GIT_AUTHOR_DATE=2000-01-01T00:00:00Z", "GIT_COMMITTER_DATE=2000-01-01T00:00:00Z")
		cmd.Dir = tmp
		out, err := cmd.Output()
		if err != nil {
			return "", infra("importing "+tarball+": git "+args[0], err)
		}
		return strings.TrimSpace(string(out)), nil
	}
	// -f: the tarball is the source of truth, even files a .gitignore names.
	if _, err := gitIn("add", "-A", "-f", "."); err != nil {
		return err
	}
	tree, err := gitIn("write-tree")
	if err != nil {
		return err
	}
	commit, err := gitIn("commit-tree", "-m", "Import Debian "+DebianSource+" "+version, tree)
	if err != nil {
		return err
	}
	_, err = gitIn("tag", tag, commit)
	return err
}

// noAutoGC turns git's automatic gc and maintenance off in patchbot's own
// repository: git() does so for patchbot's calls, this for a person's
// (issue 15: a "git gc --auto" ran beside a measurement).
//
// A value already set is not written again: every process that finds the
// imported tree calls this, and two writing at once collide on git's lock
// of the config file ("could not lock config file": seen with two test
// packages starting together). --local: git() sets both for its own
// call, which a plain --get would read.
func noAutoGC(ctx context.Context, repo string) error {
	for _, kv := range [][2]string{{"gc.auto", "0"}, {"maintenance.auto", "false"}} {
		if out, err := git(ctx, "", "--git-dir="+repo, "config", "--local", "--get", kv[0]); err == nil && strings.TrimSpace(string(out)) == kv[1] {
			continue
		}
		if _, err := git(ctx, "", "--git-dir="+repo, "config", kv[0], kv[1]); err != nil {
			return infra("configuring "+repo, err)
		}
	}
	return nil
}

// resolve finds the commit ref names in repo.
func resolve(ctx context.Context, repo, ref string) (Base, error) {
	out, err := git(ctx, "", "--git-dir="+repo, "rev-parse", "--verify", "--quiet", ref+"^{commit}")
	if err != nil {
		return Base{}, fmt.Errorf("resolving %s in %s: %w", ref, repo, err)
	}
	return Base{Repo: repo, Commit: strings.TrimSpace(string(out))}, nil
}

// OpenBase resolves ref (branch, tag or commit) in a user's own kernel tree.
func OpenBase(ctx context.Context, tree, ref string) (Base, error) {
	out, err := git(ctx, tree, "rev-parse", "--absolute-git-dir")
	if err != nil {
		return Base{}, infra("opening kernel tree "+tree, err)
	}
	return resolve(ctx, strings.TrimSpace(string(out)), ref)
}

// ErrNoCommit means a series' base-commit is not in the tree.
var ErrNoCommit = errors.New("commit not in tree")

// WithBaseCommit returns the series' base-commit: as the base when the tree
// has it on one of its refs, else ErrNoCommit (and the caller keeps its default base).
func (b Base) WithBaseCommit(ctx context.Context, commit string) (Base, error) {
	if commit == "" {
		return b, ErrNoCommit
	}
	nb, err := resolve(ctx, b.Repo, commit)
	if err != nil || (nb.Commit != b.Commit && !reachable(ctx, b.Repo, nb.Commit)) {
		return b, fmt.Errorf("base-commit %s: %w", commit, ErrNoCommit)
	}
	return nb, nil
}
