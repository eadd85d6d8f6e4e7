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
	vals map[string]changedFuncs
}

type changedFuncs struct {
	funcs []report.Changed
	more  int
	err   error
}

// ChangedFunctions are the functions of the patched kernel that hold code
// from the lines the series changed (report.Symbolizer.Changed), from its
// vmlinux; more counts those past report.MaxChanged. A build without a
// record of its changes (made before they were kept) has none, and says
// so in err.
func ChangedFunctions(patched *images.Build) (funcs []report.Changed, more int, err error) {
	if patched == nil || patched.Series == 0 {
		return nil, 0, nil
	}
	if len(patched.Changes) == 0 {
		return nil, 0, fmt.Errorf("the patched build's record keeps no changed lines")
	}
	if patched.Vmlinux == "" {
		return nil, 0, report.ErrNoVmlinux
	}
	key := patched.Vmlinux + "\x00" + patched.Head
	changedCache.Lock()
	defer changedCache.Unlock()
	if v, ok := changedCache.vals[key]; ok {
		return v.funcs, v.more, v.err
	}
	var v changedFuncs
	if s, err := report.Open(patched.Vmlinux); err != nil {
		v.err = err
	} else {
		m := map[string][][2]int{}
		for _, c := range patched.Changes {
			m[c.File] = c.Lines
		}
		v.funcs, v.more = s.Changed(m)
		s.Close()
	}
	if changedCache.vals == nil {
		changedCache.vals = map[string]changedFuncs{}
	}
	changedCache.vals[key] = v
	changedCache.keys = append(changedCache.keys, key)
	if len(changedCache.keys) > 4 {
		delete(changedCache.vals, changedCache.keys[0])
		changedCache.keys = changedCache.keys[1:]
	}
	return v.funcs, v.more, v.err
}

// Probes is the ParamProbes value (Options.Probes) for the changed
// functions: the first suites.MaxProbes of them.
func Probes(funcs []report.Changed) string {
	var names []string
	for _, f := range funcs {
		if len(names) == suites.MaxProbes {
			break
		}
		names = append(names, f.Func)
	}
	return strings.Join(names, ",")
}

// NoteChanged completes each result's calls with what the host knows of
// the changed functions: the changed lines in each and the functions
// inlined into it, and the functions that were not probed; a series whose
// changed lines made no code in any function, or whose functions could
// not be found, says so in the result's notes.
func NoteChanged(results []*suites.Result, funcs []report.Changed, more int, err error) {
	for _, r := range results {
		if r == nil {
			continue
		}
		if r.Notes == nil {
			r.Notes = map[string]string{}
		}
		switch {
		case err != nil:
			r.Notes[NoteChangedFunctions] = "not found: " + err.Error()
			continue
		case len(funcs) == 0:
			r.Notes[NoteChangedFunctions] = NoChangedCode
			continue
		}
		at := map[string]int{}
		for i, c := range r.Calls {
			at[c.Func] = i
		}
		for i, f := range funcs {
			j, ok := at[f.Func]
			if !ok {
				why := "not probed: more than " + fmt.Sprint(suites.MaxProbes) + " functions changed"
				if i < suites.MaxProbes {
					why = "not counted"
				}
				r.Calls = append(r.Calls, suites.Calls{Func: f.Func, Err: why})
				j = len(r.Calls) - 1
			}
			r.Calls[j].Lines, r.Calls[j].Inlined = f.Lines, f.Inlined
		}
		if more > 0 {
			r.Notes[NoteChangedFunctions] = fmt.Sprintf("%d more functions changed, not listed", more)
		}
	}
}

// NoChangedCode is the note of a series whose changed lines hold no code
// of the kernel's own. The line table names no function for a comment, a
// declaration, a macro or a constant: but a changed macro or constant
// changes the code of the functions that use it (the panel's
// frag-cache-* and meta-cache-* change one #define each), and those are
// not found this way, so the note does not say that no code changed.
const NoChangedCode = "none found: no code of the kernel comes from the lines the series changed themselves " +
	"(a comment, a declaration, a macro or a constant); the functions that use a changed macro or constant " +
	"changed too, and they are not named or counted here"

// NoteChangedFunctions is the Result.Notes key that says why the changed
// functions' calls are missing.
const NoteChangedFunctions = "changed-functions"
