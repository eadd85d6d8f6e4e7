package report

import (
	"debug/dwarf"
	"debug/elf"
	"fmt"
	"sort"
	"strings"
)

// Which functions did a series change? The lines it changed (images
// records them per patched build) are looked up in the patched vmlinux's
// DWARF line table: every instruction made from a changed line lies in
// some function of the kernel's symbol table, and that function is what a
// kprobe can count. A changed line of an inline function (a static
// helper, a header's static inline) has its instructions in the functions
// it was inlined into: those are the ones named, with the inlined one
// said, for an inlined function has no symbol of its own to probe; its
// calls are its callers'. A changed line that is a call of an inline
// function (spin_lock(), usleep_range()) may make no instruction of its
// own line: the line table gives them all to the inline function's body
// in its header, and only the inlined call's entry in the debugging
// information (DW_TAG_inlined_subroutine, its call_file and call_line)
// says where it was called; those entries are read too. A changed line
// that made no instruction and called nothing inline (a comment, a
// declaration, a macro no code uses) names no function.

// Changed is a function of the patched kernel that holds code from lines
// the series changed.
type Changed struct {
	// Func is the function's symbol: what a kprobe names.
	Func string `json:"func"`
	// Lines are the changed lines whose code is in it, "file:line" or
	// "file:first-last".
	Lines []string `json:"lines"`
	// Inlined are the functions the changed lines belong to that were
	// inlined into Func.
	Inlined []string `json:"inlined,omitempty"`
	// Code is what comparing the two kernels' machine code said of it
	// (CodeChanged): CodeDiffers, CodeSame, or "" when not compared.
	// A function of CodeDiffers with no Lines was found by that
	// comparison alone (it uses a changed macro or constant).
	Code string `json:"code,omitempty"`
}

// What Changed.Code says.
const (
	CodeDiffers = "differs"
	CodeSame    = "same"
	CodeGone    = "gone" // the base has it, the patched kernel not
)

// WithCode completes the functions the changed lines are in (Changed)
// with the comparison of the two kernels' code (CodeChanged): each is
// marked as differing or the same, and the functions whose code differs
// that hold no changed line follow them, then those the series removed,
// within MaxChanged; more is the functions past it.
func WithCode(lines []Changed, more int, code CodeDiff) ([]Changed, int) {
	differs := map[string]bool{}
	for _, f := range code.Differs {
		differs[f] = true
	}
	out := make([]Changed, 0, len(lines)+len(code.Differs)+len(code.Gone))
	named := map[string]bool{}
	for _, c := range lines {
		switch {
		case differs[c.Func]:
			c.Code = CodeDiffers
		case code.More == 0:
			c.Code = CodeSame
		default:
			c.Code = "" // it may be one of those past the bound
		}
		named[c.Func] = true
		out = append(out, c)
	}
	for _, list := range []struct {
		names []string
		code  string
	}{{code.Differs, CodeDiffers}, {code.Gone, CodeGone}} {
		for _, f := range list.names {
			if named[f] {
				continue
			}
			if len(out) == MaxChanged {
				more++
				continue
			}
			out = append(out, Changed{Func: f, Code: list.code})
		}
	}
	return out, more + code.More
}

// MaxChanged bounds the functions Changed returns.
const MaxChanged = 64

// Changed is the functions holding code from the changed lines (file ->
// inclusive line ranges, paths relative to the source tree), in the order
// of their first changed line; more counts those past MaxChanged.
func (s *Symbolizer) Changed(changes map[string][][2]int) (out []Changed, more int) {
	if len(changes) == 0 {
		return nil, 0
	}
	type hit struct {
		file string
		line int
		pc   uint64
		cu   *dwarf.Entry
		// call: the line calls an inline function here; what was
		// inlined is the callee, not the changed line's function.
		call bool
	}
	byFunc := map[string][]hit{}
	var order []string
	for _, cu := range s.cus {
		lr, err := s.dw.LineReader(cu)
		if err != nil || lr == nil {
			continue
		}
		root := ""
		if dir, ok := cu.Val(dwarf.AttrCompDir).(string); ok {
			root = parentDir(dir)
		}
		relevant := false
		for _, f := range lr.Files() {
			if f != nil {
				if _, ok := changes[relPath(f.Name, root)]; ok {
					relevant = true
					break
				}
			}
		}
		if !relevant {
			continue
		}
		var le dwarf.LineEntry
		for lr.Next(&le) == nil {
			if le.EndSequence || le.File == nil {
				continue
			}
			file := relPath(le.File.Name, root)
			ranges, ok := changes[file]
			if !ok || !inRanges(ranges, le.Line) {
				continue
			}
			fn := s.funcOf(le.Address)
			if fn == "" {
				continue
			}
			if _, seen := byFunc[fn]; !seen {
				order = append(order, fn)
			}
			byFunc[fn] = append(byFunc[fn], hit{file, le.Line, le.Address, cu, false})
		}
		for _, c := range s.inlinedCalls(cu, lr.Files(), root, changes) {
			fn := s.funcOf(c.pc)
			if fn == "" {
				continue
			}
			if _, seen := byFunc[fn]; !seen {
				order = append(order, fn)
			}
			byFunc[fn] = append(byFunc[fn], hit{c.file, c.line, c.pc, cu, true})
		}
	}
	for _, fn := range order {
		if len(out) == MaxChanged {
			more++
			continue
		}
		c := Changed{Func: fn}
		lines := map[string][]int{}
		var files []string
		inlined := map[string]bool{}
		for _, h := range byFunc[fn] {
			if _, ok := lines[h.file]; !ok {
				files = append(files, h.file)
			}
			lines[h.file] = append(lines[h.file], h.line)
			if h.call {
				continue
			}
			if chain := s.inlineChain(h.cu, h.pc); len(chain) > 1 {
				if name := s.name(chain[len(chain)-1]); name != "?" && name != baseName(fn) {
					inlined[name] = true
				}
			}
		}
		for _, f := range files {
			c.Lines = append(c.Lines, spans(f, lines[f])...)
		}
		for name := range inlined {
			c.Inlined = append(c.Inlined, name)
		}
		sort.Strings(c.Inlined)
		out = append(out, c)
	}
	return out, more
}

// inlinedCall is an inline function's call from a changed line: where
// the line is, and the first address of the inlined code.
type inlinedCall struct {
	file string
	line int
	pc   uint64
}

// inlinedCalls are the calls of inline functions the unit cu makes from
// the changed lines, read from its DW_TAG_inlined_subroutine entries
// (at most maxEntries of them read, maxDepth deep).
func (s *Symbolizer) inlinedCalls(cu *dwarf.Entry, files []*dwarf.LineFile, root string, changes map[string][][2]int) []inlinedCall {
	var out []inlinedCall
	s.walkUnit(cu, func(e *dwarf.Entry) (enter, stop bool) {
		if e.Tag != dwarf.TagInlinedSubroutine {
			return true, false
		}
		file, line := callSite(e, files, root)
		if ranges, ok := changes[file]; !ok || !inRanges(ranges, line) {
			return true, false
		}
		if rs, err := s.dw.Ranges(e); err == nil && len(rs) > 0 {
			out = append(out, inlinedCall{file, line, rs[0][0]})
		}
		return true, false
	})
	return out
}

// funcOf is the function a changed instruction is in, as its calls are
// counted: a ".cold" part under its function's name; "" outside every
// function (assembly's untyped code symbols included).
func (s *Symbolizer) funcOf(pc uint64) string {
	sym, ok := s.textAt(pc)
	if !ok || elf.ST_TYPE(sym.Info) != elf.STT_FUNC {
		return ""
	}
	return s.counted(sym.Name)
}

// counted is the function a code symbol's calls are counted under: a
// ".cold" part's function, when the kernel has it; the symbol itself
// otherwise.
func (s *Symbolizer) counted(sym string) string {
	if base, ok := strings.CutSuffix(sym, ".cold"); ok && len(s.funcs[base]) > 0 {
		return base
	}
	return sym
}

func inRanges(ranges [][2]int, line int) bool {
	for _, r := range ranges {
		if r[0] <= line && line <= r[1] {
			return true
		}
	}
	return false
}

// baseName is a symbol's function: "f" of "f.isra.0" or "f.constprop.0".
func baseName(sym string) string {
	if i := strings.IndexByte(sym, '.'); i > 0 {
		return sym[:i]
	}
	return sym
}

// spans writes a file's lines as "file:a-b" runs.
func spans(file string, lines []int) []string {
	sort.Ints(lines)
	var out []string
	for i := 0; i < len(lines); {
		j := i
		for j+1 < len(lines) && lines[j+1] <= lines[j]+1 {
			j++
		}
		if lines[i] == lines[j] {
			out = append(out, fmt.Sprintf("%s:%d", file, lines[i]))
		} else {
			out = append(out, fmt.Sprintf("%s:%d-%d", file, lines[i], lines[j]))
		}
		i = j + 1
	}
	return out
}
