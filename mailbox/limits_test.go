package mailbox

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"testing"
)

// nestedMultipart is a mail of depth nested multipart/mixed parts, the
// innermost holding a small text.
func nestedMultipart(depth int) []byte {
	var b bytes.Buffer
	b.WriteString("From: x@example.org\nSubject: nest\nMessage-ID: <nest@example.org>\nMIME-Version: 1.0\n" +
		"Content-Type: multipart/mixed; boundary=\"b0\"\n\n")
	for i := 1; i < depth; i++ {
		fmt.Fprintf(&b, "--b%d\nContent-Type: multipart/mixed; boundary=\"b%d\"\n\n", i-1, i)
	}
	fmt.Fprintf(&b, "--b%d\nContent-Type: text/plain\n\nhello\n", depth-1)
	for i := depth - 1; i >= 0; i-- {
		fmt.Fprintf(&b, "--b%d--\n", i)
	}
	return b.Bytes()
}

// hugeHeader is a mail whose header holds n bytes of Received: fields.
func hugeHeader(n int) []byte {
	var b bytes.Buffer
	b.WriteString("From: x@example.org\nSubject: big\n")
	line := "Received: from relay.example.org by mx.example.org; Tue, 1 Dec 2026 09:00:00 +0000\n"
	for b.Len() < n {
		b.WriteString(line)
	}
	b.WriteString("\nbody\n")
	return b.Bytes()
}

func TestLimits(t *testing.T) {
	manyParts := func(n int) []byte {
		var b bytes.Buffer
		b.WriteString("From: x@example.org\nSubject: parts\nMIME-Version: 1.0\nContent-Type: multipart/mixed; boundary=zz\n\n")
		for range n {
			b.WriteString("--zz\nContent-Type: text/plain\n\nx\n")
		}
		b.WriteString("--zz--\n")
		return b.Bytes()
	}
	bigPartHeader := func() []byte {
		return []byte("From: x@example.org\nSubject: p\nMIME-Version: 1.0\nContent-Type: multipart/mixed; boundary=zz\n\n--zz\n" +
			strings.Repeat("X-Junk: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\n", 5000) + "\nx\n--zz--\n")
	}
	tests := []struct {
		name  string
		raw   []byte
		limit string // "" means it parses
	}{
		{"nested within the limit", nestedMultipart(DefaultLimits.MaxDepth), ""},
		{"nested 5,000 levels", nestedMultipart(5000), "MIME parts"},
		{"nested one too deep", nestedMultipart(DefaultLimits.MaxDepth + 1), "MIME depth"},
		{"13 MB of header", hugeHeader(13 << 20), "header size"},
		{"header just under the limit", hugeHeader(DefaultLimits.MaxHeader - 200), ""},
		{"a part header of 340 kB", bigPartHeader(), "MIME part header size"},
		{"600 parts", manyParts(600), "MIME parts"},
		{"500 parts", manyParts(500), ""},
		{"40 MB", append(hugeHeader(1000), bytes.Repeat([]byte("x\n"), 20<<20)...), "message size"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m, err := ParseBytes(tt.raw)
			var lim *LimitError
			switch {
			case tt.limit == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case tt.limit == "":
				if m.From != "x@example.org" {
					t.Errorf("From %q", m.From)
				}
			case !errors.As(err, &lim) || lim.Limit != tt.limit:
				t.Fatalf("got %v, want the %s limit", err, tt.limit)
			case !strings.Contains(err.Error(), tt.limit):
				t.Errorf("the error %q does not name the limit", err)
			}
		})
	}
	// The innermost text of a mail within the depth limit is read.
	if m, err := ParseBytes(nestedMultipart(DefaultLimits.MaxDepth)); err != nil || strings.TrimSpace(m.Body) != "hello" {
		t.Fatalf("nested body %q, %v", m.Body, err)
	}
}

// BenchmarkHostile is what refusing hostile mail costs (docs/mailbox.md):
// 5,000 nested multiparts and 13 MB of header fields.
func BenchmarkHostile(b *testing.B) {
	for _, c := range []struct {
		name string
		raw  []byte
	}{
		{"nested5000", nestedMultipart(5000)},
		{"nestedAtLimit", nestedMultipart(DefaultLimits.MaxDepth)},
		{"header13MB", hugeHeader(13 << 20)},
	} {
		b.Run(c.name, func(b *testing.B) {
			b.SetBytes(int64(len(c.raw)))
			b.ReportAllocs()
			for b.Loop() {
				ParseBytes(c.raw)
			}
		})
	}
}
