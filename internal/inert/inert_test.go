package inert

import (
	"bytes"
	"strings"
	"testing"
)

func TestString(t *testing.T) {
	tests := []struct{ in, want string }{
		{"plain text\twith a tab\n", "plain text\twith a tab\n"},
		{"caf\u00e9 \u4e16\u754c", "caf\u00e9 \u4e16\u754c"},
		// SGR, a window title (OSC 0), the clipboard (OSC 52), a cursor move.
		{"\x1b[31mred\x1b[0m", `\x1b[31mred\x1b[0m`},
		{"\x1b]0;owned\x07", `\x1b]0;owned\x07`},
		{"\x1b]52;c;aGVsbG8=\x07", `\x1b]52;c;aGVsbG8=\x07`},
		{"line\r\x1b[2Kfake", `line\x0d\x1b[2Kfake`},
		{"nul\x00 del\x7f bell\x07", `nul\x00 del\x7f bell\x07`},
		// C1 as UTF-8 (U+009B CSI, U+009D OSC) and as a stray byte.
		{"\u009b31m \u009d0;t", `\u009b31m \u009d0;t`},
		{"stray \x9b31m and \xff", `stray \x9b31m and \xff`},
		{"\u00a0 is not C1", "\u00a0 is not C1"},
	}
	for _, tt := range tests {
		if got := String(tt.in); got != tt.want {
			t.Errorf("String(%q) = %q, want %q", tt.in, got, tt.want)
		}
		if String(tt.want) != tt.want {
			t.Errorf("the escaped form %q still holds a control character", tt.want)
		}
	}
	if got := Line("two\nlines"); got != `two\nlines` {
		t.Errorf("Line = %q", got)
	}
	if !Has("a\x00b") || !Has("a\nb") || Has("fs/squashfs/cache.c") {
		t.Error("Has is wrong")
	}
}

// A Writer gives what String gives, however the input is cut into
// writes; "\r\n" ends a line as "\n".
func TestWriterAcrossWrites(t *testing.T) {
	in := []byte("ok \u009b1m x\r\ny\rz \x1b[H caf\u00e9\r")
	want := String(strings.ReplaceAll(string(in[:len(in)-1]), "\r\n", "\n")) + `\x0d`
	for cut := 1; cut <= len(in); cut++ {
		var out bytes.Buffer
		w := NewWriter(&out)
		for i := 0; i < len(in); i += cut {
			chunk := in[i:min(i+cut, len(in))]
			if n, err := w.Write(chunk); err != nil || n != len(chunk) {
				t.Fatalf("Write = %d, %v", n, err)
			}
		}
		if err := w.Flush(); err != nil {
			t.Fatal(err)
		}
		if out.String() != want {
			t.Errorf("writes of %d bytes: %q, want %q", cut, out.String(), want)
		}
	}
}

func TestClip(t *testing.T) {
	for _, c := range []struct {
		in   string
		n    int
		want string
	}{
		{"short", 64, "short"},
		{"exactly5", 8, "exactly5"},
		{"ab€cd", 5, "ab…"}, // "€" is 3 bytes: cut before it, not through it
		{"abcdef", 4, "a…"},
		{"€€", 2, "…"},
	} {
		if got := Clip(c.in, c.n); got != c.want {
			t.Errorf("Clip(%q, %d) = %q, want %q", c.in, c.n, got, c.want)
		}
		if got := Clip(c.in, c.n); len(got) > max(c.n, len("…")) {
			t.Errorf("Clip(%q, %d) is %d bytes", c.in, c.n, len(got))
		}
	}
}

func BenchmarkBytesClean(b *testing.B) {
	line := bytes.Repeat([]byte("fs/squashfs/cache.c:42: warning: unused variable 'x'\n"), 1<<14)
	b.SetBytes(int64(len(line)))
	for b.Loop() {
		Bytes(line)
	}
}
