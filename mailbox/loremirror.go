package mailbox

// The lore mirror's git plumbing: the bare repositories, one an epoch,
// that a lore source with a Mirror keeps, and the git commands it runs on
// them (fetch, log, cat-file), each bounded in time and speaking HTTP(S)
// only. loregit.go decides what to read; this file reads it.

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// masterSpec is the one ref a mirror keeps of an epoch: its master branch.
const masterSpec = "+refs/heads/master:refs/heads/master"

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
// up to tip, oldest first, and gives each with its mail's blob, its
// committer time and its mail (nil for a commit without one, such as a
// deletion).
func (l *Lore) readCommits(ctx context.Context, dir, from, tip string, fn func(commit, blob string, ct int64, raw []byte) error) error {
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
		blob, raw, err := readBatchBlob(blobs)
		if err != nil {
			return fmt.Errorf("reading commit %s: %w", commit, err)
		}
		if err := fn(commit, blob, ct, raw); err != nil {
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
func readBatchBlob(r *bufio.Reader) (blob string, raw []byte, err error) {
	head, err := r.ReadString('\n')
	if err != nil {
		return "", nil, err
	}
	f := strings.Fields(head)
	if len(f) == 2 && f[1] == "missing" {
		return "", nil, nil
	}
	if len(f) != 3 {
		return "", nil, fmt.Errorf("git cat-file said %q", strings.TrimSpace(head))
	}
	size, err := strconv.ParseInt(f[2], 10, 64)
	if err != nil || size < 0 {
		return "", nil, fmt.Errorf("git cat-file said %q", strings.TrimSpace(head))
	}
	if f[1] != "blob" || size > DefaultLimits.MaxSize {
		if _, err := io.CopyN(io.Discard, r, size+1); err != nil {
			return "", nil, err
		}
		return f[0], nil, nil
	}
	buf := make([]byte, size+1)
	if _, err := io.ReadFull(r, buf); err != nil {
		return "", nil, err
	}
	return f[0], buf[:size], nil
}

// readRef keeps, in each epoch's mirror, the commit read last: what was
// read stays in the mirror when the archive rewrites its history, so that
// the new history is read on after the same mail (loregit.go).
const readRef = "refs/patchbot/read"

// emptyBlob is the blob of a purged mail's commit (public-inbox-purge
// keeps the commit, its "m" emptied): no mail, and nothing to match.
const emptyBlob = "e69de29bb2d1d6434b8b29ae775ad8c2e48c5391"

// mailBlobs are the blobs of the mails on the first-parent history of
// commit, as far back as the mirror holds it (a shallow mirror from its
// start point on), the newest limit of them when limit > 0.
func (l *Lore) mailBlobs(ctx context.Context, dir, commit string, limit int) (map[string]bool, error) {
	out := map[string]bool{}
	err := l.walkBlobs(ctx, dir, commit, func(_, blob string) bool {
		if blob != "" && blob != emptyBlob {
			out[blob] = true
		}
		return limit <= 0 || len(out) < limit
	})
	return out, err
}

// resumePoint is the newest commit on tip's first-parent history whose
// mail is one of read, or "" when none is.
func (l *Lore) resumePoint(ctx context.Context, dir, tip string, read map[string]bool) (string, error) {
	if len(read) == 0 {
		return "", nil
	}
	at := ""
	err := l.walkBlobs(ctx, dir, tip, func(commit, blob string) bool {
		if read[blob] {
			at = commit
			return false
		}
		return true
	})
	return at, err
}

// walkBlobs gives each commit of from's first-parent history, newest
// first, with its mail's blob ("" for none), until fn says stop.
func (l *Lore) walkBlobs(ctx context.Context, dir, from string, fn func(commit, blob string) bool) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	logCmd := l.gitCmd(ctx, dir, "log", "--first-parent", "--format=%H", from)
	logOut, err := logCmd.StdoutPipe()
	if err != nil {
		return err
	}
	check := l.gitCmd(ctx, dir, "cat-file", "--batch-check=%(objectname) %(objecttype)")
	checkIn, err := check.StdinPipe()
	if err != nil {
		return err
	}
	checkOut, err := check.StdoutPipe()
	if err != nil {
		return err
	}
	if err := logCmd.Start(); err != nil {
		return fmt.Errorf("git log: %w", err)
	}
	defer func() { logCmd.Process.Kill(); logCmd.Wait() }()
	if err := check.Start(); err != nil {
		return fmt.Errorf("git cat-file: %w", err)
	}
	defer func() { checkIn.Close(); check.Process.Kill(); check.Wait() }()
	lines := bufio.NewScanner(logOut)
	answers := bufio.NewReader(checkOut)
	for lines.Scan() {
		commit := strings.TrimSpace(lines.Text())
		if !isCommitHash(commit) {
			continue
		}
		if _, err := io.WriteString(checkIn, commit+":m\n"); err != nil {
			return fmt.Errorf("git cat-file: %w", err)
		}
		ans, err := answers.ReadString('\n')
		if err != nil {
			return fmt.Errorf("git cat-file: %w", err)
		}
		blob := ""
		if f := strings.Fields(ans); len(f) == 2 && f[1] == "blob" {
			blob = f[0]
		}
		if !fn(commit, blob) {
			return nil
		}
	}
	return lines.Err()
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
