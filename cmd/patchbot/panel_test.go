package main

import (
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// docs/suites.md keeps each table of the panel between a line naming the
// command that prints it, relative to the repository's root, and
// panelTableEnd.
var panelTableStart = regexp.MustCompile(`<!-- (patchbot panel [^\n]*?) -->\n`)

const panelTableEnd = "<!-- end of the panel's table -->"

// The built binary judges the panel's recorded results (each patch's
// `patchbot suite run --json`, kept in testdata/panel/results/PROFILE),
// and what it prints is each table docs/suites.md shows: the tables in
// the docs are the measurements, judged by the code of now. A change to
// the rule or to the panel that changes a verdict fails here until the
// docs say so.
func TestBinaryPanelTables(t *testing.T) {
	bin := buildBinary(t)
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	doc, err := os.ReadFile(filepath.Join(root, "docs", "suites.md"))
	if err != nil {
		t.Fatal(err)
	}
	s := string(doc)
	marks := panelTableStart.FindAllStringSubmatchIndex(s, -1)
	if len(marks) < 2 {
		t.Fatalf("docs/suites.md has %d panel tables, want the one before the profile changed and the one after", len(marks))
	}
	for _, m := range marks {
		command := s[m[2]:m[3]]
		body := s[m[1]:]
		end := strings.Index(body, panelTableEnd)
		if end < 0 {
			t.Fatalf("docs/suites.md: the table of %q has no %q", command, panelTableEnd)
		}
		t.Run(command, func(t *testing.T) {
			args, err := splitWords(strings.TrimPrefix(command, "patchbot "))
			if err != nil {
				t.Fatal(err)
			}
			r := runBinaryIn(t, root, bin, nil, args...)
			stdout, code := r.stdout, r.code
			if code != 0 && code != 1 || !strings.HasPrefix(stdout, "| patch | class | expected | reported |") {
				t.Fatalf("%s: exit %d, stdout:\n%s", command, code, stdout)
			}
			// Exit 1 is a wrong verdict or a patch not measured; the table
			// says which.
			wrong := strings.Contains(stdout, "| **no")
			missing := strings.Contains(stdout, "No results yet")
			if (code == 1) != (wrong || missing) {
				t.Errorf("exit %d, with a wrong verdict %v and results missing %v", code, wrong, missing)
			}
			if missing {
				t.Errorf("%s: results missing:\n%s", command, stdout)
			}
			if got, want := strings.TrimSpace(body[:end]), strings.TrimSpace(stdout); got != want {
				t.Errorf("docs/suites.md's table is not what %q prints on the recorded results:\n--- docs\n%s\n--- %s\n%s", command, got, command, want)
			}
		})
	}
}

// A results directory with some of the panel's patches: without
// --measured the others are missing and the exit status says so; with it
// the table is of the measured patches only, and a right verdict exits 0.
func TestBinaryPanelMeasured(t *testing.T) {
	bin := buildBinary(t)
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	for _, name := range []string{"noop-comment", "fuse-delay"} {
		b, err := os.ReadFile(filepath.Join(root, "testdata", "panel", "results", "quick", name+".json"))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, name+".json"), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	r := runBinaryIn(t, root, bin, nil, "panel", dir)
	if r.code != 1 || !strings.Contains(r.stdout, "No results yet for") || !strings.Contains(r.stdout, "readahead-off") {
		t.Errorf("without --measured: exit %d, want 1 and the missing patches named; stdout:\n%s", r.code, r.stdout)
	}
	r = runBinaryIn(t, root, bin, nil, "panel", "--measured", dir)
	if r.code != 0 || strings.Contains(r.stdout, "No results yet") {
		t.Fatalf("--measured: exit %d, want 0 and nothing missing; stdout:\n%s", r.code, r.stdout)
	}
	var rows []string
	for _, line := range strings.Split(r.stdout, "\n") {
		if strings.HasPrefix(line, "| `") {
			rows = append(rows, strings.SplitN(line, " |", 2)[0])
		}
	}
	if want := []string{"| `noop-comment`", "| `fuse-delay`"}; strings.Join(rows, ",") != strings.Join(want, ",") {
		t.Errorf("--measured: rows %q, want %q", rows, want)
	}
	if !strings.Contains(r.stdout, "2 of 2 scored verdicts right") {
		t.Errorf("--measured: want 2 of 2 scored verdicts right; stdout:\n%s", r.stdout)
	}
}

// splitWords splits a command line into words as a shell does for words
// and double quotes, the only quoting the docs' lines use.
func splitWords(s string) ([]string, error) {
	var words []string
	var w strings.Builder
	in, quoted := false, false
	for _, r := range s {
		switch {
		case r == '"':
			quoted, in = !quoted, true
		case r == ' ' && !quoted:
			if in {
				words = append(words, w.String())
				w.Reset()
			}
			in = false
		default:
			w.WriteRune(r)
			in = true
		}
	}
	if quoted {
		return nil, errors.New("a double quote is not closed")
	}
	if in {
		words = append(words, w.String())
	}
	return words, nil
}
