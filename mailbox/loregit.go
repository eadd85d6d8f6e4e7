package mailbox

import (
	"compress/gzip"
	"context"
	"crypto/sha1"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
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
//
// This file is the source's side of it: the epochs the manifest lists,
// the cursor (its place in each epoch's log), where a new source starts,
// and what an older patchbot's feed cursor had delivered. The git
// commands on the mirror are loremirror.go's.

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
// cursor is being migrated it follows a ';' (see pollGit).
type gitCursor struct {
	epochs map[int]string
	legacy string
	// skip are the mails (by blob) read before an epoch's history was
	// rewritten, not to be delivered again; not part of the cursor.
	skip map[string]bool
}

// empty says whether the cursor has read nothing in any epoch.
func (c *gitCursor) empty() bool {
	for _, h := range c.epochs {
		if h != "" {
			return false
		}
	}
	return true
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
	if last != "" && l.hasCommit(ctx, dir, last) {
		// What was read stays in the mirror, whatever the archive does to
		// its history: a rewrite is read on from the mail read last.
		if _, err := l.gitOut(ctx, dir, nil, "update-ref", readRef, last); err != nil {
			return "", err
		}
	}
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
	case last == "" && !c.empty():
		// A new epoch after a cursor that has read some: read from its
		// start, unless it holds mail read before (an archive imported
		// anew into other epochs), after which it is read on.
		read := l.recentlyRead(ctx, c, e.n)
		if from, err = l.resumePoint(ctx, dir, tip, read); err != nil {
			return "", err
		}
		c.skip = read
		if from != "" {
			logOr(l.Logger).Warn("a new epoch holds mail read before (the archive was imported anew?); reading it on after that mail",
				"list", l.List.String(), "epoch", e.n, "from", from, "tip", tip)
		}
	case last == "" || tip == last:
	case !l.hasCommit(ctx, dir, last):
		logOr(l.Logger).Error("the archive's history was rewritten and the cursor's commit is gone; "+
			"going on from the epoch's tip: mail imported after that commit and before now may be missed",
			"list", l.List.String(), "epoch", e.n, "commit", last, "tip", tip)
		from = tip
	case !l.isAncestor(ctx, dir, last, tip):
		// public-inbox-purge and -edit rewrite an epoch's history from the
		// mail they change on; a re-import makes a history with nothing in
		// common. The mails keep their blobs: the new history is read on
		// after the newest commit whose mail was read before, and no mail
		// read before, nor any before the start point, comes again (what
		// -edit changed is not new mail). When no mail of the new history
		// was read, it is read on from its tip.
		read, err := l.mailBlobs(ctx, dir, last, 0)
		if err != nil {
			return "", err
		}
		if from, err = l.resumePoint(ctx, dir, tip, read); err != nil {
			return "", err
		}
		if from == "" {
			from = tip
			logOr(l.Logger).Error("the archive rewrote an epoch's history and holds none of the mail read before; "+
				"going on from its tip: mail imported since the last read may be missed",
				"list", l.List.String(), "epoch", e.n, "cursor", last, "tip", tip)
		} else {
			logOr(l.Logger).Warn("the archive rewrote an epoch's history; reading it on after the mail read last",
				"list", l.List.String(), "epoch", e.n, "cursor", last, "from", from, "tip", tip)
		}
		c.skip = read
	}
	c.epochs[e.n] = last
	if tip == from {
		c.epochs[e.n] = tip
		return "", nil
	}
	delivered := ""
	err = l.readCommits(ctx, dir, from, tip, func(commit, blob string, ct int64, raw []byte) error {
		c.epochs[e.n] = commit
		if len(raw) == 0 {
			return nil // a deletion ("d") or a purged mail: no mail
		}
		if c.skip[blob] {
			return nil // read before the history was rewritten
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

// recentlyRead are the mails (by blob) read last in each epoch the cursor
// has read but epoch n: the newest 10,000 of each, enough to know an
// archive imported anew (it holds the mail read last).
func (l *Lore) recentlyRead(ctx context.Context, c *gitCursor, n int) map[string]bool {
	out := map[string]bool{}
	for e, last := range c.epochs {
		if e == n || last == "" {
			continue
		}
		dir := l.repoDir(e)
		if !l.hasCommit(ctx, dir, last) {
			continue
		}
		read, err := l.mailBlobs(ctx, dir, last, 10000)
		if err != nil {
			logOr(l.Logger).Warn("reading the mail read before in an epoch", "list", l.List.String(), "epoch", e, "err", err)
			continue
		}
		for b := range read {
			out[b] = true
		}
	}
	return out
}

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
