package mailbox

import (
	"bytes"
	"fmt"
)

// Limits bound what one mail may cost. Anyone can send patchbot mail, and
// without them a mail of deeply nested multiparts takes time quadratic in
// its size, and megabytes of header fields take dozens of times their size
// in memory. Real kernel mail stays far below every one of them.
type Limits struct {
	MaxSize   int64 // bytes of the whole mail
	MaxHeader int   // bytes of the header, and of each MIME part's header
	MaxDepth  int   // multipart nesting: a plain mail is 0, multipart/mixed 1
	MaxParts  int   // MIME parts in all
}

// DefaultLimits are what Parse, ParseBytes and every Source apply. The
// largest patch mails on lore are a few megabytes.
var DefaultLimits = Limits{MaxSize: 32 << 20, MaxHeader: 256 << 10, MaxDepth: 8, MaxParts: 512}

// LimitError says which limit a mail broke; sources log it as the reason
// the mail was skipped.
type LimitError struct {
	Limit string // "message size", "header size", "MIME part header size", "MIME depth", "MIME parts"
	Max   int64
	Got   int64 // at least this much; a scan stops at the first excess
}

func (e *LimitError) Error() string {
	return fmt.Sprintf("mail exceeds the %s limit: %d > %d", e.Limit, e.Got, e.Max)
}

// checkLimits looks at the raw mail before any parsing: its size and the
// size of its header. It returns where the header ends.
func (l Limits) check(raw []byte) error {
	if int64(len(raw)) > l.MaxSize {
		return &LimitError{Limit: "message size", Max: l.MaxSize, Got: int64(len(raw))}
	}
	if n := headerLen(raw, l.MaxHeader+1); n > l.MaxHeader {
		return &LimitError{Limit: "header size", Max: int64(l.MaxHeader), Got: int64(n)}
	}
	return nil
}

// headerLen is the length of the header block at the start of b (up to
// and including the empty line), looking no further than limit bytes.
func headerLen(b []byte, limit int) int {
	if len(b) > limit {
		b = b[:limit]
	}
	pos := 0
	for pos < len(b) {
		i := bytes.IndexByte(b[pos:], '\n')
		if i < 0 {
			return len(b)
		}
		line := b[pos : pos+i]
		pos += i + 1
		if len(line) == 0 || (len(line) == 1 && line[0] == '\r') {
			return pos
		}
	}
	return pos
}

// checkParts scans a MIME body for its part headers before go-message
// reads them: each must be under MaxHeader, and there may be at most
// MaxParts. Boundaries are learned from the Content-Type fields seen, so
// that a diff's "--- a/file" line is never mistaken for one.
func (l Limits) checkParts(body []byte, boundary string) error {
	boundaries := map[string]bool{}
	if boundary != "" {
		boundaries[boundary] = true
	}
	parts := 0
	pos := 0
	for pos < len(body) {
		end := bytes.IndexByte(body[pos:], '\n')
		next := len(body)
		if end >= 0 {
			next = pos + end + 1
		}
		line := bytes.TrimRight(body[pos:next], "\r\n \t")
		pos = next
		if len(line) < 3 || line[0] != '-' || line[1] != '-' {
			continue
		}
		if !boundaries[string(line[2:])] {
			continue // not a delimiter, or the closing one ("--b--")
		}
		parts++
		if parts > l.MaxParts {
			return &LimitError{Limit: "MIME parts", Max: int64(l.MaxParts), Got: int64(parts)}
		}
		n := headerLen(body[pos:], l.MaxHeader+1)
		if n > l.MaxHeader {
			return &LimitError{Limit: "MIME part header size", Max: int64(l.MaxHeader), Got: int64(n)}
		}
		for _, nb := range boundaryParams(body[pos : pos+n]) {
			boundaries[nb] = true
		}
		pos += n
	}
	return nil
}

// boundaryParams finds boundary="..." parameters in a header block.
func boundaryParams(h []byte) []string {
	var out []string
	low := bytes.ToLower(h)
	for {
		i := bytes.Index(low, []byte("boundary="))
		if i < 0 {
			return out
		}
		v := h[i+len("boundary="):]
		low = low[i+len("boundary="):]
		h = v
		if len(v) > 0 && v[0] == '"' {
			if j := bytes.IndexByte(v[1:], '"'); j >= 0 {
				out = append(out, string(v[1:1+j]))
			}
			continue
		}
		j := bytes.IndexAny(v, "; \t\r\n")
		if j < 0 {
			j = len(v)
		}
		if j > 0 {
			out = append(out, string(v[:j]))
		}
	}
}
