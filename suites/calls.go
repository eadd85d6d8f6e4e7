package suites

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
)

// Did the suite run the code the series changed? The host names the
// functions the series changed (found on the patched kernel's vmlinux,
// vmrunner/report.Changed) in the ParamProbes parameter; the guest puts a
// kprobe event on each as it prepares, on both kernels alike (the same
// probes cost both the same), and every round reads their hits in
// kprobe_profile before and after its workloads. A function that is not
// in the kernel (the base may lack what the series adds), or that kprobes
// refuse (notrace, the kprobe blacklist), is reported with the reason
// instead of a count.

// ParamProbes lists the functions whose calls a round counts, comma
// separated.
const ParamProbes = "probes"

// MaxProbes bounds the functions probed: each costs a trap per call under
// TCG.
const MaxProbes = 32

// NoCompiledChange is the note (Result.Notes["changed-functions"]) of a
// series after which every function of the kernel compiles to the base's
// code (report.CodeChanged): a comment, a rename the compiler does not
// keep, a macro nothing uses. Data is not compared: a changed initial
// value of a variable would not show here.
const NoCompiledChange = "none: every function of the patched kernel compiles to the base kernel's code " +
	"(the series changes no machine code; a variable's initial value is not compared)"

// Calls is how often a function was called during the measured rounds on
// one kernel.
type Calls struct {
	Func  string `json:"func"`
	Count uint64 `json:"count"`
	// Rounds is the number of rounds counted.
	Rounds int `json:"rounds"`
	// Err says why the function could not be counted ("no such function
	// in this kernel", a kprobe refused); Count is then 0.
	Err string `json:"err,omitempty"`
	// Lines are the changed lines whose code is in the function, and
	// Inlined the changed functions inlined into it (the host's
	// knowledge of the patched kernel, invm.NoteChanged).
	Lines   []string `json:"lines,omitempty"`
	Inlined []string `json:"inlined,omitempty"`
	// Code says whether its compiled code differs from the base's
	// (report.Changed.Code).
	Code string `json:"code,omitempty"`
}

const callEventPrefix = "chg_"

// armedCalls are the probes armed in this process, by function.
var armedCalls struct {
	sync.Mutex
	funcs  []string          // in order: event chg_<i> probes funcs[i]
	errs   map[string]string // functions that could not be probed
	params string            // the ParamProbes they were armed for
}

// probeList is the functions a request asks to count, deduplicated, at
// most MaxProbes, each a plain symbol name.
func probeList(params map[string]string) []string {
	var out []string
	seen := map[string]bool{}
	for _, f := range strings.Split(params[ParamProbes], ",") {
		f = strings.TrimSpace(f)
		if f == "" || seen[f] || !symbolName(f) || len(out) == MaxProbes {
			continue
		}
		seen[f] = true
		out = append(out, f)
	}
	return out
}

// symbolName accepts what a kernel symbol looks like: no spaces, no
// tracefs syntax can ride in it.
func symbolName(s string) bool {
	if len(s) > 128 {
		return false
	}
	for _, r := range s {
		if !(r == '_' || r == '.' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9') {
			return false
		}
	}
	return true
}

// ArmCalls puts a kprobe event on each function the request names, once
// per process (again if the list changed).
func ArmCalls(params map[string]string) error {
	armedCalls.Lock()
	defer armedCalls.Unlock()
	return armCallsLocked(params)
}

func armCallsLocked(params map[string]string) error {
	if params[ParamProbes] == armedCalls.params && (armedCalls.funcs != nil || armedCalls.errs != nil) {
		return nil
	}
	disarmCallsLocked()
	funcs := probeList(params)
	if len(funcs) == 0 {
		return nil
	}
	if err := ensureTracefs(); err != nil {
		return err
	}
	armedCalls.params = params[ParamProbes]
	armedCalls.errs = map[string]string{}
	armedCalls.funcs = []string{}
	for _, f := range funcs {
		ev := fmt.Sprintf("%s%d", callEventPrefix, len(armedCalls.funcs))
		if err := tracefsWrite("kprobe_events", fmt.Sprintf("p:%s/%s %s\n", kprobeGroup, ev, f), os.O_APPEND); err != nil {
			armedCalls.errs[f] = probeErr(f, err)
			continue
		}
		if err := tracefsWrite("events/"+kprobeGroup+"/"+ev+"/enable", "1", 0); err != nil {
			tracefsWrite("kprobe_events", fmt.Sprintf("-:%s/%s\n", kprobeGroup, ev), os.O_APPEND)
			armedCalls.errs[f] = probeErr(f, err)
			continue
		}
		armedCalls.funcs = append(armedCalls.funcs, f)
	}
	return nil
}

// probeErr says why f could not be probed, in words a reply can use.
func probeErr(f string, err error) string {
	if _, serr := os.Stat("/proc/kallsyms"); serr == nil {
		if b, rerr := os.ReadFile("/proc/kallsyms"); rerr == nil && !strings.Contains(string(b), " "+f+"\n") {
			return "no such function in this kernel"
		}
	}
	return "kprobes refused it: " + err.Error()
}

// DisarmCalls removes the probes (--local and tests, when done).
func DisarmCalls() {
	armedCalls.Lock()
	defer armedCalls.Unlock()
	disarmCallsLocked()
}

func disarmCallsLocked() {
	for i := range armedCalls.funcs {
		ev := fmt.Sprintf("%s%d", callEventPrefix, i)
		tracefsWrite("events/"+kprobeGroup+"/"+ev+"/enable", "0", 0)
		tracefsWrite("kprobe_events", fmt.Sprintf("-:%s/%s\n", kprobeGroup, ev), os.O_APPEND)
	}
	armedCalls.funcs, armedCalls.errs, armedCalls.params = nil, nil, ""
}

// callCounter reads the armed probes' hits around one round.
type callCounter struct {
	funcs  []string
	errs   map[string]string
	before []uint64
}

// startCalls arms what the request asks for if nothing did, and reads the
// hits so far; nil when the request asks for nothing.
func startCalls(params map[string]string) (*callCounter, error) {
	armedCalls.Lock()
	defer armedCalls.Unlock()
	if err := armCallsLocked(params); err != nil {
		return nil, err
	}
	if armedCalls.funcs == nil && armedCalls.errs == nil {
		return nil, nil
	}
	c := &callCounter{funcs: append([]string(nil), armedCalls.funcs...), errs: armedCalls.errs}
	hits, err := readCallHits(len(c.funcs))
	if err != nil {
		return nil, err
	}
	c.before = hits
	return c, nil
}

// done is the calls counted since start, and the functions that could not
// be counted, sorted by name.
func (c *callCounter) done() ([]Calls, error) {
	hits, err := readCallHits(len(c.funcs))
	if err != nil {
		return nil, err
	}
	var out []Calls
	for i, f := range c.funcs {
		out = append(out, Calls{Func: f, Count: hits[i] - c.before[i], Rounds: 1})
	}
	for f, why := range c.errs {
		out = append(out, Calls{Func: f, Err: why, Rounds: 1})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Func < out[j].Func })
	return out, nil
}

func readCallHits(n int) ([]uint64, error) {
	if n == 0 {
		return nil, nil
	}
	b, err := os.ReadFile(filepath.Join(tracefsDir, "kprobe_profile"))
	if err != nil {
		return nil, fmt.Errorf("reading kprobe_profile: %w", err)
	}
	out := make([]uint64, n)
	for i := range out {
		h, err := parseKprobeHits(string(b), fmt.Sprintf("%s%d", callEventPrefix, i))
		if err != nil {
			return nil, err
		}
		out[i] = h
	}
	return out, nil
}

// AddCalls sums the calls of later rounds into acc, function by function.
func AddCalls(acc, more []Calls) []Calls {
	if len(more) == 0 {
		return acc
	}
	out := append([]Calls(nil), acc...)
	at := map[string]int{}
	for i, c := range out {
		at[c.Func] = i
	}
	for _, c := range more {
		i, ok := at[c.Func]
		if !ok {
			at[c.Func] = len(out)
			out = append(out, c)
			continue
		}
		out[i].Count += c.Count
		out[i].Rounds += c.Rounds
		if out[i].Err == "" {
			out[i].Err = c.Err
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Func < out[j].Func })
	return out
}
