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
	"syscall"
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
	// NewWarnings are the warnings the series added (patched builds
	// only), at most 50; MoreNewWarnings counts the rest.
	NewWarnings     []Warning
	MoreNewWarnings int `json:",omitempty"`
	// Dropped are requested options a series' Kconfig change turned off
	// (patched builds only; a base with any fails with a ConfigError).
	Dropped []Dropped `json:",omitempty"`
	// Changes are the lines the series changed, file by file, as the
	// patched tree numbers them (patched builds only; changes.go).
	Changes []Change `json:",omitempty"`
	// Steps counts kbuild's step lines in the log ("  CC  file.o"): the
	// next cold build of the same config reports its progress against it.
	Steps int `json:",omitempty"`
	// Limits and Timeout are what the build was allowed, Usage what it
	// used: a patched build stopped at a limit its base kept within is
	// the patch's (limits.go). Records made before they were kept say
	// nothing; their base was built under the default limits.
	Limits  *Limits       `json:",omitempty"`
	Timeout time.Duration `json:",omitempty"`
	Usage   *Usage        `json:",omitempty"`

	pin *os.File // the caller's hold on the build against eviction (evict.go)
}

// Builder builds kernels from a base and a config into the cache. Every
// build runs in the sandbox (sandbox.go).
type Builder struct {
	Cache    string        // cache directory (see CacheDir)
	Config   Config        // fragments and make variables
	Jobs     int           // make -j; all CPUs when 0
	Timeout  time.Duration // limit per build; 2 hours when 0
	Limits   Limits        // the sandbox's limits; DefaultLimits for zero fields
	Progress io.Writer     // a line per stage; nil for none
	// CacheSize caps the cache (evict.go); 0 takes DefaultCacheShare of
	// what its file system could give it.
	CacheSize int64

	bare bool // benchmark: build without the sandbox (see sandbox.bare)
	// mountObjects, when set, is called on a patched build's empty object
	// tree before the base's objects are copied in: a test mounts a small
	// file system there, so that filling the disk fills only that.
	mountObjects func(dir string) error
	// unmountObjects undoes mountObjects before a tree is removed.
	unmountObjects func(dir string)
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
	fragDir   = "fragments"
	logFile   = "build.log"
	infoFile  = "build.json" // written last: its presence means complete
	imageFile = "bzImage"
	elfFile   = "vmlinux"
	confFile  = "config"
)

// The object tree sits directly inside the source tree, so Kbuild uses the
// relative srctree ".." and the kernel's own command lines hold no absolute
// paths. Host tools (objtool) do record absolute paths, so a patched build
// runs with its tree mounted at the base tree's path (see patchedView).

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

// buildFormat is bumped when the way a kernel is built changes in a way
// that a build's inputs (tree, commit, config, compiler, patches) do not
// show: the make targets, the sandbox, the artifacts kept and checked. A
// bump sends every later build past the cached ones. Format 1's keys are
// the ones made before the number existed, so that it is a bump that
// empties the cache, not the number's arrival.
var buildFormat = 1

// hashKey is a build's cache key: its inputs, length-prefixed, and the
// build format.
func hashKey(parts ...[]byte) string {
	h := sha256.New()
	if buildFormat > 1 {
		fmt.Fprintf(h, "format %d\n", buildFormat)
	}
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
	return b.cached(ctx, bd, name, start, func(ctx context.Context, st *stages, sb *sandbox, log *buildLog) error {
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
		v := b.baseView(bd.Dir)
		if err := st.run("configure", func() error { return b.configure(ctx, sb, log, v) }); err != nil {
			return err
		}
		expected := expectedSteps(filepath.Join(b.Cache, "kernels"), bd.ConfigHash)
		return st.run("make bzImage", func() error {
			stop := reportMake(b.Progress, name, log, expected, makeProgressEvery)
			defer stop()
			return b.make(ctx, sb, log, v, "bzImage")
		})
	})
}

// baseView is what a base build's sandbox shows: its tree read-only, its
// object tree, config fragments and ccache, all at their own paths. The
// base's source is trusted (the Debian tarball, the operator's tree), so
// it may fill ccache; its Makefiles still run sandboxed.
func (b *Builder) baseView(dir string) view {
	tree := filepath.Join(dir, treeDir)
	return view{
		mounts: []mount{
			{src: tree, dst: tree},
			{src: filepath.Join(tree, outDir), dst: filepath.Join(tree, outDir), rw: true},
			{src: filepath.Join(dir, fragDir), dst: filepath.Join(dir, fragDir)},
			{src: b.ccacheDir(), dst: b.ccacheDir(), rw: true},
		},
		dir: tree,
		out: filepath.Join(tree, outDir),
	}
}

func (b *Builder) ccacheDir() string { return filepath.Join(b.Cache, "ccache") }

// cached runs build under the key's lock unless the cache has it, then
// takes the artifacts out of the object tree. build gets the context that
// carries the build's time limit: every step must use it, not the caller's.
func (b *Builder) cached(ctx context.Context, bd *Build, name string, start time.Time,
	build func(context.Context, *stages, *sandbox, *buildLog) error) (*Build, error) {
	kernels := filepath.Join(b.Cache, "kernels")
	for _, d := range []string{b.Cache, kernels} {
		if err := privateDir(d); err != nil {
			return nil, err
		}
	}
	bd.Dir = filepath.Join(kernels, bd.Key)
	unlock, err := lockFile(ctx, bd.Dir+".lock", b.Progress)
	if err != nil {
		return nil, err
	}
	defer unlock()
	if done, err := loadBuild(bd.Dir); err == nil {
		if done.Vmlinux == "" {
			// A build from before vmlinux was kept: take it from the
			// object tree, checked as a new build's artifacts are.
			if p, err := copyArtifact(filepath.Join(done.Dir, treeDir, outDir), vmlinuxArtifact, done.Dir); err == nil {
				done.Vmlinux = p
				saveBuild(done)
			}
		}
		done.Cached = true
		done.Duration = time.Since(start)
		touchUsed(done.Dir)
		done.pin = pin(done.Dir)
		fmt.Fprintf(progressOr(b.Progress), "[%s] cached in %s (%.1fs)\n", name, done.Dir, done.Duration.Seconds())
		return done, nil
	}
	sb, err := newSandbox(b.Limits, filepath.Join(b.Cache, "sandbox"))
	if err != nil {
		return nil, err
	}
	sb.bare = b.bare
	if bd.Series > 0 && sb.userns != nil && !sb.bare {
		return nil, infra("refusing an untrusted build", sb.userns)
	}
	// A partial build (killed, failed) is started again from scratch.
	if err := b.removeBuild(ctx, bd); err != nil {
		return nil, err
	}
	if err := privateDir(bd.Dir); err != nil {
		return nil, err
	}
	if bd.Series == 0 {
		if err := privateDir(b.ccacheDir()); err != nil {
			return nil, err
		}
		if err := sb.own(b.ccacheDir()); err != nil {
			return nil, err
		}
	}
	bd.Log = filepath.Join(bd.Dir, logFile)
	f, err := os.OpenFile(bd.Log, os.O_CREATE|os.O_TRUNC|os.O_WRONLY|syscall.O_NOFOLLOW, 0o600)
	if err != nil {
		return nil, infra("creating build log", err)
	}
	defer f.Close()
	log := newBuildLog(f, sb.limits.Log)

	// A patched build's record may come with a shorter time limit, drawn
	// from its base's (limits.go).
	limit := b.timeout()
	if bd.Timeout > 0 {
		limit = min(limit, bd.Timeout)
	}
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	st := newStages(b.Progress, name)
	tree := filepath.Join(bd.Dir, treeDir)
	err = build(ctx, st, sb, log)
	var ie *InfraError
	if errors.As(err, &ie) && !errors.Is(err, ErrTimeout) && errors.Is(ctx.Err(), context.DeadlineExceeded) {
		// A step outside make (copying the tree, git am) that the time
		// limit stopped failed for that reason.
		err = infra(name, fmt.Errorf("%w: %v", ErrTimeout, err))
	}
	if lerr := log.finish(); err == nil {
		err = lerr
	}
	if err == nil {
		err = b.collect(bd, filepath.Join(tree, outDir), log)
	}
	if b.unmountObjects != nil && (err != nil || bd.Series > 0) {
		b.unmountObjects(filepath.Join(tree, outDir))
	}
	if err == nil && bd.Series > 0 {
		// A patched build keeps its artifacts, not its tree: the next
		// build of any series starts from the base's again, and the
		// repository that holds the series' commits goes with it.
		err = infra("removing the patched tree", os.RemoveAll(tree))
	}
	if err != nil {
		// Keep the log (the evidence), not the 1.3 GB tree.
		os.RemoveAll(tree)
		if bd.Series == 0 {
			git(context.WithoutCancel(ctx), "", "--git-dir="+bd.Repo, "worktree", "prune")
		}
		if bd.Series == 0 {
			return nil, baseFailure(bd, err)
		}
		return nil, err
	}
	bd.Duration = time.Since(start) // kept in the record: how long the build took
	bd.Steps = log.stepCount()
	used := log.used
	used.Duration, used.Grew, used.FreeAtStart = bd.Duration, 0, 0
	bd.Limits, bd.Timeout, bd.Usage = &sb.limits, limit, &used
	if err := saveBuild(bd); err != nil {
		return nil, err
	}
	touchUsed(bd.Dir)
	bd.pin = pin(bd.Dir)
	// The new build may have taken the cache over its cap.
	if _, err := b.Evict(ctx); err != nil {
		fmt.Fprintf(progressOr(b.Progress), "cache: eviction failed: %v\n", err)
	}
	return bd, nil
}

// collect copies the artifacts out of the object tree obj into the build
// directory, checked (artifact.go), and keeps the log's warnings. An
// artifact that is not what it should be is the build's fault.
func (b *Builder) collect(bd *Build, obj string, log *buildLog) error {
	for _, a := range []struct {
		art artifact
		dst *string
	}{
		{bzImageArtifact, &bd.BzImage},
		{configArtifact, &bd.Config},
		{vmlinuxArtifact, &bd.Vmlinux}, // for a PVH boot (vmrunner)
	} {
		p, err := copyArtifact(obj, a.art, bd.Dir)
		var bad *badArtifact
		if errors.As(err, &bad) {
			return &BuildError{Lines: []string{"patchbot: " + bad.Error()}, Log: bd.Log}
		}
		if err != nil {
			return err
		}
		*a.dst = p
	}
	bd.Warnings = log.warnings
	return nil
}

// baseFailure makes any failure of a base build the machine's: the base is
// patchbot's choice, so no BuildError stays in the chain.
func baseFailure(bd *Build, err error) error {
	var be *BuildError
	if errors.As(err, &be) {
		return infra("building base "+short(bd.Commit),
			fmt.Errorf("%s (log %s)", strings.Join(be.Lines, "; "), be.Log))
	}
	return err
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

// env is the whole environment of sandboxed build commands. A base build
// fills ccache; a patched build has none (CCACHE_DISABLE: ccache runs the
// compiler and nothing else), so it can neither read nor poison it.
// ccache reads no ccache.conf (CCACHE_CONFIGPATH): a file planted in the
// cache directory by anyone changes nothing.
func (b *Builder) env(untrusted bool) []string {
	env := []string{
		"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
		"HOME=/nonexistent",
		"TMPDIR=/tmp",
		"LC_ALL=C", // plain quotes in gcc messages ('expires' undeclared)
		"KBUILD_BUILD_USER=patchbot",
		"KBUILD_BUILD_HOST=patchbot",
		"CCACHE_CONFIGPATH=/dev/null",
	}
	if untrusted {
		return append(env, "CCACHE_DISABLE=1")
	}
	maxsize := int64(10 << 30)
	if b.CacheSize > 0 {
		maxsize = min(maxsize, b.CacheSize/4) // a quarter of the cache's cap at most
	}
	return append(env,
		"CCACHE_DIR="+b.ccacheDir(),
		"CCACHE_MAXSIZE="+strconv.FormatInt(maxsize>>20, 10)+"M",
		// Builds of different commits sit in different directories; hash
		// paths below the cache relative, so they share compiled objects.
		"CCACHE_BASEDIR="+filepath.Join(b.Cache, "kernels"),
		"CCACHE_NOHASHDIR=1",
		// Depend mode: a miss compiles once and takes the headers from
		// the dependency file Kbuild asks gcc for (-Wp,-MMD), instead of
		// running the preprocessor a second time. Measured on the kernel/
		// and fs/ objects of the default kernel, a cold cache cost 33%
		// over plain gcc without it and nothing with it (docs/images.md).
		"CCACHE_DEPEND=1")
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
func (b *Builder) configure(ctx context.Context, sb *sandbox, log *buildLog, v view) error {
	out := filepath.Join(v.dir, outDir)
	if err := os.MkdirAll(out, 0o755); err != nil {
		return infra("creating object tree", err)
	}
	if err := sb.own(out); err != nil {
		return err
	}
	frags := []string{"../scripts/kconfig/merge_config.sh", "-m", "-O", ".", ".config"}
	// Outside the object tree, read-only in the sandbox: the build must
	// not change them. Readable by the build user (the directory above is
	// closed).
	dir := filepath.Join(filepath.Dir(v.dir), fragDir)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return infra("writing config fragments", err)
	}
	for i, f := range b.Config.Fragments {
		p := filepath.Join(dir, fmt.Sprintf("%d-%s", i, filepath.Base(f.Name)))
		if err := os.WriteFile(p, f.Data, 0o644); err != nil {
			return infra("writing config fragment", err)
		}
		frags = append(frags, p)
	}
	steps := []struct {
		dir  string
		argv []string
	}{
		{v.dir, b.makeArgs("tinyconfig")},
		// merge_config.sh writes temporary files in its working directory.
		{out, frags},
		{v.dir, b.makeArgs("olddefconfig")},
	}
	for _, s := range steps {
		sv := v
		sv.dir = s.dir
		o := sb.run(ctx, log, sv, b.env(false), s.argv...)
		if err := rootCause(o, log.f.Name()); err != nil {
			return fmt.Errorf("configuring (%s): %w", strings.Join(s.argv, " "), err)
		}
	}
	final, err := readArtifact(out, configArtifact)
	if err != nil {
		return infra("reading .config", err)
	}
	if dropped := CheckConfig(b.Config.Fragments, final); len(dropped) > 0 {
		return &ConfigError{Dropped: dropped}
	}
	return nil
}

// make runs make in the sandbox; rootCause says whose fault a failure is.
func (b *Builder) make(ctx context.Context, sb *sandbox, log *buildLog, v view, targets ...string) error {
	o := sb.run(ctx, log, v, b.env(v.untrusted), b.makeArgs(targets...)...)
	o.op = "make " + strings.Join(targets, " ")
	return rootCause(o, log.f.Name())
}

// BuildAt is the record of the build whose bzImage is at path, when it is
// one of the cache's (patchbot build's): its commits, vmlinux and the
// lines its series changed.
func BuildAt(bzImage string) (*Build, error) {
	abs, err := filepath.Abs(bzImage)
	if err != nil {
		return nil, err
	}
	bd, err := loadBuild(filepath.Dir(abs))
	if err != nil {
		return nil, fmt.Errorf("no build record beside %s: %w", bzImage, err)
	}
	if filepath.Clean(bd.BzImage) != abs {
		return nil, fmt.Errorf("the build record beside %s is of %s", bzImage, bd.BzImage)
	}
	return bd, nil
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
	return writeJSON(filepath.Join(bd.Dir, infoFile), bd, "writing build record")
}

// writeJSON replaces path with v as indented JSON, 0600, through a
// temporary file and a rename: a reader sees the old record or the new,
// never half of one.
func writeJSON(path string, v any, what string) error {
	data, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return infra(what, err)
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, data, 0o600); err != nil {
		return infra(what, err)
	}
	return infra(what, os.Rename(tmp, path))
}

func short(commit string) string {
	if len(commit) > 12 {
		return commit[:12]
	}
	return commit
}
