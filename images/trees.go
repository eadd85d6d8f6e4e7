package images

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// TreesConfig is the `trees:` part of patchbot.yaml: the kernel trees a
// series may be tested on (mainline, linux-next, subsystem trees), fetched
// into one object store. With no trees, every series is tested on the
// `kernel:` base (Debian's linux-source-6.1 by default), offline.
type TreesConfig struct {
	// List names the trees. A base-commit found in several is said to be
	// in the first listed.
	List []Tree `yaml:"list"`
	// FetchEvery is how often every tree is fetched: the daemon fetches on
	// this schedule, and a job fetches a tree whose last fetch is older.
	// 0 fetches a tree only when it was never fetched or a job's base is
	// missing.
	FetchEvery time.Duration `yaml:"fetch_every"`
	// FetchTimeout bounds one tree's fetch.
	FetchTimeout time.Duration `yaml:"fetch_timeout"`
	// Store is the bare repository that holds every tree's objects, one
	// remote per tree; default trees/store.git under the cache.
	Store string `yaml:"store"`
}

// Tree is one kernel tree: a git URL and the branch series are written
// against, and the subject tags that name it ("[PATCH net-next]").
type Tree struct {
	Name   string   `yaml:"name"`
	URL    string   `yaml:"url"`
	Branch string   `yaml:"branch"`
	Tags   []string `yaml:"tags"`
}

// DefaultTree is the name of the `kernel:` base among the candidates (the
// Debian import, or the operator's own tree): a configured tree may not
// take it.
const DefaultTree = "default"

// DefaultTrees are the defaults of the trees: part: no tree, and the
// figures a job waits for at most.
func DefaultTrees() TreesConfig {
	return TreesConfig{FetchEvery: 6 * time.Hour, FetchTimeout: 30 * time.Minute}
}

var (
	// treeNameRe keeps a tree's name usable as a git remote and a ref
	// component, and as a word in a command (base=NAME).
	treeNameRe = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$`)
	// refNameRe is a branch, tag or commit as a person or a mail may give
	// it: no option (leading "-"), no revision syntax ("..", "@{", "^").
	refNameRe = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._/-]{0,199}$`)
	// commitRe is a commit id, abbreviated or not.
	commitRe = regexp.MustCompile(`^[0-9a-f]{7,40}$`)
	// transportRe is git's "<transport>::<address>" form (ext::, fd::),
	// which runs commands: never from a config.
	transportRe = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9+.-]*::`)
)

// ValidRef reports whether s may be looked up as a ref or commit: it
// cannot be read by git as an option or as revision syntax.
func ValidRef(s string) bool {
	return refNameRe.MatchString(s) && !strings.Contains(s, "..") && !strings.HasSuffix(s, ".lock") &&
		!strings.HasSuffix(s, "/") && !strings.HasSuffix(s, ".") && !strings.Contains(s, "//")
}

// IsCommitID reports whether s is written as a commit id (7 to 40 hex
// digits, lower case).
func IsCommitID(s string) bool { return commitRe.MatchString(s) }

// Validate checks names, URLs, branches and tags.
func (c TreesConfig) Validate() error {
	var errs []error
	names, tags := map[string]bool{}, map[string]string{}
	for i, t := range c.List {
		where := fmt.Sprintf("trees.list[%d]", i)
		if t.Name != "" {
			where = "trees " + t.Name
		}
		switch {
		case !treeNameRe.MatchString(t.Name) || !ValidRef(t.Name):
			errs = append(errs, fmt.Errorf("%s: name %q: want letters, digits, '.', '_', '-'", where, t.Name))
		case strings.EqualFold(t.Name, DefaultTree):
			errs = append(errs, fmt.Errorf("%s: the name %q is the kernel: base's", where, DefaultTree))
		case names[strings.ToLower(t.Name)]:
			errs = append(errs, fmt.Errorf("%s: two trees are named %q", where, t.Name))
		}
		names[strings.ToLower(t.Name)] = true
		switch {
		case t.URL == "":
			errs = append(errs, fmt.Errorf("%s: url is empty", where))
		case strings.HasPrefix(t.URL, "-") || transportRe.MatchString(t.URL) || strings.ContainsAny(t.URL, "\n\x00"):
			errs = append(errs, fmt.Errorf("%s: url %q: want a git URL or path", where, t.URL))
		}
		if !ValidRef(t.Branch) {
			errs = append(errs, fmt.Errorf("%s: branch %q: want a branch name (e.g. master)", where, t.Branch))
		}
		for _, tag := range t.Tags {
			low := strings.ToLower(tag)
			if !ValidRef(tag) {
				errs = append(errs, fmt.Errorf("%s: tag %q: want a subject tag such as net-next", where, tag))
			} else if other, dup := tags[low]; dup {
				errs = append(errs, fmt.Errorf("%s: tag %q already names %s", where, tag, other))
			}
			tags[low] = t.Name
		}
	}
	if c.FetchEvery < 0 || (c.FetchEvery > 0 && c.FetchEvery < time.Minute) {
		errs = append(errs, fmt.Errorf("trees.fetch_every %v: want 0 (on demand) or at least 1m", c.FetchEvery))
	}
	if c.FetchTimeout < 0 {
		errs = append(errs, fmt.Errorf("trees.fetch_timeout %v: negative", c.FetchTimeout))
	}
	return errors.Join(errs...)
}

// Trees is the configured trees and their object store: one bare
// repository, one remote per tree, each tree's branch kept at
// refs/remotes/NAME/BRANCH.
type Trees struct {
	Config   TreesConfig
	Dir      string    // the store (a bare repository)
	Progress io.Writer // a line per fetch; nil for none
}

// NewTrees is the trees of a config, with the store under cache unless
// the config names one. Nothing is touched on disk until a fetch.
func NewTrees(c TreesConfig, cache string) *Trees {
	dir := c.Store
	if dir == "" {
		dir = filepath.Join(cache, "trees", "store.git")
	}
	return &Trees{Config: c, Dir: dir}
}

// Lookup returns the tree named name (case-insensitive).
func (t *Trees) Lookup(name string) (Tree, bool) {
	if t == nil {
		return Tree{}, false
	}
	for _, tr := range t.Config.List {
		if strings.EqualFold(tr.Name, name) {
			return tr, true
		}
	}
	return Tree{}, false
}

// ByTag returns the tree a subject tag names: one of its tags, or its
// name ([PATCH net-next] names a tree called net-next).
func (t *Trees) ByTag(tag string) (Tree, bool) {
	if t == nil {
		return Tree{}, false
	}
	for _, tr := range t.Config.List {
		for _, tg := range tr.Tags {
			if strings.EqualFold(tg, tag) {
				return tr, true
			}
		}
	}
	return t.Lookup(tag)
}

// Ref is where the store keeps the tree's branch.
func (tr Tree) Ref() string { return "refs/remotes/" + tr.Name + "/" + tr.Branch }

// Head is a tree as the store has it.
type Head struct {
	Tree
	Commit string    // empty when the tree was never fetched
	Title  string    // the head commit's subject
	Date   time.Time // its committer date: "newest first" orders by it
	// Fetched is when the tree was last fetched successfully; FetchError
	// is the last attempt's failure, if it failed.
	Fetched    time.Time
	FetchError string
}

// fetchState is what the store remembers of each tree's fetches.
type fetchState struct {
	Fetched   time.Time `json:"fetched,omitzero"`
	Attempted time.Time `json:"attempted"`
	Error     string    `json:"error,omitempty"`
}

const fetchStateFile = "patchbot-fetch.json"

func (t *Trees) loadState() map[string]fetchState {
	st := map[string]fetchState{}
	if data, err := os.ReadFile(filepath.Join(t.Dir, fetchStateFile)); err == nil {
		json.Unmarshal(data, &st) // a damaged file only forgets fetch times
	}
	return st
}

func (t *Trees) saveState(st map[string]fetchState) error {
	return writeJSON(filepath.Join(t.Dir, fetchStateFile), st, "recording fetches")
}

// init makes the store and points one remote at each tree.
func (t *Trees) init(ctx context.Context) error {
	if _, err := os.Stat(filepath.Join(t.Dir, "HEAD")); err != nil {
		if err := os.MkdirAll(filepath.Dir(t.Dir), 0o755); err != nil {
			return infra("creating the tree store", err)
		}
		if _, err := treeGit(ctx, "", "init", "-q", "--bare", t.Dir); err != nil {
			return infra("creating the tree store "+t.Dir, err)
		}
	}
	for _, tr := range t.Config.List {
		for _, kv := range [][2]string{
			{"remote." + tr.Name + ".url", tr.URL},
			{"remote." + tr.Name + ".fetch", "+refs/heads/" + tr.Branch + ":" + tr.Ref()},
			{"remote." + tr.Name + ".tagOpt", "--no-tags"},
		} {
			if _, err := treeGit(ctx, t.Dir, "config", "--replace-all", kv[0], kv[1]); err != nil {
				return infra("configuring remote "+tr.Name, err)
			}
		}
	}
	return nil
}

func (t *Trees) fetchTimeout() time.Duration {
	if t.Config.FetchTimeout > 0 {
		return t.Config.FetchTimeout
	}
	return 30 * time.Minute
}

// Fetch fetches the named trees (every tree when none is named), one after
// the other, and records when. It returns the failures, joined; a tree
// that fails does not stop the others.
func (t *Trees) Fetch(ctx context.Context, names ...string) error {
	if len(t.Config.List) == 0 {
		return nil
	}
	unlock, err := lockFile(ctx, t.Dir+".lock", t.Progress)
	if err != nil {
		return err
	}
	defer unlock()
	if err := t.init(ctx); err != nil {
		return err
	}
	st := t.loadState()
	var errs []error
	for _, tr := range t.Config.List {
		if len(names) > 0 && !containsFold(names, tr.Name) {
			continue
		}
		start := time.Now()
		fctx, cancel := context.WithTimeout(ctx, t.fetchTimeout())
		// The commit graph keeps "is the base-commit in this tree?" fast on
		// a history of a million commits.
		_, err := treeGit(fctx, t.Dir, "-c", "fetch.writeCommitGraph=true", "fetch", "--quiet", "--no-tags", "--prune", tr.Name)
		cancel()
		s := st[tr.Name]
		s.Attempted = time.Now().UTC()
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			s.Error = firstLineOf(err.Error())
			errs = append(errs, infra("fetching tree "+tr.Name, err))
			fmt.Fprintf(progressOr(t.Progress), "trees: fetching %s failed: %s\n", tr.Name, s.Error)
		} else {
			s.Fetched, s.Error = s.Attempted, ""
			fmt.Fprintf(progressOr(t.Progress), "trees: fetched %s (%s) in %.1fs\n", tr.Name, tr.Branch, time.Since(start).Seconds())
		}
		st[tr.Name] = s
	}
	if err := t.saveState(st); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// Stale lists the trees never fetched, or last fetched longer than
// FetchEvery ago (never only, when FetchEvery is 0).
func (t *Trees) Stale(now time.Time) []string {
	st := t.loadState()
	var out []string
	for _, tr := range t.Config.List {
		f := st[tr.Name].Fetched
		if f.IsZero() || (t.Config.FetchEvery > 0 && now.Sub(f) > t.Config.FetchEvery) {
			out = append(out, tr.Name)
		}
	}
	return out
}

// Heads are the trees as the store has them, in config order.
func (t *Trees) Heads(ctx context.Context) ([]Head, error) {
	st := t.loadState()
	var out []Head
	for _, tr := range t.Config.List {
		h := Head{Tree: tr, Fetched: st[tr.Name].Fetched, FetchError: st[tr.Name].Error}
		if c, ok := t.has(ctx, tr.Ref()); ok {
			h.Commit = c
			h.Title, h.Date = commitInfo(ctx, t.Dir, c)
		}
		out = append(out, h)
	}
	return out, nil
}

// has resolves rev to a commit in the store.
func (t *Trees) has(ctx context.Context, rev string) (string, bool) {
	if _, err := os.Stat(filepath.Join(t.Dir, "HEAD")); err != nil {
		return "", false
	}
	return revParse(ctx, t.Dir, rev)
}

// fetched resolves rev to a commit of the store that patchbot fetched from
// a tree: reachable from a tree's branch (refs/remotes/) or a commit
// fetched on its own (refs/bases/). An object the store merely holds is
// not one (docs/images.md, "Provenance").
func (t *Trees) fetched(ctx context.Context, rev string) (string, bool) {
	full, ok := t.has(ctx, rev)
	if !ok || !reachable(ctx, t.Dir, full, "refs/remotes/", "refs/bases/") {
		return "", false
	}
	return full, true
}

// reachable reports whether commit is reachable from a ref of repo under
// one of prefixes (every ref under refs/ when none is given). Refs only:
// not HEAD, a worktree's HEAD or ORIG_HEAD, which a git am may have moved.
func reachable(ctx context.Context, repo, commit string, prefixes ...string) bool {
	if len(prefixes) == 0 {
		prefixes = []string{"refs/"}
	}
	args := append([]string{"for-each-ref", "--count=1", "--format=%(refname)", "--contains=" + commit}, prefixes...)
	out, err := treeGit(ctx, repo, args...)
	return err == nil && len(bytes.TrimSpace(out)) > 0
}

// Containing lists the trees whose branch contains commit, in config
// order.
func (t *Trees) Containing(ctx context.Context, commit string) []string {
	var out []string
	for _, tr := range t.Config.List {
		head, ok := t.has(ctx, tr.Ref())
		if !ok {
			continue
		}
		if head == commit {
			out = append(out, tr.Name)
			continue
		}
		if _, err := treeGit(ctx, t.Dir, "merge-base", "--is-ancestor", commit, head); err == nil {
			out = append(out, tr.Name)
		}
	}
	return out
}

// FetchCommit asks each tree's server for one commit (a base-commit that
// is on no branch head: an older linux-next, a tag), and keeps it under
// refs/bases/ so that it is not pruned. It returns the tree that had it.
func (t *Trees) FetchCommit(ctx context.Context, commit string) (string, error) {
	if len(commit) != 40 || !IsCommitID(commit) {
		return "", fmt.Errorf("fetching %s: servers give only full commit ids", commit)
	}
	unlock, err := lockFile(ctx, t.Dir+".lock", t.Progress)
	if err != nil {
		return "", err
	}
	defer unlock()
	if err := t.init(ctx); err != nil {
		return "", err
	}
	var errs []error
	for _, tr := range t.Config.List {
		fctx, cancel := context.WithTimeout(ctx, t.fetchTimeout())
		_, err := treeGit(fctx, t.Dir, "fetch", "--quiet", "--no-tags", "--no-write-fetch-head", tr.Name, commit+":refs/bases/"+commit)
		cancel()
		if err == nil {
			return tr.Name, nil
		}
		if ctx.Err() != nil {
			return "", ctx.Err()
		}
		errs = append(errs, fmt.Errorf("%s: %s", tr.Name, firstLineOf(err.Error())))
	}
	return "", fmt.Errorf("no tree has %s: %w", short(commit), errors.Join(errs...))
}

// revParse resolves rev to a commit id in repo.
func revParse(ctx context.Context, repo, rev string) (string, bool) {
	out, err := treeGit(ctx, repo, "rev-parse", "--verify", "--quiet", rev+"^{commit}")
	if err != nil {
		return "", false
	}
	return strings.TrimSpace(string(out)), true
}

// commitInfo is a commit's subject and committer date.
func commitInfo(ctx context.Context, repo, commit string) (string, time.Time) {
	out, err := treeGit(ctx, repo, "log", "-1", "--format=%ct %s", commit)
	if err != nil {
		return "", time.Time{}
	}
	ts, subject, _ := strings.Cut(strings.TrimSpace(string(out)), " ")
	sec, _ := strconv.ParseInt(ts, 10, 64)
	return subject, time.Unix(sec, 0).UTC()
}

// treeGit runs git on repo (a bare repository; "" for none) as patchbot
// itself, with no prompt for credentials and no transport that runs
// commands, and returns its standard output; the error carries stderr.
func treeGit(ctx context.Context, repo string, args ...string) ([]byte, error) {
	full := []string{"-c", "protocol.ext.allow=never", "-c", "protocol.fd.allow=never"}
	if repo != "" {
		full = append(full, "--git-dir="+repo)
	}
	full = append(full, args...)
	cmd := exec.CommandContext(ctx, "git", full...)
	cmd.Env = append(os.Environ(), "GIT_TERMINAL_PROMPT=0", "GIT_ASKPASS=/bin/false", "SSH_ASKPASS=/bin/false",
		"GIT_AUTHOR_NAME=patchbot", "GIT_AUTHOR_EMAIL=patchbot@localhost",
		"GIT_COMMITTER_NAME=patchbot", "GIT_COMMITTER_EMAIL=patchbot@localhost")
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		return out.Bytes(), fmt.Errorf("git %s: %w: %s", subcommand(args), err, bytes.TrimSpace(errb.Bytes()))
	}
	return out.Bytes(), nil
}

func containsFold(list []string, s string) bool {
	for _, x := range list {
		if strings.EqualFold(x, s) {
			return true
		}
	}
	return false
}

func firstLineOf(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		s = s[:i]
	}
	return s
}
