package images

import (
	"bytes"
	"fmt"
	"os"
	"strings"
	"sync"

	"github.com/patchbot/patchbot/internal/inert"
)

// What a build's output may cost patchbot: the log keeps Limits.Log bytes,
// a line is looked at up to maxLine bytes, and what is quoted back (to a
// reply, a page) is a few lines.
const (
	maxLine        = 4 << 10
	maxQuotedLines = 50
	maxQuotedBytes = 8 << 10
	maxQuotedLine  = 1 << 10
	maxWarnings    = 1000
	maxNewWarnings = 50
	maxHead        = 8
)

// buildLog is a build's log file, written as the sandbox's output streams
// in: the first limit bytes are kept, the rest counted and dropped, and
// every line is looked at on the way for the warnings, the error lines and
// the signs of a machine's failure (see rootCause). Nothing reads the log
// back into memory.
type buildLog struct {
	mu       sync.Mutex
	f        *os.File
	out      *inert.Writer // the build's output into f, control characters escaped
	limit    int64
	kept     int64
	dropped  int64
	werr     error // the first failure to write the file
	line     []byte
	long     bool // the current line is longer than maxLine
	warnings []Warning
	seen     map[string]bool
	moreWarn int   // warnings beyond maxWarnings
	cur      *scan // the command now running
	steps    int   // kbuild's step lines (makeprogress.go)
	used     Usage // the object tree after the last command, the peak memory of all
}

// record keeps what a finished command used.
func (l *buildLog) record(u Usage) {
	l.mu.Lock()
	defer l.mu.Unlock()
	peak := max(l.used.Memory, u.Memory)
	l.used = u
	l.used.Memory = peak
}

// scan is what one command's output showed.
type scan struct {
	errors     []string // the first error lines, within maxQuoted*
	errorBytes int
	more       int // error lines beyond errors, in the kept log
	beyond     int // error lines past the log's limit (counted only)
	hints      [numCauses]string
	head       []string // the first lines: the sandbox's complaint when it did not start
}

func newBuildLog(f *os.File, limit int64) *buildLog {
	return &buildLog{f: f, out: inert.NewWriter(f), limit: limit, seen: map[string]bool{}, cur: &scan{}}
}

// begin starts the scan of one command's output.
func (l *buildLog) begin() *scan {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.cur = &scan{}
	return l.cur
}

// note writes a line of patchbot's own (the command line of each step)
// into the log, outside the limit and unscanned.
func (l *buildLog) note(s string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(s) > maxLine {
		s = s[:maxLine]
	}
	l.out.Flush()
	if _, err := l.f.WriteString(inert.Line(s) + "\n"); err != nil && l.werr == nil {
		l.werr = err
	}
}

func (l *buildLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := len(p)
	if room := l.limit - l.kept; room > 0 {
		k := p
		if int64(len(k)) > room {
			k = k[:room]
		}
		// Escaped: the log is read in terminals and quoted in replies, and
		// the build's output is a stranger's.
		if _, err := l.out.Write(k); err != nil && l.werr == nil {
			l.werr = err
		}
		l.kept += int64(len(k))
		l.dropped += int64(len(p) - len(k))
	} else {
		l.dropped += int64(len(p))
	}
	for len(p) > 0 {
		i := bytes.IndexByte(p, '\n')
		if i < 0 {
			l.add(p)
			break
		}
		l.add(p[:i])
		l.endLine()
		p = p[i+1:]
	}
	// The build's writes never fail: a log that cannot be written is
	// patchbot's problem, reported after the build (werr).
	return n, nil
}

func (l *buildLog) add(p []byte) {
	if room := maxLine - len(l.line); len(p) > room {
		p = p[:room]
		l.long = true
	}
	l.line = append(l.line, p...)
}

// flushLine ends a last line that had no newline.
func (l *buildLog) flushLine() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.line) > 0 || l.long {
		l.endLine()
	}
}

func (l *buildLog) endLine() {
	// Colours go; every other control character is escaped, so that no
	// line kept from here (error lines, warnings, hints) can carry one.
	s := inert.String(ansiRe.ReplaceAllString(string(l.line), ""))
	l.line, l.long = l.line[:0], false
	sc := l.cur
	if len(sc.head) < maxHead {
		sc.head = append(sc.head, quoteLine(s))
	}
	if isKbuildStep(s) {
		l.steps++
	}
	if c, ok := causeOf(s); ok && sc.hints[c] == "" {
		sc.hints[c] = quoteLine(s)
	}
	if strings.Contains(s, "warning: ") {
		if w, ok := parseWarning(s); ok {
			if k := w.String(); !l.seen[k] {
				if len(l.warnings) < maxWarnings {
					l.seen[k] = true
					l.warnings = append(l.warnings, w)
				} else {
					l.moreWarn++
				}
			}
		}
	}
	if isErrorLine(s) {
		q := quoteLine(strings.TrimPrefix(s, "../"))
		switch {
		case l.dropped > 0:
			sc.beyond++
		case len(sc.errors) < maxQuotedLines && sc.errorBytes+len(q) <= maxQuotedBytes:
			sc.errors = append(sc.errors, q)
			sc.errorBytes += len(q)
		default:
			sc.more++
		}
	}
}

// quoteLine caps one line that may be quoted, its control characters
// escaped.
func quoteLine(s string) string {
	s = inert.String(s)
	if len(s) <= maxQuotedLine {
		return s
	}
	return s[:maxQuotedLine] + " [line cut]"
}

// excerpt is what a failed build quotes: the first error lines, and a
// last line saying how many more the log holds.
func (sc *scan) excerpt() []string {
	lines := append([]string(nil), sc.errors...)
	switch {
	case sc.more > 0 && sc.beyond > 0:
		lines = append(lines, fmt.Sprintf("... %d more lines in the build log, and %d past its size limit", sc.more, sc.beyond))
	case sc.more > 0:
		lines = append(lines, fmt.Sprintf("... %d more lines in the build log", sc.more))
	case sc.beyond > 0:
		lines = append(lines, fmt.Sprintf("... %d more lines past the build log's size limit", sc.beyond))
	}
	return lines
}

// finish writes how much was dropped, if anything, and says whether the
// log could be written.
func (l *buildLog) finish() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.out.Flush()
	if l.dropped > 0 {
		fmt.Fprintf(l.f, "\npatchbot: the build log was cut at %d bytes; %d more bytes of output were not kept\n", l.kept, l.dropped)
	}
	if l.werr != nil {
		return infra("writing the build log", l.werr)
	}
	return nil
}
