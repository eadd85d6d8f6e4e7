package judge

import (
	"sort"

	"github.com/patchbot/patchbot/suites"
)

// Besides the numbers, a run says two things about the patched kernel:
// the kernel warnings its console showed that the base's did not, and
// whether the suites ran the code the series changed.

// WarningCount is one kernel warning title with its count on each
// kernel, over every suite of the run.
type WarningCount struct {
	Title string `json:"title"`
	// Kind is "WARNING", or a transient report's that passed ("soft
	// lockup", "RCU stall"): a vCPU the host starved looks like one.
	Kind  string `json:"kind,omitempty"`
	Where string `json:"where,omitempty"`
	// Base and Patched count it on each kernel.
	Base    int `json:"base"`
	Patched int `json:"patched"`
	// Suites are the suites whose runs showed it, in order.
	Suites []string `json:"suites,omitempty"`
	// Report and Trace are its first report's console lines and decoded
	// frames (the patched kernel's when it showed it).
	Report []string `json:"report,omitempty"`
	Trace  []string `json:"trace,omitempty"`
}

// New says whether the patch brought the warning: the patched kernel
// showed it and the base, over the same suites, never did. A transient
// report that passed is never new: on a busy host under TCG a guest's
// vCPU can be starved for as long (vmrunner/report.Kind.Transient).
func (w WarningCount) New() bool { return w.Patched > 0 && w.Base == 0 && !w.Transient() }

// Transient says whether it is a stall or lockup report that passed.
func (w WarningCount) Transient() bool { return w.Kind != "" && w.Kind != "WARNING" }

// Warnings counts the kernel warnings of both kernels by title, the
// patched kernel's first, then the base's alone.
func Warnings(base, patched []suites.Result) []WarningCount {
	var out []WarningCount
	at := map[string]int{}
	add := func(rs []suites.Result, patchedSide bool) {
		for _, r := range rs {
			for _, w := range r.Warnings {
				i, ok := at[w.Title]
				if !ok {
					i = len(out)
					at[w.Title] = i
					out = append(out, WarningCount{Title: w.Title, Kind: w.Kind, Where: w.Where, Report: w.Report, Trace: w.Trace})
				}
				c := &out[i]
				if patchedSide {
					c.Patched += w.Count
				} else {
					c.Base += w.Count
				}
				if n := len(c.Suites); n == 0 || c.Suites[n-1] != r.Suite {
					c.Suites = append(c.Suites, r.Suite)
				}
			}
		}
	}
	add(patched, true)
	add(base, false)
	return out
}

// NewWarnings are the warnings the patch brought (WarningCount.New).
func NewWarnings(ws []WarningCount) []WarningCount {
	var out []WarningCount
	for _, w := range ws {
		if w.New() {
			out = append(out, w)
		}
	}
	return out
}

// Exercised is whether the suites ran the code the series changed: the calls
// of each function that holds changed code, counted by a kprobe in every
// round, on both kernels.
type Exercised struct {
	Funcs []FuncCalls `json:"funcs,omitempty"`
	// Note says why there are no functions, or what more there is
	// (invm.NoteChangedFunctions).
	Note string `json:"note,omitempty"`
}

// FuncCalls is one changed function's calls over every suite of the run.
type FuncCalls struct {
	Func    string   `json:"func"`
	Lines   []string `json:"lines,omitempty"`
	Inlined []string `json:"inlined,omitempty"`
	// Code says whether its compiled code differs from the base's:
	// "differs", "same", "gone" (only the base has it), or "" when the
	// code was not compared.
	Code string `json:"code,omitempty"`
	// Patched and Base are the calls on each kernel, over Rounds rounds
	// of the patched kernel; BaseCounted is false when the base was not
	// counted (the base lacks the function, or its rounds were kept from
	// an earlier run).
	Patched     uint64 `json:"patched"`
	Base        uint64 `json:"base"`
	BaseCounted bool   `json:"base_counted,omitempty"`
	Rounds      int    `json:"rounds"`
	// Suites are the suites whose rounds called it on the patched kernel.
	Suites []string `json:"suites,omitempty"`
	// Err says why it could not be counted on the patched kernel.
	Err string `json:"err,omitempty"`
}

// Counted says whether the function's calls were counted.
func (f FuncCalls) Counted() bool { return f.Err == "" && f.Rounds > 0 }

// ExercisedOf is what the run exercised, from its results: nil when no result says
// anything of the changed functions (a run from before they were
// counted, an A/A run).
func ExercisedOf(base, patched []suites.Result) *Exercised {
	var out Exercised
	at := map[string]int{}
	any := false
	for _, r := range patched {
		if note := r.Notes[noteChangedFunctions]; note != "" && out.Note == "" {
			out.Note, any = note, true
		}
		for _, c := range r.Calls {
			any = true
			i, ok := at[c.Func]
			if !ok {
				i = len(out.Funcs)
				at[c.Func] = i
				out.Funcs = append(out.Funcs, FuncCalls{Func: c.Func, Lines: c.Lines, Inlined: c.Inlined, Code: c.Code})
			}
			f := &out.Funcs[i]
			if c.Err != "" {
				if f.Err == "" && f.Rounds == 0 {
					f.Err = c.Err
				}
				continue
			}
			f.Err = ""
			f.Patched += c.Count
			f.Rounds += c.Rounds
			if c.Count > 0 {
				f.Suites = append(f.Suites, r.Suite)
			}
		}
	}
	for _, r := range base {
		for _, c := range r.Calls {
			if i, ok := at[c.Func]; ok && c.Err == "" && c.Rounds > 0 {
				out.Funcs[i].Base += c.Count
				out.Funcs[i].BaseCounted = true
			}
		}
	}
	if !any {
		return nil
	}
	sort.SliceStable(out.Funcs, func(i, j int) bool { return out.Funcs[i].Patched > out.Funcs[j].Patched })
	return &out
}

// NeverRan says whether the suites never ran the changed code: every
// changed function was counted, and none was called on the patched
// kernel.
func (r *Exercised) NeverRan() bool {
	if r == nil || len(r.Funcs) == 0 {
		return false
	}
	for _, f := range r.Funcs {
		if !f.Counted() || f.Patched > 0 {
			return false
		}
	}
	return true
}

// NoMachineCode says whether the series changed no compiled code: every
// function compiles to the base's (the changed functions' code compared
// the same, or none differed at all).
func (r *Exercised) NoMachineCode() bool {
	if r == nil {
		return false
	}
	if len(r.Funcs) == 0 {
		return r.Note == suites.NoCompiledChange
	}
	for _, f := range r.Funcs {
		if f.Code != "same" {
			return false
		}
	}
	return true
}

// noteChangedFunctions is invm.NoteChangedFunctions (judge does not
// import invm).
const noteChangedFunctions = "changed-functions"
