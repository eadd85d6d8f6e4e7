package mailbox

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Source is where mail comes from: an mbox file, a Maildir, an IMAP
// mailbox or a public-inbox archive.
//
// A cursor is an opaque position that the caller persists and hands back
// ("" is the beginning). Poll delivers every message after cur in order;
// fn gets each message with the cursor just past it, so that a caller that
// stores it after fn returns never sees a message twice. A mail that cannot
// be parsed is logged and skipped, and the cursor still moves past it. An
// error from fn stops Poll and is returned with the last good cursor.
type Source interface {
	Poll(ctx context.Context, cur string, fn func(m *Message, cur string) error) (string, error)
}

// Watcher is a Source that can also wait for new mail (IMAP IDLE, or
// polling). Watch runs until ctx is done or fn fails.
type Watcher interface {
	Source
	Watch(ctx context.Context, cur string, fn func(m *Message, cur string) error) error
}

// PollEvery makes a Watch out of Poll for sources that cannot be told of
// new mail: it polls every interval, logging (and retrying after) errors
// that are not fn's.
func PollEvery(ctx context.Context, src Source, interval time.Duration, logger *slog.Logger,
	cur string, fn func(m *Message, cur string) error) error {
	var fnErr error
	wrapped := func(m *Message, c string) error {
		if err := fn(m, c); err != nil {
			fnErr = err
			return err
		}
		return nil
	}
	for {
		next, err := src.Poll(ctx, cur, wrapped)
		cur = next
		if fnErr != nil {
			return fnErr
		}
		if err != nil && ctx.Err() == nil {
			logOr(logger).Warn("polling mail source failed; retrying", "err", err, "in", interval)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(interval):
		}
	}
}

func logOr(l *slog.Logger) *slog.Logger {
	if l == nil {
		return slog.Default()
	}
	return l
}

// Mbox reads an mbox file (mboxo or mboxrd). The cursor is the byte offset
// just past the last message read, so a file that grows is read on from
// there; a file shorter than the cursor (replaced) is read from the start.
//
// Read once (the CLI), the end of the input is the end of the last mail,
// whether it is a file, a pipe (/dev/stdin, <(...)) or standard input.
// Followed as it grows (Follow, the daemon), the last mail of a regular
// file that is being appended to may be half written, so it is held back
// (the cursor stays before it, and the next Poll reads it whole) while a
// writer holds an fcntl lock on the file or its PATH.lock dot-lock exists,
// while the file grows under the read, and while the file does not end
// with the blank line that closes an mbox entry and was modified less than
// QuietPeriod ago.
type Mbox struct {
	Path   string // "-" reads standard input (the cursor is then ignored)
	Logger *slog.Logger
	// Follow: the file is watched while it grows; see above.
	Follow bool
	// QuietPeriod: 0 means 2 seconds.
	QuietPeriod time.Duration
}

var _ Source = (*Mbox)(nil)

func (s *Mbox) Poll(ctx context.Context, cur string, fn func(*Message, string) error) (string, error) {
	var r io.Reader
	var start int64
	var file *os.File
	if s.Path == "-" {
		r = os.Stdin
	} else {
		f, err := os.Open(s.Path)
		if err != nil {
			return cur, fmt.Errorf("opening mbox: %w", err)
		}
		defer f.Close()
		file = f
		if cur != "" {
			start, err = strconv.ParseInt(cur, 10, 64)
			if err != nil || start < 0 {
				return cur, fmt.Errorf("mbox cursor %q is not a byte offset", cur)
			}
			if fi, err := f.Stat(); err == nil && fi.Size() < start {
				// The file was replaced by a shorter one: read it all.
				logOr(s.Logger).Warn("mbox is shorter than the cursor; reading it from the start",
					"mbox", s.Path, "cursor", start, "size", fi.Size())
				start = 0
			}
			if _, err := f.Seek(start, io.SeekStart); err != nil {
				return cur, fmt.Errorf("seeking mbox to %d: %w", start, err)
			}
		}
		r = f
	}
	// A message's cursor is where the next one starts, so each is delivered
	// once the next separator (or the end) has been seen.
	pos := cur
	var pending []byte
	var pendingOff int64
	deliver := func(next int64) error {
		if pending == nil {
			return nil
		}
		raw := pending
		pending = nil
		c := strconv.FormatInt(next, 10)
		pos = c
		m, err := ParseBytes(raw)
		if err != nil {
			logOr(s.Logger).Warn("skipping mail that cannot be parsed", "mbox", s.Path, "offset", pendingOff, "err", err)
			return nil
		}
		return fn(m, c)
	}
	cr := &countingReader{r: r}
	err := ReadMbox(cr, func(raw []byte, off int64) error {
		if err := ctx.Err(); err != nil {
			return err
		}
		if err := deliver(start + off); err != nil {
			return err
		}
		pending, pendingOff = raw, start+off
		return nil
	})
	if err != nil {
		return pos, err
	}
	if pending != nil && file != nil && s.Follow && regular(file) {
		if why := s.unfinished(file, start+cr.n); why != "" {
			logOr(s.Logger).Debug("holding back the last mail of the mbox until it is complete",
				"mbox", s.Path, "offset", pendingOff, "why", why)
			return pos, nil
		}
	}
	return pos, deliver(start + cr.n)
}

// regular says whether f is a regular file: a pipe or a device cannot be
// read again, so what it gave is all there is.
func regular(f *os.File) bool {
	st, err := f.Stat()
	return err == nil && st.Mode().IsRegular()
}

// unfinished says why the mail ending at end (the end of what was read)
// may still be being written, or "" if it is complete.
func (s *Mbox) unfinished(f *os.File, end int64) string {
	if writeLocked(f) {
		return "a writer holds a lock on the file"
	}
	if _, err := os.Stat(s.Path + ".lock"); err == nil {
		return "the dot-lock " + s.Path + ".lock exists"
	}
	st, err := f.Stat()
	if err != nil {
		return ""
	}
	if st.Size() != end {
		return "the file grew while it was read"
	}
	tail := make([]byte, 2)
	if end >= 2 {
		if _, err := f.ReadAt(tail, end-2); err == nil && string(tail) == "\n\n" {
			return ""
		}
	}
	quiet := s.QuietPeriod
	if quiet == 0 {
		quiet = 2 * time.Second
	}
	if time.Since(st.ModTime()) < quiet {
		return "the file does not end with a blank line and was just modified"
	}
	return ""
}

type countingReader struct {
	r io.Reader
	n int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}

// Maildir reads the new/ and cur/ folders of a Maildir. It keeps a set of
// what it has delivered, not the largest name: names start with the
// delivery time, but two mails of the same second sort by pid or counter,
// and a mail moved in from elsewhere keeps an older name. The cursor holds
// the names (hashed) delivered within SeenWindow of the newest one; a name
// whose time is older than that window is taken as seen (see seenSet).
// A name that does not start with a time uses the file's mtime instead.
type Maildir struct {
	Dir    string
	Logger *slog.Logger
	// SeenWindow is how far back (by name time) a new file is still
	// noticed; 0 means 24 hours. SeenMax bounds the set (0: 4096).
	SeenWindow time.Duration
	SeenMax    int
}

var _ Source = (*Maildir)(nil)

const maildirCursorPrefix = "md1:"

func (s *Maildir) Poll(ctx context.Context, cur string, fn func(*Message, string) error) (string, error) {
	window := s.SeenWindow
	if window == 0 {
		window = 24 * time.Hour
	}
	set := newSeenSet(maildirCursorPrefix, window, s.SeenMax)
	ok, err := set.parse(cur)
	if err != nil {
		return cur, fmt.Errorf("Maildir cursor: %w", err)
	}
	legacy := ""
	if !ok && cur != "" {
		legacy = cur // an older patchbot's "last name delivered"
	}
	type file struct {
		key, path string
		time      int64
	}
	var files []file
	found := false
	for _, sub := range []string{"cur", "new"} {
		ents, err := os.ReadDir(filepath.Join(s.Dir, sub))
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			return cur, fmt.Errorf("reading Maildir: %w", err)
		}
		found = true
		for _, e := range ents {
			if e.IsDir() || strings.HasPrefix(e.Name(), ".") {
				continue
			}
			key, _, _ := strings.Cut(e.Name(), ":")
			t, ok := nameTime(key)
			if !ok {
				info, err := e.Info()
				if err != nil {
					continue // gone meanwhile
				}
				t = info.ModTime().Unix()
			}
			if (legacy != "" && key <= legacy) || set.seen(t, key) {
				continue
			}
			files = append(files, file{key, filepath.Join(s.Dir, sub, e.Name()), t})
		}
	}
	if !found {
		return cur, fmt.Errorf("%s is not a Maildir: no cur/ or new/", s.Dir)
	}
	sort.Slice(files, func(i, j int) bool {
		if files[i].time != files[j].time {
			return files[i].time < files[j].time
		}
		return files[i].key < files[j].key
	})
	for i, f := range files {
		if i > 0 && files[i-1].key == f.key {
			continue // in new/ and cur/ at once, while a reader moves it
		}
		if err := ctx.Err(); err != nil {
			return cur, err
		}
		raw, err := readCapped(f.path)
		if errors.Is(err, os.ErrNotExist) {
			// Moved from new/ to cur/ by a reader meanwhile: read it there.
			if m, _ := filepath.Glob(filepath.Join(s.Dir, "cur", globEscape(f.key)+":*")); len(m) > 0 {
				raw, err = readCapped(m[0])
			}
		}
		if errors.Is(err, os.ErrNotExist) {
			continue // deleted before we read it
		}
		var lim *LimitError
		if err != nil && !errors.As(err, &lim) {
			return cur, fmt.Errorf("reading Maildir message: %w", err)
		}
		set.add(f.time, f.key)
		cur = set.String()
		var m *Message
		if err == nil {
			m, err = ParseBytes(raw)
		}
		if err != nil {
			logOr(s.Logger).Warn("skipping mail that cannot be parsed", "file", f.path, "err", err)
			continue
		}
		if err := fn(m, cur); err != nil {
			return cur, err
		}
	}
	return cur, nil
}

// nameTime reads the delivery time at the start of a Maildir name
// ("1733044800.M1P2.host").
func nameTime(key string) (int64, bool) {
	digits, _, _ := strings.Cut(key, ".")
	if len(digits) == 0 || len(digits) > 12 {
		return 0, false
	}
	t, err := strconv.ParseInt(digits, 10, 64)
	return t, err == nil
}

func globEscape(s string) string {
	return strings.NewReplacer("*", "\\*", "?", "\\?", "[", "\\[", "\\", "\\\\").Replace(s)
}

// readCapped reads a file of at most DefaultLimits.MaxSize bytes; a bigger
// one is a *LimitError, not read.
func readCapped(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if st, err := f.Stat(); err == nil && st.Size() > DefaultLimits.MaxSize {
		return nil, &LimitError{Limit: "message size", Max: DefaultLimits.MaxSize, Got: st.Size()}
	}
	return io.ReadAll(io.LimitReader(f, DefaultLimits.MaxSize+1))
}

// Memory is a Source over mails held in memory: the fake for unit tests of
// code that reads a Source. The cursor is the number of mails delivered.
// It is safe to Add while another goroutine polls.
type Memory struct {
	mu   sync.Mutex
	raws [][]byte
}

var _ Source = (*Memory)(nil)

// Add appends a mail; the next Poll delivers it.
func (s *Memory) Add(raw []byte) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.raws = append(s.raws, bytes.Clone(raw))
}

func (s *Memory) Poll(ctx context.Context, cur string, fn func(*Message, string) error) (string, error) {
	n := 0
	if cur != "" {
		var err error
		if n, err = strconv.Atoi(cur); err != nil || n < 0 {
			return cur, fmt.Errorf("memory cursor %q is not a count", cur)
		}
	}
	s.mu.Lock()
	raws := s.raws[min(n, len(s.raws)):]
	s.mu.Unlock()
	for _, raw := range raws {
		if err := ctx.Err(); err != nil {
			return cur, err
		}
		n++
		cur = strconv.Itoa(n)
		m, err := ParseBytes(raw)
		if err != nil {
			continue // skipped, as the real sources do
		}
		if err := fn(m, cur); err != nil {
			return cur, err
		}
	}
	return cur, nil
}
