package main

import (
	"fmt"
	"go/ast"
	"go/token"
	"os"
	"strings"
)

// minRun is the shortest run of lines counted as a duplicate.
const minRun = 6

// dupe is a run of lines of logic that appears, the same to the letter
// (leading and trailing blanks aside), in two places.
type dupe struct {
	a, b  span
	lines int
}

type span struct {
	file       string
	first, end int // lines
}

func (d dupe) String() string {
	return fmt.Sprintf("%d lines: %s:%d-%d = %s:%d-%d", d.lines, d.a.file, d.a.first, d.a.end, d.b.file, d.b.first, d.b.end)
}

// logicLine is one line of logic: inside a function's body, not in a
// table (a composite literal over several lines), and neither blank, a
// comment, nor only closing brackets.
type logicLine struct {
	text string
	line int
}

// dupes finds the runs of minRun or more lines of logic, in production
// code (non-test files of packages that are not test-only), that appear
// the same in two places. Each maximal run is told once per pair of
// places.
func dupes(m *module) []dupe {
	type at struct {
		file string
		i    int
	}
	var files []string
	seqs := map[string][]logicLine{}
	for _, p := range m.pkgs {
		if p.testOnly() {
			continue
		}
		for i, f := range p.files {
			name := p.rel + "/" + p.names[i]
			files = append(files, name)
			seqs[name] = logicLines(m.fset, f)
		}
	}
	windows := map[string][]at{}
	for _, f := range files {
		s := seqs[f]
		for i := 0; i+minRun <= len(s); i++ {
			var b strings.Builder
			for _, l := range s[i : i+minRun] {
				b.WriteString(l.text)
				b.WriteByte('\n')
			}
			windows[b.String()] = append(windows[b.String()], at{f, i})
		}
	}
	// Pairs of places whose windows match; a run is the longest chain of
	// matching windows starting one after the other.
	type pair struct {
		a, b at
	}
	match := map[pair]bool{}
	for _, ats := range windows {
		for i := range ats {
			for j := i + 1; j < len(ats); j++ {
				a, b := ats[i], ats[j]
				if a.file == b.file && b.i-a.i < minRun && a.i-b.i < minRun {
					continue // overlapping windows of one run
				}
				match[pair{a, b}] = true
			}
		}
	}
	var out []dupe
	for p := range match {
		if match[pair{at{p.a.file, p.a.i - 1}, at{p.b.file, p.b.i - 1}}] {
			continue // not the start of its run
		}
		n := 0
		for match[pair{at{p.a.file, p.a.i + n}, at{p.b.file, p.b.i + n}}] {
			n++
		}
		sa, sb := seqs[p.a.file], seqs[p.b.file]
		last := n + minRun - 2
		out = append(out, dupe{
			a:     span{p.a.file, sa[p.a.i].line, sa[p.a.i+last].line},
			b:     span{p.b.file, sb[p.b.i].line, sb[p.b.i+last].line},
			lines: last + 1,
		})
	}
	return out
}

func logicLines(fset *token.FileSet, f *ast.File) []logicLine {
	src := map[int]bool{} // lines of logic
	tables := map[int]bool{}
	ast.Inspect(f, func(n ast.Node) bool {
		switch x := n.(type) {
		case *ast.FuncDecl:
			if x.Body != nil {
				for l := fset.Position(x.Body.Lbrace).Line + 1; l < fset.Position(x.Body.Rbrace).Line; l++ {
					src[l] = true
				}
			}
		case *ast.CompositeLit:
			first, last := fset.Position(x.Lbrace).Line, fset.Position(x.Rbrace).Line
			if last-first >= 2 {
				for l := first + 1; l <= last; l++ {
					tables[l] = true
				}
			}
		}
		return true
	})
	file := fset.File(f.Pos())
	text := sourceLines(fset, f)
	var out []logicLine
	for l := 1; l <= file.LineCount(); l++ {
		if !src[l] || tables[l] || l > len(text) {
			continue
		}
		t := strings.TrimSpace(text[l-1])
		if t == "" || strings.HasPrefix(t, "//") || strings.Trim(t, "})],;") == "" {
			continue
		}
		out = append(out, logicLine{t, l})
	}
	return out
}

// sourceLines are the lines of f's file.
func sourceLines(fset *token.FileSet, f *ast.File) []string {
	data, err := os.ReadFile(fset.Position(f.Pos()).Filename)
	if err != nil {
		return nil
	}
	return strings.Split(string(data), "\n")
}
