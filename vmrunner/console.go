package vmrunner

import (
	"bytes"
	"fmt"
	"os"
	"strings"
	"sync"

	"github.com/patchbot/patchbot/internal/inert"
)

// trouble names console lines that mean the kernel is broken, in the
// order they are looked for in a line: the first trouble line decides the
// reason of a BootError. Each is a plain substring, so that a line costs
// one pass per sign, whatever it holds.
var trouble = []struct {
	signs  []string
	reason string
}{
	{[]string{"Kernel panic - not syncing"}, "kernel panic"},
	{[]string{"Oops: ", "general protection fault", "BUG: unable to handle", "BUG: kernel NULL pointer"}, "oops"},
	{[]string{"BUG: soft lockup", "BUG: hard lockup", "BUG: lockup"}, "lockup"},
	{[]string{"kernel BUG at", "BUG: "}, "kernel BUG"},
}

// generic is the class whose sign ("BUG: ") starts the signs of others:
// in an unfinished line it decides nothing yet ("BUG: soft lockup" may be
// on its way).
const generic = 3

// longestSign bounds how much of a line's end is kept to find a sign split
// between two reads.
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
	signs   [4]bool // the trouble classes the current line shows so far
	last    ring    // the last excerptTail lines, as received (cut)
	banner  bool    // "Linux version" was seen: the kernel is alive
	total   int64

	reason  string   // the first trouble, once found
	found   []string // its excerpt: the lines before it, its own, those after
	pending bool     // the trouble line has not ended yet: found lacks it
	after   int      // lines added after the trouble line
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
			s.decide(false)
			return
		}
		s.endLine()
		p = p[i+1:]
	}
}

// add takes the next piece of the current line.
func (s *scanner) add(chunk []byte) {
	if s.reason == "" || !s.banner {
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

// mark notes the trouble classes and the banner in b.
func (s *scanner) mark(b []byte) {
	if !s.banner && bytes.Contains(b, linuxVersion) {
		s.banner = true
	}
	if s.reason != "" {
		return
	}
	bug := bytes.Contains(b, []byte("BUG"))
	for _, sg := range signBytes {
		if !s.signs[sg.class] && (bug || !sg.bug) && bytes.Contains(b, sg.sign) {
			s.signs[sg.class] = true
		}
	}
}

// signBytes are trouble's signs as bytes, each with its class; those with
// "BUG" in them are looked for only in a line that has it.
var signBytes = func() (out []struct {
	sign  []byte
	class int
	bug   bool
}) {
	for c, t := range trouble {
		for _, sign := range t.signs {
			out = append(out, struct {
				sign  []byte
				class int
				bug   bool
			}{[]byte(sign), c, strings.Contains(sign, "BUG")})
		}
	}
	return out
}()

// decide takes the first trouble the current line shows; ended says the
// line is whole (an unfinished one does not decide on the generic sign).
func (s *scanner) decide(ended bool) {
	if s.reason != "" {
		return
	}
	for c, t := range trouble {
		if s.signs[c] && (ended || c != generic) {
			s.reason, s.pending = t.reason, true
			s.found = s.last.quoted(excerptBefore)
			return
		}
	}
}

func (s *scanner) endLine() {
	s.decide(true)
	switch {
	case s.pending:
		s.found, s.pending = append(s.found, s.quoted()), false
	case s.reason != "" && s.after < excerptAfter-1:
		s.found = append(s.found, s.quoted())
		s.after++
	}
	s.last.add(s.head, s.tail, s.lineLen)
	s.head, s.tail, s.lineLen, s.signs = s.head[:0], s.tail[:0], 0, [4]bool{}
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
	if (s.reason == "" || s.pending) && s.lineLen > 0 {
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
			c.off += int64(n)
			if room := maxConsole - len(c.kept); room > 0 {
				c.kept = append(c.kept, buf[:min(n, room)]...)
			}
			c.scan.write(buf[:n])
		}
		if err != nil || n == 0 {
			return // io.EOF: all read for now
		}
	}
}

// trouble is a BootError for the first sign of trouble seen, or nil.
func (c *console) trouble() *BootError {
	c.refresh()
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.scan.reason == "" {
		return nil
	}
	return &BootError{Reason: c.scan.reason, Excerpt: c.scan.excerpt()}
}

// tail is the console's last lines, for a hang or a VM that stopped.
func (c *console) tail() []byte {
	c.refresh()
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.scan.excerpt()
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
