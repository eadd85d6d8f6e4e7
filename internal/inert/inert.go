// Package inert makes text from outside safe to print: every C0 control
// character (but tab and newline), DEL, every C1 control character, and
// every byte that is not UTF-8 comes out as a visible escape, so that a
// patch's subject, a compiler's line or a guest's console cannot move a
// terminal's cursor, retitle its window, set its clipboard or hide a line
// (ESC sequences, and their 8-bit C1 forms such as U+009B CSI).
//
// It is one helper for every stage: logs, terminal output, build and
// console logs, and the excerpts a reply quotes all go through it. It
// imports nothing of patchbot's, so any package may use it.
package inert

import (
	"fmt"
	"io"
	"strings"
	"sync"
	"unicode/utf8"
)

// The escapes: a C0 control, DEL or a stray byte is \xHH; a C1 control
// (a valid UTF-8 rune U+0080..U+009F) is \u00HH, which is also what JSON
// would write, so that a JSON log passed through a Writer stays JSON.
func appendEscape(dst []byte, b []byte) ([]byte, int) {
	c := b[0]
	if c < utf8.RuneSelf {
		if c == '\t' || c == '\n' || (c >= 0x20 && c != 0x7f) {
			return append(dst, c), 1
		}
		return fmt.Appendf(dst, `\x%02x`, c), 1
	}
	r, n := utf8.DecodeRune(b)
	switch {
	case r == utf8.RuneError && n <= 1:
		return fmt.Appendf(dst, `\x%02x`, c), 1
	case r >= 0x80 && r <= 0x9f:
		return fmt.Appendf(dst, `\u%04x`, r), n
	}
	return append(dst, b[:n]...), n
}

// needs reports whether b holds anything to escape.
func needs(b []byte) bool {
	for i := 0; i < len(b); {
		c := b[i]
		if c < utf8.RuneSelf {
			if c != '\t' && c != '\n' && (c < 0x20 || c == 0x7f) {
				return true
			}
			i++
			continue
		}
		r, n := utf8.DecodeRune(b[i:])
		if (r == utf8.RuneError && n <= 1) || (r >= 0x80 && r <= 0x9f) {
			return true
		}
		i += n
	}
	return false
}

// Bytes returns b with every control character and stray byte escaped;
// tab and newline stay. b itself is returned when nothing needs it.
func Bytes(b []byte) []byte {
	if !needs(b) {
		return b
	}
	out := make([]byte, 0, len(b)+16)
	for i := 0; i < len(b); {
		var n int
		out, n = appendEscape(out, b[i:])
		i += n
	}
	return out
}

// String is Bytes for a string.
func String(s string) string {
	if !needs([]byte(s)) {
		return s
	}
	return string(Bytes([]byte(s)))
}

// Line is String for one line of text: a newline is escaped too, so that
// a value (a subject, a file name) cannot start a line of its own in a log.
func Line(s string) string {
	return strings.ReplaceAll(String(s), "\n", `\n`)
}

// Writer escapes what is written through it. "\r\n" is written as "\n"
// (serial consoles and some tools end lines so); a lone carriage return,
// which would let the next text overwrite the line, is escaped. A UTF-8
// sequence or "\r\n" split between two writes is held until the next
// write or Flush. It is safe for concurrent use.
type Writer struct {
	mu      sync.Mutex // writes from several goroutines (progress, logs) may meet
	w       io.Writer
	pending []byte // an incomplete UTF-8 sequence, or a "\r", from the last write
	buf     []byte
}

// NewWriter returns a Writer escaping into w.
func NewWriter(w io.Writer) *Writer { return &Writer{w: w} }

// Write escapes p into the underlying writer. It reports len(p) written
// when the underlying write succeeded, whatever the escapes' length.
func (w *Writer) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	in := p
	if len(w.pending) > 0 {
		in = append(append([]byte(nil), w.pending...), p...)
		w.pending = w.pending[:0]
	}
	out := w.buf[:0]
	for i := 0; i < len(in); {
		c := in[i]
		if c == '\r' {
			if i+1 == len(in) {
				w.pending = append(w.pending, c)
				break
			}
			if in[i+1] == '\n' {
				i++ // "\r\n": the newline alone
				continue
			}
		}
		if c >= utf8.RuneSelf && !utf8.FullRune(in[i:]) {
			w.pending = append(w.pending, in[i:]...)
			break
		}
		var n int
		out, n = appendEscape(out, in[i:])
		i += n
	}
	w.buf = out[:0]
	if len(out) > 0 {
		if _, err := w.w.Write(out); err != nil {
			return 0, err
		}
	}
	return len(p), nil
}

// Flush writes what a last write left pending (a lone "\r", the start of
// a UTF-8 sequence), escaped.
func (w *Writer) Flush() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.pending) == 0 {
		return nil
	}
	var out []byte
	for i := 0; i < len(w.pending); {
		var n int
		out, n = appendEscape(out, w.pending[i:])
		i += n
	}
	w.pending = w.pending[:0]
	_, err := w.w.Write(out)
	return err
}

// Has reports whether s holds a control character (tab and newline
// included) or a byte that is not UTF-8: what a file name, an address or
// a ref must never hold.
func Has(s string) bool {
	return strings.ContainsAny(s, "\t\n") || needs([]byte(s))
}

// Clip cuts s to at most n bytes, at a character boundary, marking the
// cut with "…" (counted in n): how much of a stranger's text is repeated
// (a command line echoed, a subject in a log).
func Clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	cut := n - len("…")
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:max(cut, 0)] + "…"
}

var _ io.Writer = (*Writer)(nil)

// JSON escapes what encoding/json leaves raw in a JSON text: DEL and the
// C1 controls (U+0080..U+009F; U+009B is a CSI) become \u007f and
// \u00XX, which JSON reads back as the same characters. Outside strings a
// JSON text is ASCII without controls, and encoding/json escapes C0 and
// replaces bytes that are not UTF-8, so what comes out is the same JSON
// with nothing left to escape.
func JSON(b []byte) []byte {
	if !needs(b) {
		return b
	}
	out := make([]byte, 0, len(b)+16)
	for i := 0; i < len(b); {
		c := b[i]
		if c < utf8.RuneSelf {
			if c == 0x7f {
				out = append(out, `\u007f`...)
			} else {
				out = append(out, c)
			}
			i++
			continue
		}
		r, n := utf8.DecodeRune(b[i:])
		switch {
		case r >= 0x80 && r <= 0x9f:
			out = fmt.Appendf(out, `\u%04x`, r)
		case r == utf8.RuneError && n <= 1:
			out = append(out, `\ufffd`...)
		default:
			out = append(out, b[i:i+n]...)
		}
		i += n
	}
	return out
}
