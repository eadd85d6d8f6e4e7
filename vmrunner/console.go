package vmrunner

import (
	"bytes"
	"os"
	"regexp"
	"sync"
)

// trouble matches console lines that mean the kernel is broken. The first
// match decides the reason of a BootError.
var trouble = []struct {
	re     *regexp.Regexp
	reason string
}{
	{regexp.MustCompile(`Kernel panic - not syncing`), "kernel panic"},
	{regexp.MustCompile(`(?m)^.*(Oops: |general protection fault|BUG: unable to handle|BUG: kernel NULL pointer)`), "oops"},
	{regexp.MustCompile(`(?m)^.*BUG: (soft|hard)? ?lockup`), "lockup"},
	{regexp.MustCompile(`(?m)^.*(kernel BUG at|BUG: )`), "kernel BUG"},
}

// scanTrouble returns the reason and the byte offset of the first sign of
// trouble in console output, or "" if there is none.
func scanTrouble(out []byte) (reason string, at int) {
	at = -1
	for _, t := range trouble {
		loc := t.re.FindIndex(out)
		if loc != nil && (at < 0 || loc[0] < at) {
			reason, at = t.reason, loc[0]
		}
	}
	return reason, at
}

// excerpt returns the console lines around offset at: a few before (what
// the kernel was doing) and more after (the trace). With at < 0 it returns
// the tail, which is where a hang stopped.
func excerpt(out []byte, at int) []byte {
	const before, after, tail = 10, 60, 40
	lines := bytes.SplitAfter(out, []byte("\n"))
	if len(lines) > 0 && len(lines[len(lines)-1]) == 0 {
		lines = lines[:len(lines)-1]
	}
	if at < 0 {
		if len(lines) > tail {
			lines = lines[len(lines)-tail:]
		}
		return bytes.Join(lines, nil)
	}
	n, off := 0, 0
	for i, l := range lines {
		if off+len(l) > at {
			n = i
			break
		}
		off += len(l)
	}
	lo, hi := max(0, n-before), min(len(lines), n+after)
	return bytes.Join(lines[lo:hi], nil)
}

// console is a serial console captured to a file by QEMU. Reads are
// incremental: a boot polls it every few milliseconds.
type console struct {
	path string
	mu   sync.Mutex
	buf  []byte
}

func (c *console) refresh() []byte {
	c.mu.Lock()
	defer c.mu.Unlock()
	f, err := os.Open(c.path)
	if err != nil {
		return c.buf
	}
	defer f.Close()
	if st, err := f.Stat(); err == nil && st.Size() > int64(len(c.buf)) {
		more := make([]byte, st.Size()-int64(len(c.buf)))
		n, _ := f.ReadAt(more, int64(len(c.buf)))
		c.buf = append(c.buf, more[:n]...)
	}
	return c.buf
}

func (c *console) bytes() []byte {
	b := c.refresh()
	return append([]byte(nil), b...)
}
