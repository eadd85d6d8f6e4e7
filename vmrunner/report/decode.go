package report

import (
	"debug/dwarf"
	"debug/elf"
	"errors"
	"fmt"
	"path"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Decoding is done in Go (debug/elf, debug/dwarf) from the vmlinux the
// kernel was built as, not with addr2line or scripts/faddr2line: it needs
// no tool on the host that reads the report (a worker, the coordinator),
// gives the chain of inlined calls at an address as addr2line -i does, and
// a patched kernel's vmlinux is the build's output, untrusted: a Go parser
// cannot be made to run code by it, and its cost is bounded here (the
// artifact's size is capped by images, the walk of the debug information
// by maxEntries and maxDecode).

// Bounds of one Decode: the debugging entries read for one frame, and the
// time for a whole report.
const (
	maxEntries = 2_000_000
	maxDepth   = 64
	maxDecode  = 20 * time.Second
)

// Symbolizer turns a trace's "func+off/size" into source lines, from one
// vmlinux with DWARF debug information.
type Symbolizer struct {
	path  string
	f     *elf.File
	dw    *dwarf.Data
	funcs map[string][]elf.Symbol
	units []unit         // compilation units by address
	cus   []*dwarf.Entry // every compilation unit, in order

	byAddrOnce sync.Once
	byAddr     []elf.Symbol // sized code symbols by address (textAt)

	allOnce sync.Once
	all     []elf.Symbol // symbols, code and data, by address (symbolAt)

	spanOnce   sync.Once
	marks      map[string]uint64 // the linker's symbols (spans)
	byDistance map[int64][]span
}

type unit struct {
	lo, hi uint64
	entry  *dwarf.Entry
}

// Open reads vmlinux's symbols and debug information.
func Open(vmlinux string) (*Symbolizer, error) {
	f, err := elf.Open(vmlinux)
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", vmlinux, err)
	}
	s := &Symbolizer{path: vmlinux, f: f, funcs: map[string][]elf.Symbol{}}
	syms, err := f.Symbols()
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("%s has no symbols: %w", vmlinux, err)
	}
	for _, sym := range syms {
		if elf.ST_TYPE(sym.Info) == elf.STT_FUNC {
			s.funcs[sym.Name] = append(s.funcs[sym.Name], sym)
		}
	}
	if s.dw, err = f.DWARF(); err != nil {
		f.Close()
		return nil, fmt.Errorf("%s has no DWARF debug information (CONFIG_DEBUG_INFO?): %w", vmlinux, err)
	}
	r := s.dw.Reader()
	for n := 0; ; n++ {
		e, err := r.Next()
		if err != nil {
			f.Close()
			return nil, fmt.Errorf("reading %s's compilation units: %w", vmlinux, err)
		}
		if e == nil {
			break
		}
		if e.Tag == dwarf.TagCompileUnit || e.Tag == dwarf.TagPartialUnit {
			s.cus = append(s.cus, e)
			ranges, _ := s.dw.Ranges(e)
			for _, rg := range ranges {
				if rg[1] > rg[0] {
					s.units = append(s.units, unit{lo: rg[0], hi: rg[1], entry: e})
				}
			}
		}
		r.SkipChildren()
	}
	sort.Slice(s.units, func(i, j int) bool { return s.units[i].lo < s.units[j].lo })
	return s, nil
}

// Close releases the file.
func (s *Symbolizer) Close() error { return s.f.Close() }

// Decode fills the report's frames with their source lines and says so in
// Report.Decoded; frames it cannot place are left as they were.
func (s *Symbolizer) Decode(r *Report) {
	deadline := time.Now().Add(maxDecode)
	placed := 0
	for i := range r.Frames {
		if time.Now().After(deadline) {
			r.Decoded = fmt.Sprintf("DWARF of %s: stopped after %s, %d of %d frames placed", s.path, maxDecode, placed, len(r.Frames))
			return
		}
		f := &r.Frames[i]
		if f.Module != "" {
			continue // no modules are built; a module's lines are not in vmlinux
		}
		pc, ok := s.address(*f)
		if !ok {
			continue
		}
		if f.Context != "RIP" && pc > 0 {
			// A call trace holds return addresses: the call is the
			// instruction before.
			pc--
		}
		if s.place(f, pc) {
			placed++
			if f.Context == "RIP" && r.Location != "" {
				atLocation(f, r.Location)
			}
		}
	}
	r.Decoded = fmt.Sprintf("DWARF of %s: %d of %d frames placed", s.path, placed, len(r.Frames))
}

// atLocation puts a BUG()'s or WARN()'s faulting instruction at the
// file:line the kernel printed for it. The kernel looks that location up
// in its bug table by the instruction's exact address, so it is the
// line of the BUG() itself; the line table may give the instruction
// another (gcc places the ud2 of a BUG_ON() after the function's last
// statement and gives it that line: seen on the sampler's BUG_ON, line
// 655 for 640). The innermost inlined function holds it when there is
// one.
func atLocation(f *Frame, location string) {
	i := strings.LastIndexByte(location, ':')
	if i < 0 {
		return
	}
	line, err := strconv.Atoi(location[i+1:])
	if err != nil {
		return
	}
	file := location[:i]
	if len(f.Inlined) > 0 {
		if f.Inlined[0].File == file {
			f.Inlined[0].Line = line
		}
		return
	}
	if f.File == file {
		f.Line = line
	}
}

// Decode decodes the report against vmlinux (Symbolizer.Decode); when it
// cannot be read, Report.Decoded says why.
func Decode(vmlinux string, r *Report) {
	if r == nil || len(r.Frames) == 0 {
		return
	}
	s, err := Open(vmlinux)
	if err != nil {
		r.Decoded = err.Error()
		return
	}
	defer s.Close()
	s.Decode(r)
}

// address is the frame's address: its function's symbol (the one of the
// printed size, for a static function whose name is not unique) plus its
// offset.
func (s *Symbolizer) address(f Frame) (uint64, bool) {
	syms := s.funcs[f.Func]
	if len(syms) == 0 || f.Offset >= max(f.Size, 1<<20) {
		return 0, false
	}
	for _, sym := range syms {
		if sym.Size == f.Size {
			return sym.Value + f.Offset, true
		}
	}
	if len(syms) == 1 {
		return syms[0].Value + f.Offset, true
	}
	return 0, false // several functions of that name, none of that size
}

func (s *Symbolizer) unitOf(pc uint64) *dwarf.Entry {
	i := sort.Search(len(s.units), func(i int) bool { return s.units[i].hi > pc })
	for ; i < len(s.units) && s.units[i].lo <= pc; i++ {
		if pc < s.units[i].hi {
			return s.units[i].entry
		}
	}
	return nil
}

// place sets the frame's source line and inlined calls for pc.
func (s *Symbolizer) place(f *Frame, pc uint64) bool {
	cu := s.unitOf(pc)
	if cu == nil {
		return false
	}
	lr, err := s.dw.LineReader(cu)
	if err != nil || lr == nil {
		return false
	}
	var le dwarf.LineEntry
	if err := lr.SeekPC(pc, &le); err != nil || le.File == nil {
		return false
	}
	root := ""
	if dir, ok := cu.Val(dwarf.AttrCompDir).(string); ok {
		root = parentDir(dir)
	}
	files := lr.Files()
	chain := s.inlineChain(cu, pc)
	file, line := relPath(le.File.Name, root), le.Line
	f.Inlined = nil
	// chain[0] is the function the frame's symbol is; chain[1:] are the
	// calls inlined into it, outermost first. Innermost first, each
	// inlined function is at the line of the next one's call.
	for i := len(chain) - 1; i >= 1; i-- {
		f.Inlined = append(f.Inlined, Inline{Func: s.name(chain[i]), File: file, Line: line})
		file, line = callSite(chain[i], files, root)
		if file == "" {
			break
		}
	}
	f.File, f.Line = file, line
	return f.File != ""
}

func callSite(e *dwarf.Entry, files []*dwarf.LineFile, root string) (string, int) {
	idx, ok1 := e.Val(dwarf.AttrCallFile).(int64)
	line, ok2 := e.Val(dwarf.AttrCallLine).(int64)
	if !ok1 || !ok2 || idx < 0 || int(idx) >= len(files) || files[idx] == nil {
		return "", 0
	}
	return relPath(files[idx].Name, root), int(line)
}

// parentDir is the source tree's root for a unit compiled in dir: the
// object tree (O=.out) sits in the source tree, and its parent is the root
// the kernel's own paths are relative to.
func parentDir(dir string) string { return path.Dir(path.Clean(dir)) }

// relPath is name relative to the source tree's root: "fs/squashfs/cache.c".
func relPath(name, root string) string {
	name = path.Clean(name)
	if root != "" && root != "." && strings.HasPrefix(name, root+"/") {
		return name[len(root)+1:]
	}
	for strings.HasPrefix(name, "../") {
		name = name[3:]
	}
	return strings.TrimPrefix(name, "./")
}

// inlineChain is the subprogram whose code holds pc and the inlined calls
// at pc inside it, outermost first.
func (s *Symbolizer) inlineChain(cu *dwarf.Entry, pc uint64) []*dwarf.Entry {
	var chain []*dwarf.Entry
	s.walkUnit(cu, func(e *dwarf.Entry) (enter, stop bool) {
		switch e.Tag {
		case dwarf.TagSubprogram, dwarf.TagInlinedSubroutine, dwarf.TagLexDwarfBlock:
			if !contains(s.dw, e, pc) {
				return false, false
			}
			if e.Tag != dwarf.TagLexDwarfBlock {
				chain = append(chain, e)
			}
			return true, !e.Children
		}
		return false, false
	})
	return chain
}

// walkUnit visits the entries of the unit cu depth first, at most
// maxEntries of them and maxDepth deep: visit says whether to enter an
// entry's children, and stop ends the walk.
func (s *Symbolizer) walkUnit(cu *dwarf.Entry, visit func(e *dwarf.Entry) (enter, stop bool)) {
	r := s.dw.Reader()
	r.Seek(cu.Offset)
	if e, err := r.Next(); err != nil || e == nil || !e.Children { // the unit itself
		return
	}
	for n, depth := 0, 1; n < maxEntries && depth > 0; n++ {
		e, err := r.Next()
		if err != nil || e == nil {
			return
		}
		if e.Tag == 0 {
			depth--
			continue
		}
		enter, stop := visit(e)
		switch {
		case stop:
			return
		case !e.Children:
		case enter:
			if depth++; depth > maxDepth {
				return
			}
		default:
			r.SkipChildren()
		}
	}
}

func contains(dw *dwarf.Data, e *dwarf.Entry, pc uint64) bool {
	ranges, err := dw.Ranges(e)
	if err != nil {
		return false
	}
	for _, rg := range ranges {
		if rg[0] <= pc && pc < rg[1] {
			return true
		}
	}
	return false
}

// name is an entry's function name, through its abstract origin or
// specification (an inlined or out-of-line copy names its original).
func (s *Symbolizer) name(e *dwarf.Entry) string {
	for hop := 0; e != nil && hop < 4; hop++ {
		if n, ok := e.Val(dwarf.AttrName).(string); ok {
			return n
		}
		off, ok := e.Val(dwarf.AttrAbstractOrigin).(dwarf.Offset)
		if !ok {
			if off, ok = e.Val(dwarf.AttrSpecification).(dwarf.Offset); !ok {
				break
			}
		}
		r := s.dw.Reader()
		r.Seek(off)
		next, err := r.Next()
		if err != nil {
			break
		}
		e = next
	}
	return "?"
}

// ErrNoVmlinux is Decode's answer when the kernel's vmlinux is not known.
var ErrNoVmlinux = errors.New("no vmlinux to decode the trace with")
