package images

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"time"
)

// Build is one built kernel, kept in the cache under Dir.
type Build struct {
	BzImage string // path of arch/x86/boot/bzImage (a copy beside the log)
	// Vmlinux is the uncompressed ELF of the same kernel, beside BzImage:
	// vmrunner boots it at its PVH entry point, skipping firmware and
	// decompression.
	Vmlinux    string `json:",omitempty"`
	Config     string // path of the final .config
	Compiler   string // first line of "gcc --version"
	Log        string // path of the build log (the kernel's own output)
	Commit     string // the base commit
	Title      string // the base commit's subject line, e.g. "Import Debian linux-source-6.1 6.1.192-3"
	ConfigHash string // Config.Hash of the config's inputs
	Series     int    // number of patches applied on Commit; 0 for a base build
	// Head is the commit that was built: git am's last commit for a
	// patched build; empty for a base build (it is Commit).
	Head string
	Repo string // git repository the commit is in
	Dir  string // the build's directory in the cache
	Key  string // cache key: base commit, config hash, compiler (and series)

	Cached   bool          // true when this call found the build in the cache
	Duration time.Duration // how long this call took
	// Warnings are the compiler warnings in this build's log. A patched
	// build recompiles only what the series changed, so its log holds only
	// those files' warnings.
	Warnings []Warning
	// NewWarnings are the warnings the series added (patched builds only).
	NewWarnings []Warning
	// Dropped are requested options a series' Kconfig change turned off
	// (patched builds only; a base with any fails with a ConfigError).
	Dropped []Dropped `json:",omitempty"`
}

// Builder builds kernels from a base and a config into the cache.
type Builder struct {
	Cache    string        // cache directory (see CacheDir)
	Config   Config        // fragments and make variables
	Jobs     int           // make -j; all CPUs when 0
	Timeout  time.Duration // limit per build; 2 hours when 0
	Progress io.Writer     // a line per stage; nil for none
}

// DefaultKernel returns the default base build: Debian's linux-source-6.1
// with DefaultConfig, built once per machine and then taken from the cache.
func DefaultKernel(ctx context.Context, progress io.Writer) (*Build, error) {
	b, err := DefaultBuilder(progress)
	if err != nil {
		return nil, err
	}
	base, err := ImportDebian(ctx, b.Cache, progress)
	if err != nil {
		return nil, err
	}
	return b.Base(ctx, base)
}

// DefaultBuilder is a Builder with the default cache and config.
func DefaultBuilder(progress io.Writer) (*Builder, error) {
	cache, err := CacheDir()
	if err != nil {
		return nil, err
	}
	return &Builder{Cache: cache, Config: DefaultConfig(), Progress: progress}, nil
}

// Layout of one build directory in the cache.
const (
	treeDir   = "tree" // git worktree of the sources
	outDir    = ".out" // O= object tree, inside the worktree (see below)
	logFile   = "build.log"
	infoFile  = "build.json" // written last: its presence means complete
	imageFile = "bzImage"
	elfFile   = "vmlinux"
	confFile  = "config"
)

// The object tree sits directly inside the source tree, so Kbuild uses the
// relative srctree ".." and the kernel's own command lines hold no absolute
// paths. Host tools (objtool) do record absolute paths, so a patched build
// runs with its tree mounted at the base tree's path (see bind).

func (b *Builder) jobs() int {
	if b.Jobs > 0 {
		return b.Jobs
	}
	return runtime.NumCPU()
}

func (b *Builder) timeout() time.Duration {
	if b.Timeout > 0 {
		return b.Timeout
	}
	return 2 * time.Hour
}

// compilerVersion is part of the cache key: a new gcc means a new build.
func compilerVersion(ctx context.Context) (string, error) {
	out, err := exec.CommandContext(ctx, "gcc", "--version").Output()
	if err != nil {
		return "", infra("running gcc --version", err)
	}
	first, _, _ := strings.Cut(string(out), "\n")
	return first, nil
}

func hashKey(parts ...[]byte) string {
	h := sha256.New()
	for _, p := range parts {
		fmt.Fprintf(h, "%d\n", len(p))
		h.Write(p)
	}
	return hex.EncodeToString(h.Sum(nil))[:20]
}

// Base builds base with the builder's config, or returns the cached build.
func (b *Builder) Base(ctx context.Context, base Base) (*Build, error) {
	start := time.Now()
	cc, err := compilerVersion(ctx)
	if err != nil {
		return nil, err
	}
	bd := &Build{
		Commit: base.Commit, Repo: base.Repo, Compiler: cc, ConfigHash: b.Config.Hash(),
	}
	bd.Key = hashKey([]byte("base"), []byte(bd.Commit), []byte(bd.ConfigHash), []byte(cc))
	name := "base " + short(bd.Commit)
	return b.cached(ctx, bd, name, start, func(st *stages, sb *sandbox, log *os.File) error {
		tree := filepath.Join(bd.Dir, treeDir)
		err := st.run("checkout", func() error {
			// A build directory removed by hand (or by a disk clean-up) leaves its
			// worktree registered; forget such worktrees before adding this one.
			git(ctx, "", "--git-dir="+base.Repo, "worktree", "prune")
			_, err := git(ctx, "", "--git-dir="+base.Repo, "worktree", "add", "--detach", tree, base.Commit)
			return infra("checking out "+short(base.Commit), err)
		})
		if err != nil {
			return err
		}
		if err := st.run("configure", func() error { return b.configure(ctx, sb, log, tree) }); err != nil {
			return err
		}
		return st.run("make bzImage", func() error {
			err := b.make(ctx, sb, log, tree, nil, "bzImage")
			var be *BuildError
			if errors.As(err, &be) {
				// The base not building is not a patch's fault: no
				// BuildError in the chain.
				return infra("building base "+short(base.Commit),
					fmt.Errorf("%s (log %s)", strings.Join(be.Lines, "; "), be.Log))
			}
			return err
		})
	})
}

// cached runs build under the key's lock unless the cache has it.
func (b *Builder) cached(ctx context.Context, bd *Build, name string, start time.Time,
	build func(*stages, *sandbox, *os.File) error) (*Build, error) {
	if err := reachable(b.Cache); err != nil {
		return nil, err
	}
	kernels := filepath.Join(b.Cache, "kernels")
	bd.Dir = filepath.Join(kernels, bd.Key)
	unlock, err := lockFile(ctx, bd.Dir+".lock", b.Progress)
	if err != nil {
		return nil, err
	}
	defer unlock()
	if done, err := loadBuild(bd.Dir); err == nil {
		if done.Vmlinux == "" && addVmlinux(done) == nil {
			saveBuild(done) // a build from before vmlinux was kept
		}
		done.Cached = true
		done.Duration = time.Since(start)
		fmt.Fprintf(progressOr(b.Progress), "[%s] cached in %s (%.1fs)\n", name, done.Dir, done.Duration.Seconds())
		return done, nil
	}
	sb, err := newSandbox()
	if err != nil {
		return nil, err
	}
	// A partial build (killed, failed) is started again from scratch.
	if err := b.removeBuild(ctx, bd); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(bd.Dir, 0o755); err != nil {
		return nil, infra("creating build directory", err)
	}
	ccache := filepath.Join(b.Cache, "ccache")
	if err := os.MkdirAll(ccache, 0o755); err != nil {
		return nil, infra("creating ccache directory", err)
	}
	if err := sb.own(ccache); err != nil {
		return nil, err
	}
	bd.Log = filepath.Join(bd.Dir, logFile)
	log, err := os.Create(bd.Log)
	if err != nil {
		return nil, infra("creating build log", err)
	}
	defer log.Close()

	ctx, cancel := context.WithTimeout(ctx, b.timeout())
	defer cancel()
	st := newStages(b.Progress, name)
	tree := filepath.Join(bd.Dir, treeDir)
	if err := build(st, sb, log); err != nil {
		// Keep the log (the evidence), not the 1.3 GB tree.
		os.RemoveAll(tree)
		git(context.WithoutCancel(ctx), "", "--git-dir="+bd.Repo, "worktree", "prune")
		return nil, err
	}
	bd.BzImage = filepath.Join(bd.Dir, imageFile)
	bd.Config = filepath.Join(bd.Dir, confFile)
	if err := copyFile(filepath.Join(tree, outDir, "arch/x86/boot/bzImage"), bd.BzImage); err != nil {
		return nil, err
	}
	if err := copyFile(filepath.Join(tree, outDir, ".config"), bd.Config); err != nil {
		return nil, err
	}
	if err := addVmlinux(bd); err != nil {
		return nil, err
	}
	logData, err := os.ReadFile(bd.Log)
	if err != nil {
		return nil, infra("reading build log", err)
	}
	bd.Warnings = parseWarnings(logData)
	bd.Duration = time.Since(start) // kept in the record: how long the build took
	if err := saveBuild(bd); err != nil {
		return nil, err
	}
	return bd, nil
}

func progressOr(w io.Writer) io.Writer {
	if w == nil {
		return io.Discard
	}
	return w
}

// removeBuild deletes a build directory and its worktree registration.
func (b *Builder) removeBuild(ctx context.Context, bd *Build) error {
	if _, err := os.Stat(bd.Dir); err != nil {
		return nil
	}
	if err := os.RemoveAll(bd.Dir); err != nil {
		return infra("removing stale build "+bd.Dir, err)
	}
	_, err := git(ctx, "", "--git-dir="+bd.Repo, "worktree", "prune")
	return infra("pruning worktrees", err)
}

// env is the whole environment of sandboxed build commands.
func (b *Builder) env() []string {
	return []string{
		"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
		"HOME=/nonexistent",
		"LC_ALL=C", // plain quotes in gcc messages ('expires' undeclared)
		"CCACHE_DIR=" + filepath.Join(b.Cache, "ccache"),
		"CCACHE_MAXSIZE=10G",
		// Builds of different commits sit in different directories; hash
		// paths below the cache relative, so they share compiled objects.
		"CCACHE_BASEDIR=" + filepath.Join(b.Cache, "kernels"),
		"CCACHE_NOHASHDIR=1",
		"KBUILD_BUILD_USER=patchbot",
		"KBUILD_BUILD_HOST=patchbot",
	}
}

// makeArgs are the arguments of every make call: the object tree, the
// compilers through ccache, and the config's variables.
func (b *Builder) makeArgs(targets ...string) []string {
	args := []string{"make", "O=" + outDir, "-j" + strconv.Itoa(b.jobs()),
		"CC=ccache gcc", "HOSTCC=ccache gcc"}
	args = append(args, b.Config.MakeVars...)
	return append(args, targets...)
}

// configure makes the .config: tinyconfig, the fragments merged with the
// kernel's merge_config.sh, olddefconfig, then a check that every option
// the fragments asked for survived.
func (b *Builder) configure(ctx context.Context, sb *sandbox, log io.Writer, tree string) error {
	out := filepath.Join(tree, outDir)
	if err := os.MkdirAll(out, 0o755); err != nil {
		return infra("creating object tree", err)
	}
	if err := sb.own(out); err != nil {
		return err
	}
	frags := []string{"../scripts/kconfig/merge_config.sh", "-m", "-O", ".", ".config"}
	for i, f := range b.Config.Fragments {
		// Written outside the object tree: the build user must not change them.
		name := fmt.Sprintf("fragment-%d-%s", i, filepath.Base(f.Name))
		p := filepath.Join(tree, "..", name)
		if err := os.WriteFile(p, f.Data, 0o644); err != nil {
			return infra("writing config fragment", err)
		}
		frags = append(frags, p)
	}
	steps := []struct {
		dir  string
		argv []string
	}{
		{tree, b.makeArgs("tinyconfig")},
		// merge_config.sh writes temporary files in its working directory.
		{out, frags},
		{tree, b.makeArgs("olddefconfig")},
	}
	for _, s := range steps {
		if err := sb.run(ctx, log, s.dir, b.env(), nil, s.argv...); err != nil {
			return infra("configuring: "+strings.Join(s.argv, " "), err)
		}
	}
	final, err := os.ReadFile(filepath.Join(out, ".config"))
	if err != nil {
		return infra("reading .config", err)
	}
	if dropped := CheckConfig(b.Config.Fragments, final); len(dropped) > 0 {
		return &ConfigError{Dropped: dropped}
	}
	return nil
}

// make runs make in the sandbox; a failure is a BuildError with the error
// lines of the log, a timeout or a failure to start is the machine's.
func (b *Builder) make(ctx context.Context, sb *sandbox, log *os.File, tree string, at *bind, targets ...string) error {
	off, _ := log.Seek(0, io.SeekCurrent)
	err := sb.run(ctx, log, tree, b.env(), at, b.makeArgs(targets...)...)
	if err == nil {
		return nil
	}
	var exit *exec.ExitError
	if err == errTimeout || !errors.As(err, &exit) {
		return infra("running make "+strings.Join(targets, " "), err)
	}
	data, rerr := os.ReadFile(log.Name())
	if rerr != nil {
		return infra("reading build log", rerr)
	}
	if off < int64(len(data)) {
		data = data[off:]
	}
	return &BuildError{Lines: errorLines(data), Log: log.Name()}
}

// addVmlinux keeps the object tree's vmlinux beside the bzImage.
func addVmlinux(bd *Build) error {
	dst := filepath.Join(bd.Dir, elfFile)
	if err := copyFile(filepath.Join(bd.Dir, treeDir, outDir, "vmlinux"), dst); err != nil {
		return err
	}
	bd.Vmlinux = dst
	return nil
}

func loadBuild(dir string) (*Build, error) {
	data, err := os.ReadFile(filepath.Join(dir, infoFile))
	if err != nil {
		return nil, err
	}
	var bd Build
	if err := json.Unmarshal(data, &bd); err != nil {
		return nil, err
	}
	if _, err := os.Stat(bd.BzImage); err != nil {
		return nil, err
	}
	return &bd, nil
}

func saveBuild(bd *Build) error {
	data, err := json.MarshalIndent(bd, "", "  ")
	if err != nil {
		return infra("encoding build record", err)
	}
	tmp := filepath.Join(bd.Dir, infoFile+".tmp")
	if err := os.WriteFile(tmp, data, 0o644); err != nil {
		return infra("writing build record", err)
	}
	return infra("writing build record", os.Rename(tmp, filepath.Join(bd.Dir, infoFile)))
}

func copyFile(src, dst string) error {
	data, err := os.ReadFile(src)
	if err != nil {
		return infra("copying build output", err)
	}
	return infra("copying build output", os.WriteFile(dst, data, 0o644))
}

func short(commit string) string {
	if len(commit) > 12 {
		return commit[:12]
	}
	return commit
}
