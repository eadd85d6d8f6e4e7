package mailbox

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha1"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"
)

// A public-inbox v2 archive is a set of git repositories, its epochs
// (<list>/git/N.git, listed with their fingerprints in
// <list>/manifest.js.gz), each message one commit whose tree holds the
// mail as the blob "m". A new epoch starts when the last one is about a
// gigabyte. The commits are the archive's own order: what grokmirror and
// lei follow, and what a lore source with a Mirror follows (pollGit).

const loreGitPrefix = "lore2:"

// maxEpoch bounds the epoch numbers a manifest may name.
const maxEpoch = 9999

// gitCursor is a lore source's place in the archive's log: for each
// epoch from the first one it reads, the last commit read ("" when it has
// read none of that epoch yet). An epoch below the first one listed lies
// before the source's start point and is never read; an epoch above the
// last one listed is new and is read from its first commit.
//
// The form is "lore2:N=HASH,N+1=HASH,..."; while an older patchbot's feed
// cursor is being migrated it follows a ';' (see migrate).
type gitCursor struct {
	epochs map[int]string
	legacy string
}

func parseGitCursor(cur string) (*gitCursor, error) {
	rest, ok := strings.CutPrefix(cur, loreGitPrefix)
	if !ok {
		return nil, fmt.Errorf("lore cursor %q is not a git cursor", cur)
	}
	c := &gitCursor{epochs: map[int]string{}}
	rest, c.legacy, _ = strings.Cut(rest, ";")
	if rest == "" {
		return c, nil
	}
	for _, item := range strings.Split(rest, ",") {
		n, h, ok := strings.Cut(item, "=")
		e, err := strconv.Atoi(n)
		if !ok || err != nil || e < 0 || e > maxEpoch || (h != "" && !isCommitHash(h)) {
			return nil, fmt.Errorf("lore cursor %q is damaged", cur)
		}
		c.epochs[e] = h
	}
	return c, nil
}

func (c *gitCursor) String() string {
	ns := make([]int, 0, len(c.epochs))
	for n := range c.epochs {
		ns = append(ns, n)
	}
	sort.Ints(ns)
	var b strings.Builder
	b.WriteString(loreGitPrefix)
	for i, n := range ns {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.Itoa(n) + "=" + c.epochs[n])
	}
	if c.legacy != "" {
		b.WriteString(";" + c.legacy)
	}
	return b.String()
}

// first is the lowest epoch the cursor lists, -1 when it lists none (every
// epoch is to be read from its start).
func (c *gitCursor) first() int {
	first := -1
	for n := range c.epochs {
		if first < 0 || n < first {
			first = n
		}
	}
	return first
}

func isCommitHash(s string) bool {
	if len(s) != 40 && len(s) != 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// epoch is one git repository of the archive, as its manifest describes it.
type epoch struct {
	n           int
	fingerprint string // SHA-1 of the repository's `git show-ref`
	modified    int64  // the newest committer time of its refs
}

// maxManifest bounds a decompressed manifest: a small gzip can inflate
// without end.
const maxManifest = 16 << 20

// errNoGit says that the archive serves no git epochs of this list.
var errNoGit = errors.New("the archive serves no git epochs for this list")

// manifest reads <list>/manifest.js.gz, grokmirror's listing, and returns
// the list's epochs in order. Only keys of the form /<list>/git/N.git
// count (an extindex such as lore's /all/ lists other inboxes' epochs);
// none of them, beside others, or no manifest at all is errNoGit. An empty
// manifest is an archive with no mail yet.
func (l *Lore) manifest(ctx context.Context) ([]epoch, error) {
	resp, err := l.get(ctx, "manifest.js.gz")
	if err != nil {
		var nf *notFound
		if errors.As(err, &nf) {
			return nil, errNoGit
		}
		return nil, err
	}
	defer resp.Body.Close()
	zr, err := gzip.NewReader(io.LimitReader(resp.Body, maxManifest))
	if err != nil {
		return nil, fmt.Errorf("reading the manifest of %s: %w", l.List, err)
	}
	data, err := io.ReadAll(io.LimitReader(zr, maxManifest+1))
	if err != nil {
		return nil, fmt.Errorf("reading the manifest of %s: %w", l.List, err)
	}
	if len(data) > maxManifest {
		return nil, fmt.Errorf("the manifest of %s is over %d bytes", l.List, maxManifest)
	}
	var m map[string]struct {
		Fingerprint string `json:"fingerprint"`
		Modified    int64  `json:"modified"`
	}
	if err := json.Unmarshal(data, &m); err != nil {
		return nil, fmt.Errorf("reading the manifest of %s: %w", l.List, err)
	}
	prefix := "/" + l.listName() + "/git/"
	var out []epoch
	for key, ent := range m {
		num, ok := strings.CutPrefix(key, prefix)
		if !ok {
			continue
		}
		num, ok = strings.CutSuffix(num, ".git")
		n, err := strconv.Atoi(num)
		if !ok || err != nil || n < 0 || n > maxEpoch || strconv.Itoa(n) != num {
			continue
		}
		out = append(out, epoch{n: n, fingerprint: strings.ToLower(ent.Fingerprint), modified: ent.Modified})
	}
	if len(out) == 0 && len(m) > 0 {
		return nil, errNoGit
	}
	sort.Slice(out, func(i, j int) bool { return out[i].n < out[j].n })
	return out, nil
}

// listName is the list's name, the last segment of its URL's path.
func (l *Lore) listName() string {
	p := strings.Trim(l.List.Path, "/")
	return p[strings.LastIndexByte(p, '/')+1:]
}

// fingerprintAt is the manifest fingerprint of an epoch whose only ref,
// refs/heads/master, is at commit: when the manifest shows it, the epoch
// has nothing new, and no fetch is needed.
func fingerprintAt(commit string) string {
	h := sha1.Sum([]byte(commit + " refs/heads/master\n"))
	return hex.EncodeToString(h[:])
}

// pollGit reads what the archive's epochs hold after the cursor: each
// epoch from the cursor's first on is fetched into the mirror when its
// fingerprint says it moved, and its new commits are read oldest first,
// each mail delivered with the cursor naming its commit.
func (l *Lore) pollGit(ctx context.Context, epochs []epoch, cur string, fn func(*Message, string) error) (string, error) {
	unlock, err := l.lockMirror()
	if err != nil {
		return cur, err
	}
	defer unlock()
	var c *gitCursor
	var legacySeen func(int64, string) bool
	switch {
	case strings.HasPrefix(cur, loreGitPrefix):
		if c, err = parseGitCursor(cur); err != nil {
			return cur, err
		}
		if c.legacy != "" {
			if legacySeen, err = l.legacySeen(c.legacy); err != nil {
				return cur, err
			}
		}
	case cur == "":
		if c, err = l.startAt(ctx, epochs, l.sinceTime()); err != nil {
			return cur, err
		}
		cur = c.String()
	default:
		// An older patchbot's feed cursor: start at its low mark, and do
		// not deliver again what it had delivered.
		if legacySeen, err = l.legacySeen(cur); err != nil {
			return cur, err
		}
		since, _ := l.legacyLow(cur)
		logOr(l.Logger).Info("migrating the lore source from the Atom feed to the archive's git log",
			"list", l.List.String(), "from", since.UTC(), "mirror", l.Mirror)
		if c, err = l.startAt(ctx, epochs, since); err != nil {
			return cur, err
		}
		c.legacy = cur
		cur = c.String()
	}
	first := c.first()
	for _, e := range epochs {
		if first >= 0 && e.n < first {
			continue // before the start point
		}
		next, err := l.readEpoch(ctx, c, e, legacySeen, fn)
		if next != "" {
			cur = next
		}
		if err != nil {
			return cur, err
		}
	}
	if c.legacy != "" {
		c.legacy = "" // every epoch is read up to its tip: the migration is over
		cur = c.String()
	}
	return c.String(), nil
}

// readEpoch reads one epoch's new commits after c's place in it, moving
// c. It returns the cursor after the last mail delivered (or "" if none).
func (l *Lore) readEpoch(ctx context.Context, c *gitCursor, e epoch, legacySeen func(int64, string) bool,
	fn func(*Message, string) error) (string, error) {
	last, listed := c.epochs[e.n]
	if listed && last != "" && e.fingerprint == fingerprintAt(last) {
		return "", nil // nothing new in this epoch
	}
	dir, err := l.ensureRepo(ctx, e.n)
	if err != nil {
		return "", err
	}
	remote := l.epochURL(e.n)
	if last != "" && !l.hasCommit(ctx, dir, last) {
		// A mirror made anew (or lost): fetch the cursor's commit alone,
		// so that the fetch of the branch stops there.
		if err := l.fetch(ctx, dir, "--depth=1", remote, last); err != nil {
			logOr(l.Logger).Warn("the archive did not give the cursor's commit", "list", l.List.String(),
				"epoch", e.n, "commit", last, "err", err)
		}
	}
	if last == "" && l.shallow(ctx, dir) {
		if err := l.fetch(ctx, dir, "--unshallow", remote, masterSpec); err != nil {
			return "", err
		}
	} else if err := l.fetch(ctx, dir, remote, masterSpec); err != nil {
		return "", err
	}
	tip, err := l.revParse(ctx, dir, "refs/heads/master")
	if err != nil {
		return "", fmt.Errorf("epoch %d of %s: %w", e.n, l.List, err)
	}
	from := last
	switch {
	case last == "" || tip == last:
	case !l.hasCommit(ctx, dir, last):
		logOr(l.Logger).Error("the archive's history was rewritten and the cursor's commit is gone; "+
			"going on from the epoch's tip: mail imported after that commit and before now may be missed",
			"list", l.List.String(), "epoch", e.n, "commit", last, "tip", tip)
		from = tip
	case !l.isAncestor(ctx, dir, last, tip):
		// public-inbox-purge and -edit rewrite an epoch's history. Read on
		// from where the old and the new history part; mail read before
		// that comes again (a store that keeps mail by Message-ID knows it).
		if l.shallow(ctx, dir) {
			if err := l.fetch(ctx, dir, "--unshallow", remote, masterSpec); err != nil {
				return "", err
			}
		}
		base, _ := l.gitOut(ctx, dir, nil, "merge-base", last, tip)
		from = strings.TrimSpace(string(base))
		logOr(l.Logger).Warn("the archive rewrote an epoch's history; reading it on from where the histories part",
			"list", l.List.String(), "epoch", e.n, "cursor", last, "fork", from, "tip", tip)
	}
	c.epochs[e.n] = last
	if tip == from {
		c.epochs[e.n] = tip
		return "", nil
	}
	delivered := ""
	err = l.readCommits(ctx, dir, from, tip, func(commit string, ct int64, raw []byte) error {
		c.epochs[e.n] = commit
		if raw == nil {
			return nil // a deletion ("d"), no mail
		}
		m, err := ParseBytes(raw)
		if err != nil {
			logOr(l.Logger).Warn("skipping mail that cannot be parsed", "list", l.List.String(),
				"epoch", e.n, "commit", commit, "err", err)
			return nil
		}
		if legacySeen != nil && legacySeen(ct, m.MessageID) {
			return nil // the older patchbot delivered it
		}
		next := c.String()
		if err := fn(m, next); err != nil {
			return err
		}
		delivered = next
		return nil
	})
	if err != nil {
		return delivered, err
	}
	c.epochs[e.n] = tip
	return delivered, nil
}

const masterSpec = "+refs/heads/master:refs/heads/master"

// startAt is where a source without a cursor starts: after the last
// commit received before since in each epoch that has later mail, or,
// when since is zero ("now"), after the newest commit of the newest
// epoch. The epochs it needs are fetched shallow: only from since on.
// An archive with no epochs yet gives a cursor that reads every epoch
// to come from its start.
func (l *Lore) startAt(ctx context.Context, epochs []epoch, since time.Time) (*gitCursor, error) {
	c := &gitCursor{epochs: map[int]string{}}
	if len(epochs) == 0 {
		return c, nil
	}
	firstNew := len(epochs) - 1 // "now": the newest epoch alone
	if !since.IsZero() {
		firstNew = -1
		for i, e := range epochs {
			if e.modified >= since.Unix() {
				firstNew = i
				break
			}
		}
	}
	if firstNew < 0 {
		firstNew = len(epochs) - 1 // nothing since then: the newest epoch's tip
		since = time.Time{}
	}
	for _, e := range epochs[firstNew:] {
		dir, err := l.ensureRepo(ctx, e.n)
		if err != nil {
			return nil, err
		}
		remote := l.epochURL(e.n)
		if since.IsZero() || e.modified < since.Unix() {
			if err := l.fetch(ctx, dir, "--depth=1", remote, masterSpec); err != nil {
				return nil, err
			}
			tip, err := l.revParse(ctx, dir, "refs/heads/master")
			if err != nil {
				return nil, err
			}
			c.epochs[e.n] = tip
			continue
		}
		if err := l.fetch(ctx, dir, "--shallow-since="+strconv.FormatInt(since.Unix(), 10), remote, masterSpec); err != nil {
			return nil, err
		}
		at, err := l.lastBefore(ctx, dir, since)
		if err != nil {
			return nil, err
		}
		c.epochs[e.n] = at
	}
	at := "now"
	if !since.IsZero() {
		at = since.UTC().Format(time.RFC3339)
	}
	logOr(l.Logger).Info("lore source starts", "list", l.List.String(), "since", at, "cursor", c.String())
	return c, nil
}

// lastBefore walks back from the tip to the first commit received before
// since: the one after which reading starts ("" when every commit of the
// epoch is later). When that commit lies just past a shallow mirror's
// edge it is fetched, so that the cursor names a commit the mirror has.
func (l *Lore) lastBefore(ctx context.Context, dir string, since time.Time) (string, error) {
	cmd := l.gitCmd(ctx, dir, "log", "--first-parent", "--format=%H %ct %P", "refs/heads/master")
	out, err := cmd.StdoutPipe()
	if err != nil {
		return "", err
	}
	if err := cmd.Start(); err != nil {
		return "", err
	}
	defer cmd.Wait()
	defer cmd.Process.Kill()
	sc := bufio.NewScanner(out)
	oldest := ""
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 2 {
			continue
		}
		ct, _ := strconv.ParseInt(f[1], 10, 64)
		if ct < since.Unix() {
			return f[0], nil
		}
		oldest = f[0]
	}
	if oldest == "" {
		return "", nil
	}
	// The edge of what was fetched: its parent, if it has one, is the
	// commit before since.
	obj, err := l.gitOut(ctx, dir, nil, "cat-file", "commit", oldest)
	if err != nil {
		return "", err
	}
	parent := ""
	for line := range strings.Lines(string(obj)) {
		if line == "\n" {
			break
		}
		if p, ok := strings.CutPrefix(strings.TrimSpace(line), "parent "); ok {
			parent = p
			break
		}
	}
	if parent == "" || l.hasCommit(ctx, dir, parent) {
		return parent, nil
	}
	if err := l.fetch(ctx, dir, "--deepen=1", l.epochURLOf(dir), masterSpec); err != nil {
		return "", err
	}
	return parent, nil
}

// readCommits reads the commits after from (all of them when from is "")
// up to tip, oldest first, and gives each with its committer time and its
// mail (nil for a commit without one, such as a deletion).
func (l *Lore) readCommits(ctx context.Context, dir, from, tip string, fn func(commit string, ct int64, raw []byte) error) error {
	rng := tip
	if from != "" {
		rng = from + ".." + tip
	}
	logCmd := l.gitCmd(ctx, dir, "log", "--reverse", "--first-parent", "--format=%H %ct", rng)
	logOut, err := logCmd.StdoutPipe()
	if err != nil {
		return err
	}
	var logErr bytes.Buffer
	logCmd.Stderr = &limitedBuffer{buf: &logErr, max: 4096}
	cat := l.gitCmd(ctx, dir, "cat-file", "--batch")
	catIn, err := cat.StdinPipe()
	if err != nil {
		return err
	}
	catOut, err := cat.StdoutPipe()
	if err != nil {
		return err
	}
	if err := logCmd.Start(); err != nil {
		return fmt.Errorf("git log: %w", err)
	}
	defer func() { logCmd.Process.Kill(); logCmd.Wait() }()
	if err := cat.Start(); err != nil {
		return fmt.Errorf("git cat-file: %w", err)
	}
	defer func() { catIn.Close(); cat.Process.Kill(); cat.Wait() }()
	lines := bufio.NewScanner(logOut)
	blobs := bufio.NewReaderSize(catOut, 64<<10)
	n := 0
	for lines.Scan() {
		if err := ctx.Err(); err != nil {
			return err
		}
		commit, cts, _ := strings.Cut(lines.Text(), " ")
		ct, _ := strconv.ParseInt(cts, 10, 64)
		if !isCommitHash(commit) {
			continue
		}
		if _, err := io.WriteString(catIn, commit+":m\n"); err != nil {
			return fmt.Errorf("git cat-file: %w", err)
		}
		raw, err := readBatchBlob(blobs)
		if err != nil {
			return fmt.Errorf("reading commit %s: %w", commit, err)
		}
		if err := fn(commit, ct, raw); err != nil {
			return err
		}
		n++
	}
	if err := lines.Err(); err != nil {
		return err
	}
	catIn.Close()
	if err := logCmd.Wait(); err != nil {
		return fmt.Errorf("git log %s: %v: %s", rng, err, strings.TrimSpace(logErr.String()))
	}
	logOr(l.Logger).Debug("read the archive's new commits", "list", l.List.String(), "dir", dir, "commits", n)
	return nil
}

// readBatchBlob reads one answer of git cat-file --batch: the blob, or
// nil when the path is missing (a commit without "m") or the blob is over
// DefaultLimits.MaxSize (logged by the parser's limit otherwise: skipped
// here without being held in memory).
func readBatchBlob(r *bufio.Reader) ([]byte, error) {
	head, err := r.ReadString('\n')
	if err != nil {
		return nil, err
	}
	f := strings.Fields(head)
	if len(f) == 2 && f[1] == "missing" {
		return nil, nil
	}
	if len(f) != 3 {
		return nil, fmt.Errorf("git cat-file said %q", strings.TrimSpace(head))
	}
	size, err := strconv.ParseInt(f[2], 10, 64)
	if err != nil || size < 0 {
		return nil, fmt.Errorf("git cat-file said %q", strings.TrimSpace(head))
	}
	if f[1] != "blob" || size > DefaultLimits.MaxSize {
		if _, err := io.CopyN(io.Discard, r, size+1); err != nil {
			return nil, err
		}
		return nil, nil
	}
	buf := make([]byte, size+1)
	if _, err := io.ReadFull(r, buf); err != nil {
		return nil, err
	}
	return buf[:size], nil
}

type limitedBuffer struct {
	buf *bytes.Buffer
	max int
}

func (b *limitedBuffer) Write(p []byte) (int, error) {
	if room := b.max - b.buf.Len(); room > 0 {
		b.buf.Write(p[:min(len(p), room)])
	}
	return len(p), nil
}

// epochURL is where epoch n is fetched from: always under the list's own
// URL, whatever the manifest's keys say.
func (l *Lore) epochURL(n int) string {
	return l.List.ResolveReference(&url.URL{Path: "git/" + strconv.Itoa(n) + ".git"}).String()
}

// epochURLOf is the URL of the epoch a mirror directory holds.
func (l *Lore) epochURLOf(dir string) string {
	n, _ := strconv.Atoi(strings.TrimSuffix(filepath.Base(dir), ".git"))
	return l.epochURL(n)
}

func (l *Lore) repoDir(n int) string {
	return filepath.Join(l.Mirror, "git", strconv.Itoa(n)+".git")
}

// ensureRepo makes the bare repository that mirrors epoch n, if it is not
// there yet. It is made under another name and renamed, so that a kill
// while making it leaves no half-made mirror.
func (l *Lore) ensureRepo(ctx context.Context, n int) (string, error) {
	dir := l.repoDir(n)
	if _, err := os.Stat(filepath.Join(dir, "HEAD")); err == nil {
		return dir, nil
	}
	if err := os.MkdirAll(filepath.Dir(dir), 0o700); err != nil {
		return "", fmt.Errorf("lore mirror: %w", err)
	}
	tmp := dir + ".new"
	os.RemoveAll(tmp)
	os.RemoveAll(dir)
	if _, err := l.gitOut(ctx, "", nil, "init", "--bare", "--quiet", tmp); err != nil {
		return "", fmt.Errorf("lore mirror: %w", err)
	}
	if err := os.Rename(tmp, dir); err != nil {
		return "", fmt.Errorf("lore mirror: %w", err)
	}
	return dir, nil
}

// lockMirror takes the mirror for this process: one reader at a time.
// Locks and temporary files that git left in it are then stale (a git
// killed along with patchbot) and are removed, so that the next fetch
// does not fail on them.
func (l *Lore) lockMirror() (func(), error) {
	if err := os.MkdirAll(l.Mirror, 0o700); err != nil {
		return nil, fmt.Errorf("lore mirror: %w", err)
	}
	if err := l.checkMirrorOrigin(); err != nil {
		return nil, err
	}
	f, err := os.OpenFile(filepath.Join(l.Mirror, "lock"), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, fmt.Errorf("lore mirror: %w", err)
	}
	if err := lockExclusive(f); err != nil {
		f.Close()
		return nil, fmt.Errorf("lore mirror %s is in use by another process: %w", l.Mirror, err)
	}
	repos, _ := filepath.Glob(filepath.Join(l.Mirror, "git", "*.git"))
	for _, r := range repos {
		removeStale(r)
	}
	return func() { f.Close() }, nil
}

// checkMirrorOrigin records which list a mirror belongs to, and refuses a
// mirror made for another.
func (l *Lore) checkMirrorOrigin() error {
	path := filepath.Join(l.Mirror, "origin")
	want := l.List.String() + "\n"
	got, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return os.WriteFile(path, []byte(want), 0o600)
	}
	if err != nil {
		return fmt.Errorf("lore mirror: %w", err)
	}
	if string(got) != want {
		return fmt.Errorf("lore mirror %s holds %s, not %s: name another mirror directory",
			l.Mirror, strings.TrimSpace(string(got)), l.List)
	}
	return nil
}

// removeStale deletes what a killed git leaves in a repository: lock
// files (shallow.lock, packed-refs.lock, refs/heads/master.lock, ...),
// temporary packs and the quarantine of an unfinished fetch.
func removeStale(repo string) {
	for _, pat := range []string{"*.lock", "objects/info/*.lock", "objects/pack/tmp_*", "objects/pack/*.lock"} {
		m, _ := filepath.Glob(filepath.Join(repo, pat))
		for _, f := range m {
			os.Remove(f)
		}
	}
	if m, _ := filepath.Glob(filepath.Join(repo, "objects", "incoming-*")); len(m) > 0 {
		for _, d := range m {
			os.RemoveAll(d)
		}
	}
	filepath.WalkDir(filepath.Join(repo, "refs"), func(path string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() && strings.HasSuffix(d.Name(), ".lock") {
			os.Remove(path)
		}
		return nil
	})
}

// gitArgs are set on every git command: only HTTP(S) is spoken, nobody is
// asked for a password, a stalled transfer ends, and housekeeping runs in
// the foreground, within the command's time.
var gitArgs = []string{
	"-c", "protocol.allow=never", "-c", "protocol.https.allow=always", "-c", "protocol.http.allow=always",
	"-c", "credential.helper=", "-c", "core.askPass=",
	"-c", "http.lowSpeedLimit=1000", "-c", "http.lowSpeedTime=60",
	"-c", "gc.autoDetach=false", "-c", "maintenance.autoDetach=false",
}

func (l *Lore) gitCmd(ctx context.Context, dir string, args ...string) *exec.Cmd {
	full := append([]string{}, gitArgs...)
	if dir != "" {
		full = append(full, "--git-dir="+dir)
	}
	cmd := exec.CommandContext(ctx, "git", append(full, args...)...)
	cmd.Env = append(os.Environ(), "GIT_TERMINAL_PROMPT=0", "GIT_ASKPASS=", "SSH_ASKPASS=", "LC_ALL=C")
	cmd.SysProcAttr = childProcAttr()
	cmd.WaitDelay = 5 * time.Second
	return cmd
}

func (l *Lore) gitOut(ctx context.Context, dir string, stdin io.Reader, args ...string) ([]byte, error) {
	cmd := l.gitCmd(ctx, dir, args...)
	cmd.Stdin = stdin
	var out, errOut bytes.Buffer
	cmd.Stdout = &out
	cmd.Stderr = &limitedBuffer{buf: &errOut, max: 4096}
	if err := cmd.Run(); err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, fmt.Errorf("git %s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(errOut.String()))
	}
	return out.Bytes(), nil
}

// fetch runs git fetch into a mirror: the transfer is bounded by
// FetchTimeout.
func (l *Lore) fetch(ctx context.Context, dir string, args ...string) error {
	ctx, cancel := context.WithTimeout(ctx, l.fetchTimeout())
	defer cancel()
	start := time.Now()
	_, err := l.gitOut(ctx, dir, nil, append([]string{"fetch", "--quiet", "--no-tags", "--no-write-fetch-head"}, args...)...)
	logOr(l.Logger).Debug("git fetch", "list", l.List.String(), "dir", dir, "args", args, "took", time.Since(start), "err", err)
	if err != nil {
		return fmt.Errorf("fetching %s: %w", l.List, err)
	}
	return nil
}

func (l *Lore) fetchTimeout() time.Duration {
	if l.FetchTimeout > 0 {
		return l.FetchTimeout
	}
	return 30 * time.Minute
}

func (l *Lore) revParse(ctx context.Context, dir, rev string) (string, error) {
	out, err := l.gitOut(ctx, dir, nil, "rev-parse", "--verify", "--quiet", rev+"^{commit}")
	if err != nil {
		return "", err
	}
	h := strings.TrimSpace(string(out))
	if !isCommitHash(h) {
		return "", fmt.Errorf("git rev-parse %s: %q", rev, h)
	}
	return h, nil
}

func (l *Lore) hasCommit(ctx context.Context, dir, commit string) bool {
	_, err := l.gitOut(ctx, dir, nil, "cat-file", "-e", commit+"^{commit}")
	return err == nil
}

func (l *Lore) isAncestor(ctx context.Context, dir, a, b string) bool {
	_, err := l.gitOut(ctx, dir, nil, "merge-base", "--is-ancestor", a, b)
	return err == nil
}

func (l *Lore) shallow(ctx context.Context, dir string) bool {
	_, err := os.Stat(filepath.Join(dir, "shallow"))
	return err == nil
}

// legacySeen reads an older patchbot's feed cursor ("lore1:" seen set,
// or "RFC3339|link" before it) as what it had delivered, by received time
// and Message-ID: the commit's committer time is the time the feed showed.
func (l *Lore) legacySeen(cur string) (func(int64, string) bool, error) {
	set := newSeenSet(loreCursorPrefix, time.Hour, 0)
	ok, err := set.parse(cur)
	if err != nil {
		return nil, fmt.Errorf("lore cursor: %w", err)
	}
	if ok {
		return set.seen, nil
	}
	ts, link, _ := strings.Cut(cur, "|")
	t, err := time.Parse(time.RFC3339Nano, ts)
	if err != nil {
		return nil, fmt.Errorf("lore cursor %q is damaged", cur)
	}
	key := linkKey(link)
	return func(u int64, id string) bool { return u < t.Unix() || u == t.Unix() && id <= key }, nil
}

// legacyLow is the time before which an older cursor took every mail as
// seen.
func (l *Lore) legacyLow(cur string) (time.Time, error) {
	set := newSeenSet(loreCursorPrefix, time.Hour, 0)
	if ok, err := set.parse(cur); ok && err == nil {
		return time.Unix(set.low, 0), nil
	}
	ts, _, _ := strings.Cut(cur, "|")
	return time.Parse(time.RFC3339Nano, ts)
}

func (l *Lore) sinceTime() time.Time {
	t, _ := ParseSince(l.Since)
	return t
}

// ParseSince reads a lore source's start point: "now" (or empty: the
// zero time), a date (2006-01-02, UTC) or an RFC 3339 time.
func ParseSince(s string) (time.Time, error) {
	switch s = strings.TrimSpace(s); s {
	case "", "now":
		return time.Time{}, nil
	}
	if t, err := time.Parse("2006-01-02", s); err == nil {
		return t, nil
	}
	if t, err := time.Parse(time.RFC3339, s); err == nil {
		return t, nil
	}
	return time.Time{}, fmt.Errorf("since %q: want now, a date (2006-01-02) or an RFC 3339 time", s)
}
