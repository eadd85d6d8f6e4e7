package mailbox

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// fixtureMails returns every mail of the fixtures, as a fuzz seed corpus.
func fixtureMails(t testing.TB) [][]byte {
	var files []string
	for _, pat := range []string{"../testdata/mbox/*.mbox", "../testdata/mailbox/*.mbox", "../testdata/b4/*.mbox", "../testdata/seeds/*"} {
		m, _ := filepath.Glob(pat)
		files = append(files, m...)
	}
	var out [][]byte
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		ReadMbox(bytes.NewReader(data), func(raw []byte, _ int64) error {
			out = append(out, raw)
			return nil
		})
	}
	return out
}

// FuzzParse: no input makes the parser panic or hang, and what it returns
// is usable by assembly.
func FuzzParse(f *testing.F) {
	for _, raw := range fixtureMails(f) {
		f.Add(raw)
	}
	f.Add(nestedMultipart(DefaultLimits.MaxDepth))
	f.Add(nestedMultipart(3))
	f.Fuzz(func(t *testing.T, raw []byte) {
		m, err := ParseBytes(raw)
		if err != nil {
			if strings.Contains(err.Error(), "internal error") {
				t.Fatalf("the parser panicked: %v", err) // recovered, but a bug
			}
			return
		}
		diffProblem(m.Diff)
		Assemble([]*Message{m})
		ParseCommands(m)
		DiffFiles(m.Diff)
	})
}

// FuzzAssemble mutates whole fixture mboxes, so that assembly sees odd
// combinations of subjects, threading and diffs.
func FuzzAssemble(f *testing.F) {
	// One seed per fixture file: small inputs keep the fuzzer fast.
	for _, pat := range []string{"../testdata/mbox/*.mbox", "../testdata/mailbox/*.mbox", "../testdata/b4/*.mbox"} {
		files, _ := filepath.Glob(pat)
		for _, file := range files {
			data, err := os.ReadFile(file)
			if err != nil {
				f.Fatal(err)
			}
			f.Add(data)
		}
	}
	f.Add([]byte("From x\nSubject: [PATCH 0/0] a\n\nFrom y\nSubject: [PATCH 2/1] b\nIn-Reply-To: <a>\nMessage-ID: <a>\n\n"))
	f.Fuzz(func(t *testing.T, mbox []byte) {
		var msgs []*Message
		ReadMbox(bytes.NewReader(mbox), func(raw []byte, _ int64) error {
			if m, err := ParseBytes(raw); err == nil {
				msgs = append(msgs, m)
			}
			return nil
		})
		for _, s := range Assemble(msgs) {
			if len(s.Patches) == 0 {
				t.Fatalf("series without patches: %+v", s)
			}
			for _, p := range s.Patches {
				if p.Index < 1 || p.Index > s.Total {
					t.Fatalf("patch index %d outside 1..%d", p.Index, s.Total)
				}
				if p.Corrupt != "" && !strings.Contains(s.Reason, p.Corrupt) {
					t.Fatalf("corrupt patch %d not in the reason %q", p.Index, s.Reason)
				}
			}
			if s.Complete != (len(s.Missing) == 0) {
				t.Fatalf("complete %v with missing %v", s.Complete, s.Missing)
			}
			var buf bytes.Buffer
			if err := s.WriteMbox(&buf); err != nil {
				t.Fatal(err)
			}
		}
	})
}
