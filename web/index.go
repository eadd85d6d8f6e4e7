package web

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/patchbot/patchbot/judge"
	"github.com/patchbot/patchbot/mailbox"
	"github.com/patchbot/patchbot/reports"
)

// index knows every run directory under dir, newest first. Scanning 10,000
// run directories reads 10,000 small run.json files, so it is done once and
// then kept up to date cheaply: the directory's mtime says whether runs
// were added or removed, and only runs without a run.json yet (running, or
// stopped by the infrastructure) are looked at again. The verdict of a run
// (which needs its results and a comparison) is computed when a page first
// shows it, and kept.
type index struct {
	dir   string
	every time.Duration // how often refresh looks at the disk at most

	mu      sync.Mutex
	checked time.Time
	dirMod  time.Time
	byName  map[string]*entry
	sorted  []*entry // finished runs, newest first
	series  map[string][]*entry
}

// entry is what the index keeps of one run directory.
type entry struct {
	name string
	dir  string

	// From run.json, read leniently: a field added by a newer patchbot
	// does not hide a run from the lists.
	ok        bool // run.json was read
	mod       time.Time
	size      int64
	finished  time.Time
	thread    reports.Thread
	failure   *judge.Failure
	seriesKey string
	title     string
	version   int
	readErr   string

	// The verdict, computed on first use for the run.json of mod and size.
	verdictMod  time.Time
	verdictSize int64
	verdict     string
	outcome     string
}

// refreshEvery is how often a list looks at the disk for new runs at most
// (a run's own page looks at once).
var refreshEvery = time.Second

func newIndex(dir string) *index {
	return &index{dir: dir, every: refreshEvery, byName: map[string]*entry{}, series: map[string][]*entry{}}
}

// validName is what a run directory may be called to be served: a single
// path element of plain characters (job-12, run-20261201-101500).
var validName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$`)

// refresh brings the index up to date with the disk, at most once per
// i.every.
func (ix *index) refresh() error {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	if time.Since(ix.checked) < ix.every {
		return nil
	}
	ix.checked = time.Now()
	fi, err := os.Stat(ix.dir)
	if errors.Is(err, os.ErrNotExist) {
		ix.byName, ix.sorted, ix.series = map[string]*entry{}, nil, map[string][]*entry{}
		return nil
	}
	if err != nil {
		return fmt.Errorf("reading runs: %w", err)
	}
	changed := false
	if !fi.ModTime().Equal(ix.dirMod) {
		des, err := os.ReadDir(ix.dir)
		if err != nil {
			return fmt.Errorf("reading runs: %w", err)
		}
		ix.dirMod = fi.ModTime()
		seen := make(map[string]bool, len(des))
		for _, de := range des {
			name := de.Name()
			if !de.IsDir() || !validName.MatchString(name) {
				continue // a symlink or odd name is not a run we serve
			}
			seen[name] = true
			if ix.byName[name] == nil {
				ix.byName[name] = &entry{name: name, dir: filepath.Join(ix.dir, name)}
				changed = true
			}
		}
		for name := range ix.byName {
			if !seen[name] {
				delete(ix.byName, name)
				changed = true
			}
		}
	}
	for _, e := range ix.byName {
		if !e.ok && e.load() {
			changed = true
		}
	}
	if changed {
		ix.resort()
	}
	return nil
}

// lookup returns the run called name, looking at the disk for a run newer
// than the last refresh.
func (ix *index) lookup(name string) *entry {
	if !validName.MatchString(name) {
		return nil
	}
	ix.mu.Lock()
	defer ix.mu.Unlock()
	e := ix.byName[name]
	if e == nil {
		fi, err := os.Lstat(filepath.Join(ix.dir, name))
		if err != nil || !fi.IsDir() {
			return nil
		}
		e = &entry{name: name, dir: filepath.Join(ix.dir, name)}
		ix.byName[name] = e
	}
	if e.stale() && e.load() {
		ix.resort()
	}
	return e
}

// stale says whether run.json changed since it was read (or appeared).
func (e *entry) stale() bool {
	fi, err := os.Stat(filepath.Join(e.dir, reports.RunFile))
	if err != nil {
		return e.ok
	}
	return !e.ok || !fi.ModTime().Equal(e.mod) || fi.Size() != e.size
}

// runHeader is the part of run.json the lists need.
type runHeader struct {
	Thread   reports.Thread `json:"thread"`
	Finished time.Time      `json:"finished"`
	Failure  *judge.Failure `json:"failure"`
}

// load reads e's run.json and reports whether e changed.
func (e *entry) load() bool {
	path := filepath.Join(e.dir, reports.RunFile)
	fi, err := os.Stat(path)
	if err != nil {
		if e.ok {
			*e = entry{name: e.name, dir: e.dir}
			return true
		}
		return false // still running, or stopped before writing it
	}
	if e.ok && fi.ModTime().Equal(e.mod) && fi.Size() == e.size {
		return false
	}
	e.ok, e.mod, e.size, e.readErr = true, fi.ModTime(), fi.Size(), ""
	var h runHeader
	data, err := readCapped(path, maxRunJSON)
	if err == nil {
		err = json.Unmarshal(data, &h)
	}
	if err != nil {
		e.readErr = err.Error()
		e.finished = fi.ModTime()
	} else {
		e.thread, e.failure, e.finished = h.Thread, h.Failure, h.Finished
		if e.finished.IsZero() {
			e.finished = fi.ModTime()
		}
	}
	subj := mailbox.ParseSubject(e.thread.Subject)
	e.title, e.version = subj.Title, subj.Version
	e.seriesKey = seriesKey(e.thread.Author, subj.Title)
	return true
}

// seriesKey names a series across its versions: its author and its title
// without tags, as a short hash that can stand in a URL.
func seriesKey(author, title string) string {
	h := sha256.Sum256([]byte(strings.ToLower(mailbox.AddrOf(author)) + "\x00" + strings.ToLower(title)))
	return hex.EncodeToString(h[:8])
}

func (ix *index) resort() {
	ix.sorted = ix.sorted[:0]
	ix.series = map[string][]*entry{}
	for _, e := range ix.byName {
		if e.ok {
			ix.sorted = append(ix.sorted, e)
			ix.series[e.seriesKey] = append(ix.series[e.seriesKey], e)
		}
	}
	newestFirst := func(es []*entry) {
		sort.Slice(es, func(i, j int) bool {
			if !es[i].finished.Equal(es[j].finished) {
				return es[i].finished.After(es[j].finished)
			}
			return es[i].name > es[j].name
		})
	}
	newestFirst(ix.sorted)
	for _, es := range ix.series {
		newestFirst(es)
	}
}

// page returns up to n finished runs from offset off, newest first, and
// how many there are.
func (ix *index) page(off, n int) ([]*entry, int) {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	total := len(ix.sorted)
	if off >= total {
		return nil, total
	}
	return append([]*entry(nil), ix.sorted[off:min(off+n, total)]...), total
}

// seriesRuns returns the runs of one series, newest first.
func (ix *index) seriesRuns(key string) []*entry {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	return append([]*entry(nil), ix.series[key]...)
}

// Summary is one run in a list: the home page, /runs, a series, the feed.
type Summary struct {
	Name      string    `json:"name"`
	URL       string    `json:"url"`
	Subject   string    `json:"subject"`
	Author    string    `json:"author"`
	MessageID string    `json:"message_id"`
	Version   int       `json:"version"`
	Series    string    `json:"series"` // the series' key: /series/KEY
	Finished  time.Time `json:"finished"`
	// Verdict is the reply's first sentence.
	Verdict string `json:"verdict"`
	// Outcome is improvement, regression, mixed, no-change, failed or
	// unreadable: what the verdict says, for colour and filters.
	Outcome string `json:"outcome"`
	Failure string `json:"failure,omitempty"` // the stage that failed
}

// summaries returns the lists' view of es, computing verdicts not known yet.
func (s *server) summaries(es []*entry) []Summary {
	out := make([]Summary, 0, len(es))
	for _, e := range es {
		s.runs.mu.Lock()
		need := e.verdict == "" || !e.verdictMod.Equal(e.mod) || e.verdictSize != e.size
		mod, size := e.mod, e.size
		s.runs.mu.Unlock()
		if need {
			verdict, outcome := s.verdictOf(e.name, e.dir)
			s.runs.mu.Lock()
			e.verdict, e.outcome, e.verdictMod, e.verdictSize = verdict, outcome, mod, size
			if outcome == "unreadable" {
				// Perhaps caught between run.json and its results being
				// written: look again next time.
				e.verdictSize = -1
			}
			s.runs.mu.Unlock()
		}
		s.runs.mu.Lock()
		sum := Summary{Name: e.name, URL: s.link(s.runPath(e.name)), Subject: e.thread.Subject,
			Author: e.thread.Author, MessageID: strings.Trim(e.thread.MessageID, "<>"), Version: e.version,
			Series: e.seriesKey, Finished: e.finished, Verdict: e.verdict, Outcome: e.outcome}
		if e.failure != nil {
			sum.Failure = string(e.failure.Stage)
		}
		s.runs.mu.Unlock()
		out = append(out, sum)
	}
	return out
}

// verdictOf loads a run and says what its reply says of it. A run the
// cache holds is not loaded again.
func (s *server) verdictOf(name, dir string) (verdict, outcome string) {
	if v := s.pages.peek(name, dir); v != nil {
		return v.Verdict, v.Outcome
	}
	rd, err := loadRun(dir)
	if err != nil {
		return "Unreadable run: " + err.Error(), "unreadable"
	}
	return rd.headline, rd.outcome
}
