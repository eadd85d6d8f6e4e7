package images

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// Patched applies a series (raw mails, one patch each, in order) on a base
// build's commit and builds it incrementally from the base's objects. The
// result is cached by the base build's key and the series' bytes.
//
// A series that does not apply is an *ApplyError, one that does not build
// a *BuildError; both are the patch's fault. Other errors are the
// machine's (*InfraError, *ConfigError, context errors).
func (b *Builder) Patched(ctx context.Context, base *Build, patches [][]byte) (*Build, error) {
	start := time.Now()
	if base == nil || base.Series != 0 {
		return nil, errors.New("patched build: need a base build")
	}
	if len(patches) == 0 {
		return nil, errors.New("patched build: empty series")
	}
	// The base's tree is copied from: another run's eviction must wait.
	if hold := pin(base.Dir); hold != nil {
		defer hold.Close()
	}
	limit, cold := b.patchedTimeout(base)
	record := func() *Build {
		bd := patchedRecord(base, patches)
		bd.Timeout = limit
		return bd
	}
	bd := record()
	name := fmt.Sprintf("patched %s+%d", short(bd.Commit), len(patches))
	build := func(bd *Build) func(ctx context.Context, st *stages, sb *sandbox, log *buildLog) error {
		return b.patchedBuild(base, patches, bd)
	}
	got, err := b.cached(ctx, bd, name, start, build(bd))
	if lim := b.compare(base, err, limit, cold); lim != nil && ctx.Err() == nil {
		if lim.Resource == "time" && cold > 0 {
			// Far past what a cold build of the whole kernel takes on
			// this host: the patch's, answered at once (limits.go).
			err = limitError(lim, err, bd.Log)
		} else {
			// A limit the base kept within: the patch's, if it happens
			// again (limits.go).
			fmt.Fprintf(progressOr(b.Progress), "[%s] stopped at its %s limit, which the base kept within: building once more\n", name, lim.Resource)
			bd = record()
			got, err = b.cached(ctx, bd, name, time.Now(), build(bd))
			if lim := b.compare(base, err, limit, cold); lim != nil {
				err = limitError(lim, err, bd.Log)
			}
		}
	}
	if err != nil {
		return nil, err
	}
	if got.Cached && len(got.Changes) == 0 {
		// A record from before the changed lines were kept: the patches'
		// own hunks (exact for one patch; for a series, each patch's
		// lines as numbered after the patches before it).
		for _, p := range patches {
			got.Changes = mergeChanges(got.Changes, parseChanges(p))
		}
	}
	got.NewWarnings = newWarnings(base.Warnings, got.Warnings)
	if n := len(got.NewWarnings); n > maxNewWarnings {
		got.NewWarnings, got.MoreNewWarnings = got.NewWarnings[:maxNewWarnings], n-maxNewWarnings
	}
	if !got.Cached {
		if err := saveBuild(got); err != nil {
			return nil, err
		}
	}
	return got, nil
}

// patchedBuild is the work of one patched build into bd: copy the base's
// tree, git am -3 the series, make.
func (b *Builder) patchedBuild(base *Build, patches [][]byte, bd *Build) func(ctx context.Context, st *stages, sb *sandbox, log *buildLog) error {
	return func(ctx context.Context, st *stages, sb *sandbox, log *buildLog) error {
		tree := filepath.Join(bd.Dir, treeDir)
		if err := st.run("copy base tree", func() error { return b.copyTree(ctx, base, tree) }); err != nil {
			return err
		}
		if err := st.run("git am -3", func() error { return applySeries(ctx, tree, patches) }); err != nil {
			return err
		}
		head, err := git(ctx, tree, "rev-parse", "HEAD")
		if err != nil {
			return infra("reading the patched commit", err)
		}
		bd.Head = strings.TrimSpace(string(head))
		if bd.Changes, err = changes(ctx, tree, base.Commit); err != nil {
			return err
		}
		v := patchedView(base, tree)
		if err := sb.own(v.out); err != nil {
			return err
		}
		if err := st.run("make bzImage", func() error { return b.make(ctx, sb, log, v, "bzImage") }); err != nil {
			return err
		}
		// make re-ran Kconfig if the series touched it: say what it lost.
		final, err := readArtifact(v.out, configArtifact)
		var bad *badArtifact
		if errors.As(err, &bad) {
			return &BuildError{Lines: []string{"patchbot: " + bad.Error()}, Log: log.f.Name()}
		}
		if err != nil {
			return err
		}
		bd.Dropped = CheckConfig(b.Config.Fragments, final)
		return nil
	}
}

// patchedView is what a patched build's sandbox shows: its own tree,
// read-only, on the base tree's path (so that the absolute paths the
// base's host tools recorded name the patched sources, and make rebuilds
// only what the series changed), and its own object tree there, the only
// thing it may write. Nothing of the base build, ccache or the cache.
func patchedView(base *Build, tree string) view {
	at := filepath.Join(base.Dir, treeDir)
	return view{
		mounts: []mount{
			{src: tree, dst: at},
			{src: filepath.Join(tree, outDir), dst: filepath.Join(at, outDir), rw: true},
		},
		dir:       at,
		out:       filepath.Join(tree, outDir),
		untrusted: true,
	}
}

// patchedRecord is the start of a patched build's record, with its key.
func patchedRecord(base *Build, patches [][]byte) *Build {
	// "sandbox 2": builds made before every build was sandboxed are not
	// reused; their artifacts were copied following the build's links.
	parts := [][]byte{[]byte("patched"), []byte("sandbox 2"), []byte(base.Key)}
	bd := &Build{
		Commit: base.Commit, Repo: base.Repo, Compiler: base.Compiler, ConfigHash: base.ConfigHash,
		Series: len(patches),
	}
	bd.Key = hashKey(append(parts, patches...)...)
	return bd
}

// copyTree makes tree a checkout of base's commit, in a repository of its
// own (buildRepo), whose source files are hard links of the base build's, with the same mtimes, and whose object
// tree is a real copy of the base's. make then rebuilds only what git am
// changes. The links are safe because nothing writes through them: the
// build sees its sources read-only, and git am, which runs outside the
// sandbox, replaces a file it patches (new inode) rather than writing in
// place. The object tree, the only thing the build writes, is its own
// (cp --reflink=auto: a real copy on ext4, a copy-on-write clone where the
// file system has them), never a link to the base's objects.
func (b *Builder) copyTree(ctx context.Context, base *Build, tree string) error {
	baseTree := filepath.Join(base.Dir, treeDir)
	if err := buildRepo(ctx, Base{Repo: base.Repo, Commit: base.Commit}, tree); err != nil {
		return err
	}
	entries, err := os.ReadDir(baseTree)
	if err != nil {
		return infra("reading base tree", err)
	}
	var srcs []string
	for _, e := range entries {
		if e.Name() == ".git" || e.Name() == outDir {
			continue
		}
		srcs = append(srcs, filepath.Join(baseTree, e.Name()))
	}
	cp := func(args ...string) error {
		out, err := exec.CommandContext(ctx, "cp", args...).CombinedOutput()
		if err != nil {
			return infra("copying base tree", fmt.Errorf("cp %s: %w: %s", args[0], err, out))
		}
		return nil
	}
	if err := cp(append([]string{"-al", "-t", tree}, srcs...)...); err != nil {
		return err
	}
	obj := filepath.Join(tree, outDir)
	if err := os.Mkdir(obj, 0o755); err != nil {
		return infra("creating object tree", err)
	}
	if b.mountObjects != nil {
		if err := b.mountObjects(obj); err != nil {
			return infra("mounting object tree", err)
		}
	}
	// Objects are written in place (objtool edits .o files): a real copy.
	if err := cp("-a", "--reflink=auto", "-T", filepath.Join(baseTree, outDir), obj); err != nil {
		return err
	}
	// The base's index already describes these files; copy it instead of
	// hashing the whole tree again.
	baseIndex, err := gitPath(ctx, baseTree, "index")
	if err != nil {
		return err
	}
	index, err := gitPath(ctx, tree, "index")
	if err != nil {
		return err
	}
	if err := cp("-p", baseIndex, index); err != nil {
		return err
	}
	args := append(append([]string{}, gitStat...), "update-index", "-q", "--refresh")
	if _, err := git(ctx, tree, args...); err != nil {
		return infra("refreshing index", err)
	}
	return nil
}

// buildRepo makes tree a git repository of its own whose HEAD is base's
// commit, borrowing base's objects through git's alternates. Alternates
// are only ever read, so the commits git am makes for a series (and
// every object of the patches) are written here, in the build's own
// directory, and never into the shared repository that bases are looked
// up in: nothing a series brought can be found there, let alone become a
// base (docs/images.md, "Provenance").
func buildRepo(ctx context.Context, base Base, tree string) error {
	if _, err := git(ctx, "", "init", "-q", tree); err != nil {
		return infra("creating the build's repository", err)
	}
	objects, err := git(ctx, "", "--git-dir="+base.Repo, "rev-parse", "--path-format=absolute", "--git-path", "objects")
	if err != nil {
		return infra("finding the base's objects", err)
	}
	alt := filepath.Join(tree, ".git", "objects", "info", "alternates")
	if err := os.WriteFile(alt, append(bytes.TrimSpace(objects), '\n'), 0o644); err != nil {
		return infra("borrowing the base's objects", err)
	}
	for _, kv := range [][2]string{{"gc.auto", "0"}, {"maintenance.auto", "false"}, {"core.checkStat", "minimal"}, {"core.trustctime", "false"}} {
		if _, err := git(ctx, tree, "config", kv[0], kv[1]); err != nil {
			return infra("configuring the build's repository", err)
		}
	}
	if _, err := git(ctx, tree, "update-ref", "--no-deref", "HEAD", base.Commit); err != nil {
		return infra("setting the build's HEAD to "+short(base.Commit), err)
	}
	return nil
}

// gitPath is the path of a file in a worktree's git directory.
func gitPath(ctx context.Context, tree, name string) (string, error) {
	out, err := git(ctx, tree, "rev-parse", "--git-path", name)
	if err != nil {
		return "", infra("finding "+name, err)
	}
	p := strings.TrimSpace(string(out))
	if !filepath.IsAbs(p) {
		p = filepath.Join(tree, p)
	}
	return p, nil
}
