package report

import (
	"bytes"
	"debug/dwarf"
	"debug/elf"
	"fmt"
	"sort"
	"strconv"
	"strings"

	"golang.org/x/arch/x86/x86asm"
)

// Which functions' compiled code did a series change? A changed line
// that is a #define, a constant or a structure's field makes no code of
// its own (Changed names no function for it), yet every function using it
// is compiled anew: the panel's cache-sizing patches change one #define
// each, and squashfs_fill_super's code is what changes. Those functions
// are found by comparing the two kernels' machine code, function by
// function. Both kernels are built from one tree, with one config and one
// compiler, so the series is the only difference. (The units that include
// a changed header cannot be told from the debugging information: a
// header that only defines macros, or whose types the reduced debugging
// information leaves out, is not in a unit's file table. Every function
// is compared instead: about half a second for the suites' kernel,
// BenchmarkChangedFunctions.)
//
// Bytes alone cannot be compared: a function that grew moves every
// function and variable after it, and with them the displacement of each
// call, jump and address in code that did not change. Two functions whose
// bytes differ are decoded and compared instruction by instruction: the
// same operation and registers, and each operand that differs must point
// at the same thing in its own kernel (the same offset in its function
// for its own jumps; the same symbol and offset in it; a string of the
// same text; the same distance between two of the linker's symbols). What
// remains is a difference the compiler made. A PC-relative operand is
// read from the decoded instruction, so an instruction the decoder does
// not know could hide one; sameConstant allows for the one seen.

// CodeDiff is what comparing two kernels' code found.
type CodeDiff struct {
	// Differs are the functions of the patched kernel whose compiled
	// code differs from the base's function of the same name in the
	// same compilation unit, or that the base does not have, named as
	// Changed names them (a ".cold" part under its function), in
	// address order.
	Differs []string
	// Gone are the base's functions that the patched kernel has under
	// no form of their name (a series that removes a function's last
	// user, and the compiler drops it).
	Gone []string
	// More counts those past MaxChanged.
	More int
}

// CodeChanged compares the functions of base and patched (the kernel
// built with the series).
func CodeChanged(base, patched *Symbolizer) (CodeDiff, error) {
	var d CodeDiff
	before, err := base.code()
	if err != nil {
		return d, fmt.Errorf("the base kernel: %w", err)
	}
	after, err := patched.code()
	if err != nil {
		return d, fmt.Errorf("the patched kernel: %w", err)
	}
	old := map[string]function{}
	for _, f := range before {
		old[f.key] = f
	}
	seen := map[string]bool{}
	add := func(list *[]string, name string) {
		if seen[name] {
			return
		}
		seen[name] = true
		if len(d.Differs)+len(d.Gone) == MaxChanged {
			d.More++
			return
		}
		*list = append(*list, name)
	}
	present := map[string]bool{}
	for _, f := range after {
		present[baseName(f.name)] = true
		if o, ok := old[f.key]; ok && sameCode(base, patched, o, f) {
			continue
		}
		add(&d.Differs, patched.counted(f.name))
	}
	for _, f := range before {
		if !present[baseName(f.name)] {
			add(&d.Gone, f.name)
		}
	}
	return d, nil
}

// function is one function's code in its kernel.
type function struct {
	// key is the compilation unit and the symbol's stableName, with
	// the symbol's rank among those of that key when there are more:
	// "fs/squashfs/super.c squashfs_fill_super".
	key   string
	name  string
	start uint64
	code  []byte
}

// maxCodeBytes bounds the code read from one kernel: the suites' kernel
// holds about 10 MB of text.
const maxCodeBytes = 64 << 20

// code is every function of the kernel, in address order.
func (s *Symbolizer) code() ([]function, error) {
	s.symbolAt(0) // fills all
	sections := map[elf.SectionIndex][]byte{}
	var out []function
	rank := map[string]int{}
	total := 0
	for _, sym := range s.all {
		if elf.ST_TYPE(sym.Info) != elf.STT_FUNC || sym.Size == 0 || int(sym.Section) >= len(s.f.Sections) {
			continue
		}
		sec := s.f.Sections[sym.Section]
		if sec.Flags&elf.SHF_EXECINSTR == 0 {
			continue
		}
		data, ok := sections[sym.Section]
		if !ok && sec.Type == elf.SHT_PROGBITS {
			if total += int(sec.Size); total > maxCodeBytes {
				return nil, fmt.Errorf("more than %d MB of code to compare", maxCodeBytes>>20)
			}
			var err error
			if data, err = sec.Data(); err != nil {
				return nil, fmt.Errorf("reading %s: %w", sec.Name, err)
			}
			sections[sym.Section] = data
		}
		lo := sym.Value - sec.Addr
		if data == nil || lo+sym.Size > uint64(len(data)) {
			continue
		}
		unit := "?"
		if cu := s.unitOf(sym.Value); cu != nil {
			unit, _ = cu.Val(dwarf.AttrName).(string)
		}
		key := unit + " " + stableName(sym.Name)
		if rank[key]++; rank[key] > 1 {
			key += fmt.Sprintf(" (%d)", rank[key])
		}
		out = append(out, function{key: key, name: sym.Name, start: sym.Value, code: data[lo : lo+sym.Size]})
	}
	return out, nil
}

// sameCode says whether function a of kernel as and b of kernel bs are
// the same code.
func sameCode(as, bs *Symbolizer, a, b function) bool {
	if bytes.Equal(a.code, b.code) {
		return true
	}
	if len(a.code) != len(b.code) {
		return false // the same instructions have the same lengths
	}
	c := comparison{as: as, bs: bs, a: a, b: b}
	for off := 0; off < len(a.code); {
		x, errx := x86asm.Decode(a.code[off:], 64)
		y, erry := x86asm.Decode(b.code[off:], 64)
		if errx != nil || erry != nil || x.Len == 0 {
			if a.code[off] != b.code[off] {
				return false
			}
			off++
			continue
		}
		if x.Len != y.Len || x.Op != y.Op || x.Prefix != y.Prefix || x.Opcode != y.Opcode {
			return false
		}
		next := uint64(off + x.Len)
		for i := range x.Args {
			if x.Args[i] == nil && y.Args[i] == nil {
				break
			}
			if !c.sameArg(x.Args[i], y.Args[i], next) {
				return false
			}
		}
		off += x.Len
	}
	return true
}

// comparison is two functions' code compared, each in its kernel.
type comparison struct {
	as, bs *Symbolizer
	a, b   function
}

// sameArg compares an operand of the instruction ending at offset next
// in both functions.
func (c comparison) sameArg(x, y x86asm.Arg, next uint64) bool {
	if x == y {
		return true
	}
	switch x := x.(type) {
	case x86asm.Rel:
		y, ok := y.(x86asm.Rel)
		return ok && c.sameTarget(c.a.start+next+uint64(int64(x)), c.b.start+next+uint64(int64(y)))
	case x86asm.Mem:
		y, ok := y.(x86asm.Mem)
		if !ok || x.Segment != y.Segment || x.Base != y.Base || x.Index != y.Index || x.Scale != y.Scale {
			return false
		}
		if x.Base == x86asm.RIP {
			return c.sameTarget(c.a.start+next+uint64(x.Disp), c.b.start+next+uint64(y.Disp))
		}
		return c.sameConstant(x.Disp, y.Disp)
	case x86asm.Imm:
		y, ok := y.(x86asm.Imm)
		return ok && c.sameConstant(int64(x), int64(y))
	}
	return false
}

// sameConstant compares two constants that differ: the same if they are
// addresses of the same thing, or the same distance between two of the
// linker's symbols (the image's size from _text to _end, say).
func (c comparison) sameConstant(x, y int64) bool {
	if c.sameTarget(uint64(x), uint64(y)) {
		return true
	}
	// A physical address of the kernel image (__pa_symbol): its
	// virtual address less the top 2 GB the kernel is linked at.
	if 0 <= x && x < 1<<31 && 0 <= y && y < 1<<31 && c.sameTarget(uint64(x)+kernelBase, uint64(y)+kernelBase) {
		return true
	}
	// An instruction the decoder does not know (AMX's tilerelease)
	// throws it off, and a PC-relative displacement of the next one
	// reads as a constant: it is the same when it points at the same
	// address from the moved function.
	if y-x == int64(c.a.start-c.b.start) {
		return true
	}
	for _, d := range c.as.spans()[x] {
		if c.bs.span(d) == y {
			return true
		}
	}
	return false
}

// kernelBase is where the x86-64 kernel image's virtual addresses begin.
const kernelBase = 0xffffffff80000000

// sameTarget says whether two addresses, one in each kernel, point at the
// same thing. A per-CPU variable's address is small: the per-CPU section
// is linked at 0.
func (c comparison) sameTarget(x, y uint64) bool {
	inA, inB := x-c.a.start < uint64(len(c.a.code)), y-c.b.start < uint64(len(c.b.code))
	if inA || inB {
		return inA && inB && x-c.a.start == y-c.b.start
	}
	if x == y {
		return true // nothing before it moved
	}
	dx, okx := c.as.pointsAt(x)
	dy, oky := c.bs.pointsAt(y)
	return okx && oky && dx == dy
}

// pointsAt writes an address as what it points at: a symbol and an
// offset in it (a symbol of no size only at its start), the text of an
// unnamed string, or the data section it lies in.
func (s *Symbolizer) pointsAt(addr uint64) (string, bool) {
	at := func(sym elf.Symbol) string {
		return stableName(sym.Name) + "+" + strconv.FormatUint(addr-sym.Value, 10)
	}
	if sym, ok := s.symbolAt(addr); ok {
		return at(sym), true
	}
	for _, sec := range s.f.Sections {
		if sec.Addr == 0 || addr < sec.Addr || addr >= sec.Addr+sec.Size {
			continue
		}
		if sec.Flags&elf.SHF_EXECINSTR != 0 {
			// Code no symbol holds (an alternative's or an
			// exception's stub): its place after the symbol before
			// it.
			if sym, ok := s.symbolBefore(addr); ok {
				return at(sym), true
			}
			return "", false
		}
		if sec.Type != elf.SHT_PROGBITS {
			return "", false
		}
		if str, ok := cString(sec, addr-sec.Addr); ok {
			return "string " + strconv.Quote(str), true
		}
		// Unnamed data that is no string (a switch's jump table)
		// holds addresses that move: its section is all there is to
		// compare.
		return "data in " + sec.Name, true
	}
	return "", false
}

// cString is the string at off in sec: text after a NUL (or the
// section's start) up to a NUL, at least 2 characters, at most 80
// compared.
func cString(sec *elf.Section, off uint64) (string, bool) {
	buf := make([]byte, 82)
	start := 1
	if off == 0 {
		start = 0
		buf = buf[1:]
	} else {
		off--
	}
	n, _ := sec.ReadAt(buf, int64(off))
	buf = buf[:n]
	if start == 1 && (n == 0 || buf[0] != 0) {
		return "", false
	}
	text := buf[start:]
	if i := bytes.IndexByte(text, 0); i >= 0 {
		text = text[:i]
	} else if len(text) < 80 {
		return "", false
	}
	if len(text) < 2 {
		return "", false
	}
	for _, c := range text {
		if c != '\t' && c != '\n' && c != 1 /* KERN_SOH */ && (c < ' ' || c > '~') {
			return "", false
		}
	}
	return string(text), true
}

// stableName is a symbol's name without the numbers gcc gives local
// copies ("__already_done.12", "f.constprop.0"), which another function
// of the unit changing may renumber.
func stableName(name string) string {
	parts := strings.Split(name, ".")
	for i := 1; i < len(parts); i++ {
		if _, err := strconv.Atoi(parts[i]); err == nil {
			parts[i] = "#"
		}
	}
	return strings.Join(parts, ".")
}

// symbolBefore is the last symbol at or before addr, within 1 MB.
func (s *Symbolizer) symbolBefore(addr uint64) (elf.Symbol, bool) {
	s.symbolAt(addr) // fills all
	i := sort.Search(len(s.all), func(i int) bool { return s.all[i].Value > addr }) - 1
	if i < 0 || addr-s.all[i].Value > 1<<20 {
		return elf.Symbol{}, false
	}
	return s.all[i], true
}

// A span is two of the linker's symbols (the untyped, unsized names a
// linker script defines: _text, _end, __bss_start): code uses the
// distance between them as a constant.
type span struct{ from, to string }

// spans are the distances between the linker's symbols, by value.
func (s *Symbolizer) spans() map[int64][]span {
	s.spanOnce.Do(func() {
		s.marks = map[string]uint64{}
		var names []string
		for _, sym := range s.all {
			if sym.Size == 0 && elf.ST_TYPE(sym.Info) == elf.STT_NOTYPE && elf.ST_BIND(sym.Info) == elf.STB_GLOBAL &&
				strings.HasPrefix(sym.Name, "_") && sym.Value >= kernelBase {
				if _, dup := s.marks[sym.Name]; !dup && len(names) < maxMarks {
					s.marks[sym.Name] = sym.Value
					names = append(names, sym.Name)
				}
			}
		}
		s.byDistance = map[int64][]span{}
		for _, a := range names {
			for _, b := range names {
				if d := int64(s.marks[b] - s.marks[a]); d > 0 {
					s.byDistance[d] = append(s.byDistance[d], span{a, b})
				}
			}
		}
	})
	return s.byDistance
}

// maxMarks bounds the linker's symbols taken: their pairs are kept.
const maxMarks = 512

// span is the distance a span has in this kernel, 0 when it has not both.
func (s *Symbolizer) span(d span) int64 {
	s.spans()
	from, ok1 := s.marks[d.from]
	to, ok2 := s.marks[d.to]
	if !ok1 || !ok2 {
		return 0
	}
	return int64(to - from)
}

// symbolAt is the sized symbol (code or data) holding addr, or a symbol
// of no size (a table the linker script or kallsyms names) starting at it.
func (s *Symbolizer) symbolAt(addr uint64) (elf.Symbol, bool) {
	s.allOnce.Do(func() {
		syms, _ := s.f.Symbols()
		for _, sym := range syms {
			switch elf.ST_TYPE(sym.Info) {
			case elf.STT_FUNC, elf.STT_OBJECT, elf.STT_NOTYPE:
				// per-CPU variables too, linked from 0 and
				// addressed through %gs
				s.all = append(s.all, sym)
			}
		}
		sort.Slice(s.all, func(i, j int) bool {
			if s.all[i].Value != s.all[j].Value {
				return s.all[i].Value < s.all[j].Value
			}
			return s.all[i].Name < s.all[j].Name
		})
	})
	i := sort.Search(len(s.all), func(i int) bool { return s.all[i].Value > addr }) - 1
	var exact *elf.Symbol
	for ; i >= 0 && addr-s.all[i].Value <= 1<<20; i-- {
		sym := s.all[i]
		if addr < sym.Value+sym.Size {
			return sym, true
		}
		if sym.Value == addr && exact == nil {
			exact = &s.all[i]
		}
	}
	if exact != nil {
		return *exact, true
	}
	return elf.Symbol{}, false
}
