package vmrunner

import (
	"bytes"
	"fmt"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/patchbot/patchbot/internal/inert"
	"github.com/patchbot/patchbot/vmrunner/report"
)

// The console's trouble is read by report.Reader: each whole line is
// given to it once, and its first fatal report (an oops, a BUG, a
// lockup, a hung task, an RCU stall, a panic) is the kernel's trouble; its
// warnings are counted.

// longestSign bounds how much of a line's end is kept to find the banner
// split between two reads.
const longestSign = 32

// What the console may cost: a BootError quotes at most excerptBefore
// lines before the trouble and excerptAfter from it on, or the last
// excerptTail lines for a hang, each cut to its first and last
// excerptLine/2 bytes and all of them within excerptBytes.
const (
	excerptBefore = 10
	excerptAfter  = 60
	excerptTail   = 40
	excerptLine   = 512
	excerptBytes  = 16 << 10
)

// scanner reads the console as it arrives, once: each byte is looked at a
// fixed number of times, whatever the lines' length, so that a guest
// printing a 16 MiB line without a newline costs what 16 MiB of short
// lines do. It keeps the last lines (cut) for the excerpt, never the
// whole console.
type scanner struct {
	head    []byte // the current line's first excerptLine/2 bytes
	tail    []byte // and its last excerptLine/2 (the signs' end of it)
	lineLen int
	last    ring // the last excerptTail lines, as received (cut)
	banner  bool // "Linux version" was seen: the kernel is alive
	total   int64
	rep     report.Reader
	ended   bool // finish was called: the console will not grow

	reason string   // the first fatal report's kind, once found
	found  []string // its excerpt: the lines before it, its own, those after
	after  int      // lines added after the trouble line
}

// write scans p, the console's next bytes.
func (s *scanner) write(p []byte) {
	s.total += int64(len(p))
	for len(p) > 0 {
		i := bytes.IndexByte(p, '\n')
		chunk := p
		if i >= 0 {
			chunk = p[:i]
		}
		s.add(chunk)
		if i < 0 {
			return
		}
		s.endLine()
		p = p[i+1:]
	}
}

// add takes the next piece of the current line.
func (s *scanner) add(chunk []byte) {
	if !s.banner {
		// The line's end so far and the piece's start: a sign split
		// between two reads.
		if len(s.tail) > 0 {
			t := s.tail[max(0, len(s.tail)-longestSign):]
			edge := append(append(make([]byte, 0, len(t)+longestSign), t...), chunk[:min(len(chunk), longestSign)]...)
			s.mark(edge)
		}
		s.mark(chunk)
	}
	const half = excerptLine / 2
	if room := half - len(s.head); room > 0 {
		s.head = append(s.head, chunk[:min(len(chunk), room)]...)
	}
	s.lineLen += len(chunk)
	if len(chunk) >= half {
		s.tail = append(s.tail[:0], chunk[len(chunk)-half:]...)
	} else {
		s.tail = append(s.tail, chunk...)
		if len(s.tail) > half {
			s.tail = append(s.tail[:0], s.tail[len(s.tail)-half:]...)
		}
	}
}

var linuxVersion = []byte("Linux version")

// mark notes the banner in b.
func (s *scanner) mark(b []byte) {
	if !s.banner && bytes.Contains(b, linuxVersion) {
		s.banner = true
	}
}

// line is the current line as the report reader gets it: whole when
// short, else its start and its end around a note of its length.
func (s *scanner) line() []byte {
	const half = excerptLine / 2
	switch {
	case s.lineLen <= half:
		return s.head
	case s.lineLen <= excerptLine:
		return append(append([]byte{}, s.head...), s.tail[len(s.head)+len(s.tail)-s.lineLen:]...)
	}
	return fmt.Appendf(append([]byte{}, s.head...), " [line cut: %d bytes] %s", s.lineLen, s.tail)
}

func (s *scanner) endLine() {
	s.rep.Line(s.line())
	switch {
	case s.reason == "" && s.rep.FatalKind() != "":
		s.reason = string(s.rep.FatalKind())
		s.found = append(s.last.quoted(excerptBefore), s.quoted())
	case s.reason != "" && s.after < excerptAfter-1:
		s.found = append(s.found, s.quoted())
		s.after++
	}
	s.last.add(s.head, s.tail, s.lineLen)
	s.head, s.tail, s.lineLen = s.head[:0], s.tail[:0], 0
}

// finish says the console has ended (the VM stopped, or a request gave
// up on it): its unfinished line is read as a whole one, and the report
// it was in is closed as it stands.
func (s *scanner) finish() {
	if s.ended {
		return
	}
	s.ended = true
	if s.lineLen > 0 {
		s.endLine()
	}
	s.rep.End()
	if s.reason == "" && s.rep.FatalKind() != "" {
		// A transient report that nothing confirmed, made fatal by the
		// console's end: it is somewhere in the last lines.
		s.reason = string(s.rep.FatalKind())
		s.found = s.last.quoted(excerptTail)
	}
}

// quoted is the current line as an excerpt quotes it: escaped, and when
// longer than excerptLine, its start and its end around a note of its
// length.
func (s *scanner) quoted() string { return quoteLine(s.head, s.tail, s.lineLen) }

func quoteLine(head, tail []byte, n int) string {
	clean := func(b []byte) string { return inert.String(strings.TrimSuffix(string(b), "\r")) }
	switch {
	case n <= excerptLine/2:
		return clean(head)
	case n <= excerptLine:
		// head and tail overlap: the line is whole in them.
		return clean(append(append([]byte{}, head...), tail[len(head)+len(tail)-n:]...))
	}
	return fmt.Sprintf("%s [line cut: %d bytes] %s", inert.String(string(head)), n, clean(tail))
}

// ring keeps the last excerptTail lines as received, cut as a scanner
// keeps them; they are quoted only when an excerpt is made.
type ring struct {
	lines [excerptTail]struct {
		head, tail []byte
		n          int
	}
	next, count int
}

func (r *ring) add(head, tail []byte, n int) {
	l := &r.lines[r.next]
	l.head, l.tail, l.n = append(l.head[:0], head...), append(l.tail[:0], tail...), n
	r.next = (r.next + 1) % excerptTail
	r.count = min(r.count+1, excerptTail)
}

// quoted is the last n lines (fewer when fewer were kept), oldest first.
func (r *ring) quoted(n int) []string {
	n = min(n, r.count)
	out := make([]string, 0, n)
	for i := n; i > 0; i-- {
		l := &r.lines[(r.next-i+excerptTail)%excerptTail]
		out = append(out, quoteLine(l.head, l.tail, l.n))
	}
	return out
}

// excerpt is what a BootError quotes: around the first trouble, or the
// last lines (a hang), with the unfinished line, within excerptBytes.
func (s *scanner) excerpt() []byte {
	lines := s.found
	if s.reason == "" {
		lines = s.last.quoted(excerptTail)
	}
	if s.reason == "" && s.lineLen > 0 {
		lines = append(append([]string{}, lines...), s.quoted())
	}
	var b bytes.Buffer
	for i, l := range lines {
		if b.Len()+len(l)+1 > excerptBytes {
			fmt.Fprintf(&b, "[patchbot: %d more console lines left out]\n", len(lines)-i)
			break
		}
		b.WriteString(l)
		b.WriteByte('\n')
	}
	return b.Bytes()
}

// console is a serial console captured to a file by the hypervisor. It is
// read incrementally (a boot polls it every few milliseconds) and scanned
// as it is read; the first maxConsole bytes are kept for Console().
type console struct {
	path string
	mu   sync.Mutex
	off  int64  // bytes of the file read so far
	kept []byte // the first maxConsole of them
	rbuf []byte
	scan scanner
	// grew is when the console last grew, fatalAt when its first fatal
	// report began (zero before): a report is taken once it is whole, the
	// console quiet, or a few seconds old (fatal).
	grew, fatalAt time.Time
}

// refresh reads what the console has gained since the last call and scans
// it. It reads in pieces of a fixed size, so its memory does not grow
// with a burst of output.
func (c *console) refresh() {
	c.mu.Lock()
	defer c.mu.Unlock()
	f, err := os.Open(c.path)
	if err != nil {
		return
	}
	defer f.Close()
	if c.rbuf == nil {
		c.rbuf = make([]byte, 256<<10)
	}
	buf := c.rbuf
	for {
		n, err := f.ReadAt(buf, c.off)
		if n > 0 {
			c.grew = time.Now()
			c.off += int64(n)
			if room := maxConsole - len(c.kept); room > 0 {
				c.kept = append(c.kept, buf[:min(n, room)]...)
			}
			c.scan.write(buf[:n])
			if c.fatalAt.IsZero() && c.scan.reason != "" {
				c.fatalAt = c.grew
			}
		}
		if err != nil || n == 0 {
			return // io.EOF: all read for now
		}
	}
}

// trouble is a BootError for the first fatal report seen, or nil. A
// report still being printed is taken when it is whole, when the console
// has been quiet for reportQuiet, or reportWait after it began; ended
// says that the console will not grow (the VM stopped), and takes it as
// it stands.
func (c *console) trouble(ended bool) *BootError {
	c.refresh()
	c.mu.Lock()
	defer c.mu.Unlock()
	if ended {
		c.scan.finish()
		if c.fatalAt.IsZero() && c.scan.reason != "" {
			c.fatalAt = time.Now()
		}
	}
	if c.scan.reason == "" {
		return nil
	}
	rep := c.scan.rep.Fatal()
	now := time.Now()
	if !rep.Complete() && !ended && now.Sub(c.grew) < reportQuiet && now.Sub(c.fatalAt) < reportWait {
		return nil
	}
	return &BootError{Reason: c.scan.reason, Excerpt: c.scan.excerpt(), Report: rep}
}

// How long a fatal report still being printed is waited for: until the
// console is quiet for reportQuiet, at most reportWait after it began.
// An oops ends with its own marker and, with panic_on_oops, the VM; a
// lockup or a hung task has no marker, and the kernel prints its trace
// in a burst.
var (
	reportQuiet = time.Second
	reportWait  = 5 * time.Second
)

// warnings are the warnings the console showed so far, with their
// counts; more counts those past report.MaxWarnings titles.
func (c *console) warnings() (ws []report.Warning, more int) {
	c.refresh()
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.scan.rep.Warnings()
}

// tail is the console's last lines, for a hang or a VM that stopped.
func (c *console) tail() []byte {
	c.refresh()
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.scan.excerpt()
}

// lastGrew is when the console last grew (zero before it did), as of the
// last refresh: the boot loop asks right after trouble read the console.
func (c *console) lastGrew() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.grew
}

// alive reports whether the kernel's banner was seen.
func (c *console) alive() bool {
	c.refresh()
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.scan.banner
}

// bytes is the console so far (its first maxConsole bytes), control
// characters escaped.
func (c *console) bytes() []byte {
	c.refresh()
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]byte(nil), inert.Bytes(c.kept)...)
}
