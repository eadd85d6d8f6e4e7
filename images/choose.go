package images

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/patchbot/patchbot/blame"
	"github.com/patchbot/patchbot/internal/inert"
)

// Want is what a series says about its base, and what was asked for.
type Want struct {
	// Override is a tree name, "default", a commit or a ref, from
	// `patchbot run --base` or `#patchbot test base=...`: it wins.
	Override string
	// BaseCommit is the series' base-commit: trailer.
	BaseCommit string
	// Tags are the subject's tags besides PATCH, vN and m/n
	// ("net-next" of "[PATCH net-next v2 1/3]").
	Tags []string
	// Patches are the series' mails, in order, for the try-apply.
	Patches [][]byte
}

// How says why a base was chosen.
type How string

const (
	ByOverride   How = "override"    // asked for (--base, base=)
	ByBaseCommit How = "base-commit" // the series' base-commit
	ByTag        How = "tag"         // a subject tag names the tree
	ByApplying   How = "applies"     // the newest tree the whole series applies to
	ByDefault    How = "default"     // no tree configured: the kernel: base
)

// Choice is the base a series is tested on, and why.
type Choice struct {
	Base  Base
	Tree  string // the tree's name; DefaultTree for the kernel: base; empty for a commit no tree's branch holds
	Title string // the base commit's subject
	How   How
	// Detail completes How: the override as asked, the tag, the trees a
	// base-commit is in.
	Detail string
	// Notes say what did not decide it, e.g. a base-commit no tree has.
	Notes []string
	// Tried are the try-apply attempts, in order (How == ByApplying, or
	// a NoBaseError's).
	Tried []Attempt
}

// Attempt is one tree the series was tried on.
type Attempt struct {
	Tree   string
	Commit string
	Title  string
	// Err is why the series does not apply there; nil when it applies.
	Err *ApplyError
	// Unavailable says why the tree could not be tried (never fetched and
	// the fetch failed).
	Unavailable string
}

// NoBaseError says that the series applies to none of the trees it was
// tried on. It is the patch's when every tree was tried, the
// infrastructure's when some tree could not be (its fetch failed): the job
// is tried again later.
type NoBaseError struct {
	Tried []Attempt
}

func (e *NoBaseError) Error() string {
	var names []string
	for _, a := range e.Tried {
		names = append(names, a.Tree)
	}
	return fmt.Sprintf("the series applies to none of the trees tried (%s)", strings.Join(names, ", "))
}

// Blame: the patch's when every candidate was tried.
func (e *NoBaseError) Blame() blame.Blame {
	for _, a := range e.Tried {
		if a.Unavailable != "" {
			return blame.Infra
		}
	}
	return blame.Patch
}

// UnknownBaseError says that an asked-for base is neither a tree nor a
// commit any tree has. It is the asker's to fix, so it is answered, not
// retried: it blames the request (blame.Patch), never the machine.
type UnknownBaseError struct {
	Ref   string
	Trees []string // the names that would have been understood
}

func (e *UnknownBaseError) Error() string {
	return fmt.Sprintf("base %q is neither a tree (%s) nor a commit in one", e.Ref, strings.Join(e.Trees, ", "))
}

// Blame: the request named a base that does not exist.
func (e *UnknownBaseError) Blame() blame.Blame { return blame.Patch }

// Choose picks the base a series is tested on; a series longer than
// kernel.max_patches is a *TooManyPatchesError before anything else. The
// order: the base
// asked for; the series' base-commit, fetched if a tree has it; a subject
// tag that names a tree; else the newest tree (by its head's date) to
// which the whole series applies with a 3-way apply, the kernel: base
// last. With no trees configured it is the kernel: base (or the
// base-commit, when that tree has it), as before trees existed.
func (k *Kernels) Choose(ctx context.Context, w Want) (*Choice, error) {
	if n, max := len(w.Patches), k.Tree.maxPatches(); n > max {
		return nil, &TooManyPatchesError{Patches: n, Max: max}
	}
	if w.Override != "" {
		return k.override(ctx, w.Override)
	}
	var notes []string
	if w.BaseCommit != "" {
		c, note, err := k.byBaseCommit(ctx, w.BaseCommit)
		if err != nil || c != nil {
			return c, err
		}
		notes = append(notes, note)
		k.say("%s", note)
	}
	for _, tag := range w.Tags {
		tr, ok := k.Trees.ByTag(tag)
		if !ok {
			continue
		}
		c, err := k.treeHead(ctx, tr)
		if err != nil {
			return nil, err
		}
		c.How, c.Detail, c.Notes = ByTag, tag, notes
		return c, nil
	}
	cands, unavailable, err := k.candidates(ctx)
	if err != nil {
		return nil, err
	}
	if len(cands) == 1 && len(unavailable) == 0 {
		c := cands[0]
		c.How, c.Notes = ByDefault, notes
		return &c, nil
	}
	tried := append([]Attempt{}, unavailable...)
	for _, c := range cands {
		a := Attempt{Tree: c.Tree, Commit: c.Base.Commit, Title: c.Title}
		start := time.Now()
		err := TryApply(ctx, c.Base, w.Patches)
		var ae *ApplyError
		switch {
		case errors.As(err, &ae):
			a.Err = ae
			k.say("trees: the series does not apply to %s (%s): patch %d (%.1fs)", c.Tree, short(c.Base.Commit), ae.Index, time.Since(start).Seconds())
		case err != nil:
			return nil, err
		default:
			k.say("trees: the series applies to %s (%s) (%.1fs)", c.Tree, short(c.Base.Commit), time.Since(start).Seconds())
		}
		tried = append(tried, a)
		if a.Err == nil {
			c.How, c.Notes, c.Tried = ByApplying, notes, tried
			return &c, nil
		}
	}
	return nil, &NoBaseError{Tried: tried}
}

func (k *Kernels) say(format string, args ...any) {
	if k.Progress != nil {
		fmt.Fprintf(k.Progress, format+"\n", args...)
	}
}

// override resolves an asked-for base: a tree's name, "default", then a
// ref or commit of the kernel: base's repository, then a commit of the
// store (fetched when missing).
func (k *Kernels) override(ctx context.Context, ref string) (*Choice, error) {
	if !ValidRef(ref) {
		return nil, &UnknownBaseError{Ref: ref, Trees: k.names()}
	}
	if tr, ok := k.Trees.Lookup(ref); ok {
		c, err := k.treeHead(ctx, tr)
		if err != nil {
			return nil, err
		}
		c.How, c.Detail = ByOverride, ref
		return c, nil
	}
	def, err := k.open(ctx)
	if err != nil {
		return nil, err
	}
	if strings.EqualFold(ref, DefaultTree) {
		c := k.choice(ctx, def, DefaultTree)
		c.How, c.Detail = ByOverride, ref
		return &c, nil
	}
	if commit, ok := revParse(ctx, def.Repo, ref); ok && k.fromDefault(ctx, def, commit) {
		c := k.choice(ctx, Base{Repo: def.Repo, Commit: commit}, DefaultTree)
		c.How, c.Detail = ByOverride, ref
		return &c, nil
	}
	if !IsCommitID(ref) {
		return nil, &UnknownBaseError{Ref: ref, Trees: k.names()}
	}
	c, err := k.storeCommit(ctx, ref)
	if err != nil || c == nil {
		if err == nil {
			err = &UnknownBaseError{Ref: ref, Trees: k.names()}
		}
		return nil, err
	}
	c.How, c.Detail = ByOverride, ref
	return c, nil
}

// byBaseCommit finds the series' base-commit in the kernel: base's
// repository or the store, fetching the trees (and then the commit
// itself) when the store lacks it. A base-commit that is nowhere is not
// an error: the note says so and the choice goes on.
func (k *Kernels) byBaseCommit(ctx context.Context, commit string) (*Choice, string, error) {
	commit = strings.ToLower(strings.TrimSpace(commit))
	if !IsCommitID(commit) {
		return nil, fmt.Sprintf("the series' base-commit %q is not a commit id", commit), nil
	}
	def, err := k.open(ctx)
	if err != nil {
		return nil, "", err
	}
	if full, ok := revParse(ctx, def.Repo, commit); ok && k.fromDefault(ctx, def, full) {
		c := k.choice(ctx, Base{Repo: def.Repo, Commit: full}, DefaultTree)
		c.How = ByBaseCommit
		return &c, "", nil
	}
	if len(k.Trees.list()) == 0 {
		return nil, fmt.Sprintf("the series' base-commit %s is not in the tree", short(commit)), nil
	}
	c, err := k.storeCommit(ctx, commit)
	if err != nil || c == nil {
		return nil, fmt.Sprintf("the series' base-commit %s is in none of the trees (%s), fetched just now",
			short(commit), strings.Join(k.names()[1:], ", ")), err
	}
	c.How = ByBaseCommit
	return c, "", nil
}

// storeCommit finds commit in the store: as it is, after fetching every
// tree, then asking each tree's server for it. It returns nil when no
// tree has it.
func (k *Kernels) storeCommit(ctx context.Context, commit string) (*Choice, error) {
	t := k.Trees
	if len(t.list()) == 0 {
		return nil, nil
	}
	full, ok := t.fetched(ctx, commit)
	if !ok {
		k.say("trees: %s is not in the store; fetching every tree", short(commit))
		if err := t.Fetch(ctx); err != nil {
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			k.say("trees: %v", err) // a tree that failed may not be the one that has it
		}
		full, ok = t.fetched(ctx, commit)
	}
	if _, there := t.has(ctx, commit); there && !ok {
		// The store holds the object but no tree's ref reaches it: not
		// a commit patchbot fetched (an older patchbot's git am wrote
		// series' commits here). Asking a server for it would not help:
		// git skips the transfer of objects it has, and would name the
		// stranger's commit a fetched base.
		k.say("trees: %s is in the store but on no tree's branch: not a base", short(commit))
		return nil, nil
	}
	from := ""
	if !ok && len(commit) == 40 {
		tr, err := t.FetchCommit(ctx, commit)
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		if err == nil {
			full, ok, from = commit, true, tr
		}
	}
	if !ok {
		return nil, nil
	}
	in := t.Containing(ctx, full)
	name := from
	if len(in) > 0 {
		name = in[0]
	}
	c := k.choice(ctx, Base{Repo: t.Dir, Commit: full}, name)
	switch {
	case len(in) > 0:
		c.Detail = "in " + strings.Join(in, ", ")
	case from != "":
		c.Detail = "fetched from " + from
	}
	return &c, nil
}

// treeHead is a tree's head, fetched first when the store has none yet or
// it is older than FetchEvery.
func (k *Kernels) treeHead(ctx context.Context, tr Tree) (*Choice, error) {
	t := k.Trees
	if containsFold(t.Stale(time.Now()), tr.Name) {
		if err := t.Fetch(ctx, tr.Name); err != nil && ctx.Err() != nil {
			return nil, ctx.Err()
		}
	}
	head, ok := t.has(ctx, tr.Ref())
	if !ok {
		st := t.loadState()[tr.Name]
		return nil, infra("fetching tree "+tr.Name, fmt.Errorf("it has never been fetched: %s", st.Error))
	}
	c := k.choice(ctx, Base{Repo: t.Dir, Commit: head}, tr.Name)
	return &c, nil
}

// candidates are the bases to try, newest head first: every tree the
// store has (fetched first when stale) and the kernel: base. Trees that
// could not be fetched come back as unavailable attempts.
func (k *Kernels) candidates(ctx context.Context) ([]Choice, []Attempt, error) {
	var out []Choice
	var unavailable []Attempt
	if t := k.Trees; len(t.list()) > 0 {
		if stale := t.Stale(time.Now()); len(stale) > 0 {
			if err := t.Fetch(ctx, stale...); err != nil && ctx.Err() != nil {
				return nil, nil, ctx.Err()
			}
		}
		heads, err := t.Heads(ctx)
		if err != nil {
			return nil, nil, err
		}
		for _, h := range heads {
			if h.Commit == "" {
				unavailable = append(unavailable, Attempt{Tree: h.Name, Unavailable: "never fetched: " + h.FetchError})
				continue
			}
			out = append(out, Choice{Base: Base{Repo: t.Dir, Commit: h.Commit}, Tree: h.Name, Title: h.Title})
		}
	}
	def, err := k.open(ctx)
	if err != nil {
		return nil, nil, err
	}
	out = append(out, k.choice(ctx, def, DefaultTree))
	dates := make([]time.Time, len(out))
	for i, c := range out {
		_, dates[i] = commitInfo(ctx, c.Base.Repo, c.Base.Commit)
	}
	idx := make([]int, len(out))
	for i := range idx {
		idx[i] = i
	}
	sort.SliceStable(idx, func(a, b int) bool { return dates[idx[a]].After(dates[idx[b]]) })
	sorted := make([]Choice, len(out))
	for i, j := range idx {
		sorted[i] = out[j]
	}
	return sorted, unavailable, nil
}

// fromDefault reports whether commit of the kernel: base's repository may
// be a base: the configured base itself, or a commit reachable from one of
// the repository's refs (its branches and tags; the Debian import's tag).
// An object that is merely there (a series' commit that an older patchbot
// let git am write into this repository, or that anything else put there)
// is not a base.
func (k *Kernels) fromDefault(ctx context.Context, def Base, commit string) bool {
	return commit == def.Commit || reachable(ctx, def.Repo, commit)
}

func (k *Kernels) choice(ctx context.Context, b Base, tree string) Choice {
	return Choice{Base: b, Tree: tree, Title: b.title(ctx)}
}

// names are the bases an override may name: "default" and every tree.
func (k *Kernels) names() []string {
	out := []string{DefaultTree}
	for _, tr := range k.Trees.list() {
		out = append(out, tr.Name)
	}
	return out
}

func (t *Trees) list() []Tree {
	if t == nil {
		return nil
	}
	return t.Config.List
}

// TryApply says whether the whole series applies to base, as git am -3
// would apply it, without a checkout: each mail is split with git mailinfo
// and applied with git apply --cached (--3way when it does not fit) to a
// private index read from the base's tree. It costs a read of the tree
// into an index (about 0.2 s for a kernel) and an apply per patch. A
// series that does not apply is an *ApplyError naming the first patch that
// fails and its first failing hunk (what a plain apply reports on the tree
// the earlier patches left); a patch that changes nothing (already
// applied) fails as git am's "No changes" does. The repository is only
// read: new objects go to a scratch directory.
func TryApply(ctx context.Context, base Base, patches [][]byte) error {
	if len(patches) == 0 {
		return nil
	}
	dir, err := os.MkdirTemp("", "patchbot-try.")
	if err != nil {
		return infra("try-apply: creating a scratch directory", err)
	}
	defer os.RemoveAll(dir)
	index := filepath.Join(dir, "index")
	// New objects (the patched blobs, the trees of write-tree) go to the
	// scratch directory, the tree's own are borrowed: the repository is
	// read, never written.
	objects := filepath.Join(dir, "objects")
	if err := os.Mkdir(objects, 0o700); err != nil {
		return infra("try-apply: creating a scratch directory", err)
	}
	repoObjects := filepath.Join(base.Repo, "objects")
	run := func(stdin []byte, args ...string) ([]byte, []byte, error) {
		cmd := exec.CommandContext(ctx, "git", append([]string{"--git-dir=" + base.Repo}, args...)...)
		cmd.Env = append(os.Environ(), "GIT_INDEX_FILE="+index, "GIT_OBJECT_DIRECTORY="+objects,
			"GIT_ALTERNATE_OBJECT_DIRECTORIES="+repoObjects)
		cmd.Dir = dir
		if stdin != nil {
			cmd.Stdin = bytes.NewReader(stdin)
		}
		var out, errb bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errb
		err := cmd.Run()
		return out.Bytes(), errb.Bytes(), err
	}
	if _, stderr, err := run(nil, "read-tree", base.Commit); err != nil {
		return infra("try-apply: reading "+short(base.Commit), fmt.Errorf("%w: %s", err, bytes.TrimSpace(stderr)))
	}
	msg, patch := filepath.Join(dir, "msg"), filepath.Join(dir, "patch")
	tree, stderr, err := run(nil, "rev-parse", base.Commit+"^{tree}")
	if err != nil {
		return infra("try-apply: reading "+short(base.Commit), fmt.Errorf("%w: %s", err, bytes.TrimSpace(stderr)))
	}
	for i, mail := range patches {
		info, stderr, err := run(mail, "mailinfo", msg, patch)
		if err != nil {
			return &ApplyError{Index: i + 1, Output: inert.Bytes(capBytes(stderr, maxApplyOutput)), Hunk: "the mail holds no patch git can read"}
		}
		ae := &ApplyError{Index: i + 1, Subject: mailinfoSubject(info)}
		if st, err := os.Stat(patch); err != nil || st.Size() == 0 {
			ae.Output, ae.Hunk = []byte("Patch is empty."), "the mail holds no diff"
			return ae
		}
		// A plain apply first, as git am does: when it fits, no merge. When
		// it does not, its report is the first failing hunk, and the 3-way
		// merge (what -3 adds) decides.
		out, stderr, err := run(nil, "apply", "--cached", "--check", "-v", patch)
		args := []string{"apply", "--cached", patch}
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			ae.Hunk = capText(string(bytes.TrimSpace(append(out, stderr...))), maxQuotedLines, maxQuotedBytes)
			args = []string{"apply", "--cached", "--3way", "-v", patch}
		}
		out, stderr, err = run(nil, args...)
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			var exit *exec.ExitError
			if !errors.As(err, &exit) {
				return infra("try-apply: running git apply", err)
			}
			ae.Output = inert.Bytes(capBytes(append(out, stderr...), maxApplyOutput))
			return ae
		}
		after, _, err := run(nil, "write-tree")
		if err != nil {
			return infra("try-apply: writing the tree", err)
		}
		if bytes.Equal(tree, after) {
			ae.Output, ae.Hunk = []byte("No changes -- Patch already applied."), "the patch changes nothing: it is already applied"
			return ae
		}
		tree = after
	}
	return nil
}

// mailinfoSubject is the "Subject: " line git mailinfo prints, tags
// stripped as git am strips them.
func mailinfoSubject(info []byte) string {
	for _, l := range strings.Split(string(info), "\n") {
		if s, ok := strings.CutPrefix(l, "Subject: "); ok {
			return strings.TrimSpace(s)
		}
	}
	return ""
}
