package invm

import (
	"fmt"
	"strings"
	"sync"

	"github.com/patchbot/patchbot/blame"
	"github.com/patchbot/patchbot/images"
	"github.com/patchbot/patchbot/suites"
	"github.com/patchbot/patchbot/vmrunner"
	"github.com/patchbot/patchbot/vmrunner/report"
)

// What the kernels said besides the numbers: the warnings their consoles
// showed, and the calls of the functions the series changed. Both are
// read the same way on both kernels.

// pace wraps the sides' guests so that a patched request that outlives a
// generous multiple of the base's own time for it is a hang
// (vmrunner.Pace); sides without a base and a patched kernel are left as
// they are.
func pace(sides []suites.Side) {
	base, patched := -1, -1
	for i, s := range sides {
		switch s.Kernel {
		case blame.Base:
			base = i
		case blame.Patched:
			patched = i
		}
	}
	if base < 0 || patched < 0 {
		return
	}
	p := vmrunner.NewPace()
	sides[base].Guest = p.Base(sides[base].Guest)
	sides[patched].Guest = p.Patched(sides[patched].Guest)
}

// warned puts each instance's kernel warnings into its side's result.
func warned(results []*suites.Result, insts []vmrunner.Instance) {
	for i, r := range results {
		if r == nil || i >= len(insts) || insts[i] == nil {
			continue
		}
		ws, more := insts[i].Warnings()
		r.Warnings, r.MoreWarnings = KernelWarnings(ws), more
	}
}

// KernelWarnings are the console's warnings as a Result keeps them.
func KernelWarnings(ws []report.Warning) []suites.KernelWarning {
	var out []suites.KernelWarning
	for _, w := range ws {
		out = append(out, suites.KernelWarning{Title: w.Report.Title, Kind: string(w.Report.Kind), Where: w.Report.Where(), Count: w.Count,
			Report: w.Report.Lines, Trace: w.Report.Trace()})
	}
	return out
}

// changedCache keeps the functions found for the last few patched
// kernels: every suite of a run asks for the same kernel's.
var changedCache struct {
	sync.Mutex
	keys []string
	vals map[string]Changed
}

// Changed is what the host knows of the code a series changed.
type Changed struct {
	// Funcs are the changed functions, More those past
	// report.MaxChanged.
	Funcs []report.Changed
	More  int
	// Compared says that the two kernels' machine code was compared
	// (report.CodeChanged): every function not in Funcs compiles to the
	// base's code.
	Compared bool
	// Err says why no function could be found.
	Err error
}

// ChangedFunctions are the functions of the patched kernel that the series
// changed, from both kernels' vmlinux: those holding code from the lines
// the series changed (report.Symbolizer.Changed), each marked with whether
// its compiled code differs from the base's; those whose code differs with
// no changed line in them (report.CodeChanged: a changed macro's or
// constant's users); and the base's functions the patched kernel lacks.
// Without the vmlinux of the base the series was built on (its commit and
// config), the code is not compared. A build without a record of its
// changes (made before they were kept) has none, and says so in Err.
func ChangedFunctions(base, patched *images.Build) Changed {
	if patched == nil || patched.Series == 0 {
		return Changed{}
	}
	if len(patched.Changes) == 0 {
		return Changed{Err: fmt.Errorf("the patched build's record keeps no changed lines")}
	}
	if patched.Vmlinux == "" {
		return Changed{Err: report.ErrNoVmlinux}
	}
	key := patched.Vmlinux + "\x00" + patched.Head
	if base != nil {
		key += "\x00" + base.Vmlinux
	}
	changedCache.Lock()
	defer changedCache.Unlock()
	if v, ok := changedCache.vals[key]; ok {
		return v
	}
	v := changedCode(base, patched)
	if changedCache.vals == nil {
		changedCache.vals = map[string]Changed{}
	}
	changedCache.vals[key] = v
	changedCache.keys = append(changedCache.keys, key)
	if len(changedCache.keys) > 4 {
		delete(changedCache.vals, changedCache.keys[0])
		changedCache.keys = changedCache.keys[1:]
	}
	return v
}

// changedCode is ChangedFunctions' work, uncached.
func changedCode(base, patched *images.Build) Changed {
	s, err := report.Open(patched.Vmlinux)
	if err != nil {
		return Changed{Err: err}
	}
	defer s.Close()
	m := map[string][][2]int{}
	for _, c := range patched.Changes {
		m[c.File] = c.Lines
	}
	var v Changed
	v.Funcs, v.More = s.Changed(m)
	if base == nil || base.Vmlinux == "" || base.Commit != patched.Commit || base.ConfigHash != patched.ConfigHash {
		return v // no base this series was built on: not compared
	}
	b, err := report.Open(base.Vmlinux)
	if err != nil {
		return v // the lines' functions, not compared
	}
	defer b.Close()
	code, err := report.CodeChanged(b, s)
	if err != nil {
		return v
	}
	v.Funcs, v.More = report.WithCode(v.Funcs, v.More, code)
	v.Compared = true
	return v
}

// Probes is the ParamProbes value (Options.Probes) for the changed
// functions: the first suites.MaxProbes of them.
func (c Changed) Probes() string {
	var names []string
	for _, f := range c.Funcs {
		if len(names) == suites.MaxProbes {
			break
		}
		names = append(names, f.Func)
	}
	return strings.Join(names, ",")
}

// NoteChanged completes each result's calls with what the host knows of
// the changed functions: the changed lines in each, the functions inlined
// into it and whether its compiled code differs from the base's, and the
// functions that were not probed; a series that changed no function, or
// whose functions could not be found, says so in the result's notes.
func NoteChanged(results []*suites.Result, c Changed) {
	for _, r := range results {
		if r == nil {
			continue
		}
		if r.Notes == nil {
			r.Notes = map[string]string{}
		}
		switch {
		case c.Err != nil:
			r.Notes[NoteChangedFunctions] = "not found: " + c.Err.Error()
			continue
		case len(c.Funcs) == 0 && c.Compared:
			r.Notes[NoteChangedFunctions] = suites.NoCompiledChange
			continue
		case len(c.Funcs) == 0:
			r.Notes[NoteChangedFunctions] = NoChangedCode
			continue
		}
		at := map[string]int{}
		for i, calls := range r.Calls {
			at[calls.Func] = i
		}
		for i, f := range c.Funcs {
			j, ok := at[f.Func]
			if !ok {
				why := "not probed: more than " + fmt.Sprint(suites.MaxProbes) + " functions changed"
				if i < suites.MaxProbes {
					why = "not counted"
				}
				r.Calls = append(r.Calls, suites.Calls{Func: f.Func, Err: why})
				j = len(r.Calls) - 1
			}
			r.Calls[j].Lines, r.Calls[j].Inlined, r.Calls[j].Code = f.Lines, f.Inlined, f.Code
		}
		if c.More > 0 {
			r.Notes[NoteChangedFunctions] = fmt.Sprintf("%d more functions changed, not listed", c.More)
		}
	}
}

// NoChangedCode is the note of a series whose changed lines hold no code
// of the kernel's own, when the kernels' code could not be compared. The
// line table names no function for a comment, a declaration, a macro or a
// constant: but a changed macro or constant changes the code of the
// functions that use it, and those are found only by comparing the code.
const NoChangedCode = "none found: no code of the kernel comes from the lines the series changed themselves " +
	"(a comment, a declaration, a macro or a constant); the functions that use a changed macro or constant " +
	"changed too, and they are not named or counted here"

// NoteChangedFunctions is the Result.Notes key that says why the changed
// functions' calls are missing.
const NoteChangedFunctions = "changed-functions"
