package report

import (
	"bytes"
	"regexp"
	"strconv"
	"strings"

	"github.com/patchbot/patchbot/internal/inert"
)

// What a Reader keeps, whatever the console holds: the lines of one
// report, and the distinct warnings (by title) whose first report is kept;
// later ones are counted.
const (
	MaxLines    = 120
	MaxWarnings = 20
	// maxCut is how many lines after a "cut here" marker are kept for the
	// report that follows (a WARN()'s message).
	maxCut = 8
	// afterTrace is how many lines an oops, BUG or WARNING may print after
	// its call trace before its end marker ("Modules linked in:", the
	// marker itself); past them the report is closed without it.
	afterTrace = 12
)

// Warning is a warning title and how often the console showed it; a
// transient report that passed (Kind.Transient) is counted as one too.
type Warning struct {
	// Report is the first report with the title.
	Report *Report `json:"report"`
	Count  int     `json:"count"`
}

// Reader reads a console line by line, once, and keeps the first fatal
// report and the warnings. It holds no more than MaxLines of a report and
// MaxWarnings distinct warnings, so a console that floods costs bounded
// memory; each line costs a few substring checks unless it belongs to a
// report. Not safe for concurrent use.
type Reader struct {
	open  *Report
	fatal *Report
	// pending is a transient report (Kind.Transient) that waits for a
	// later one to confirm it (TransientWindow).
	pending *Report
	warns   []*Warning
	byName  map[string]*Warning
	// moreWarnings counts warnings whose titles came after MaxWarnings
	// others.
	moreWarnings int
	cut          []string // lines since a "cut here" marker, quoted
	inCut        bool
	after        int // lines of the open report after its trace ended
	// all keeps every report as it closes, in closed (Parse).
	all    bool
	closed []*Report
}

var (
	timeRe = regexp.MustCompile(`^\[ *([0-9]+\.[0-9]+)\] ?`)
	// die() and its kin: "invalid opcode: 0000 [#1] SMP", "Oops: 0002
	// [#1] SMP PTI", "general protection fault, probably for
	// non-canonical address 0xdead000000000100: 0000 [#1] SMP".
	dieRe   = regexp.MustCompile(`(?:^|\] )([A-Za-z][^\[]*?): [0-9a-f]{4} \[#[0-9]+\]`)
	frameRe = regexp.MustCompile(`^ *(\? )?([A-Za-z0-9_.$]+)\+0x([0-9a-f]+)/0x([0-9a-f]+)(?: \[([A-Za-z0-9_-]+)\])?\s*$`)
	ripRe   = regexp.MustCompile(`^RIP: [0-9a-f]{4}:([A-Za-z0-9_.$]+)\+0x([0-9a-f]+)/0x([0-9a-f]+)(?: \[([A-Za-z0-9_-]+)\])?`)
	warnRe  = regexp.MustCompile(` at (\S+:[0-9]+) ([A-Za-z0-9_.$]+)\+0x`)
	bugAtRe = regexp.MustCompile(`kernel BUG at (\S+:[0-9]+)!`)
	ctxRe   = regexp.MustCompile(`^ *<(/?)(TASK|IRQ|SOFTIRQ|NMI|EOI|#[A-Z]+)>\s*$`)
)

var cutHere = []byte("------------[ cut here ]------------")

// header is a line that begins a report: its kind, the header text (from
// the sign on), and whether it goes on a report of the kinds in cont
// that is already open (the "Oops:" after "BUG: kernel NULL pointer
// dereference", the "invalid opcode:" after "kernel BUG at").
func header(line string) (Kind, string, bool) {
	if i := strings.Index(line, "Kernel panic - not syncing"); i >= 0 {
		return KindPanic, line[i:], true
	}
	if i := strings.Index(line, "BUG: soft lockup"); i >= 0 {
		return KindSoftLockup, line[i:], false
	}
	if i := strings.Index(line, "Watchdog detected hard LOCKUP"); i >= 0 {
		return KindHardLockup, line[i:], false
	}
	if i := strings.Index(line, "INFO: task "); i >= 0 && strings.Contains(line[i:], " blocked for more than ") {
		return KindHungTask, line[i:], false
	}
	if i := strings.Index(line, "INFO: rcu"); i >= 0 && strings.Contains(line[i:], " stall") {
		// "rcu_sched detected stalls on CPUs/tasks", "... self-detected
		// stall on CPU", "... detected expedited stalls on CPUs/tasks"
		return KindRCUStall, line[i:], false
	}
	if i := strings.Index(line, "kernel BUG at "); i >= 0 {
		return KindBUG, line[i:], false
	}
	if i := strings.Index(line, "WARNING: CPU: "); i >= 0 {
		return KindWarning, line[i:], false
	}
	if i := strings.Index(line, "BUG: "); i >= 0 {
		return KindOops, line[i:], false
	}
	if strings.Contains(line, " [#") {
		if m := dieRe.FindStringSubmatchIndex(line); m != nil {
			return KindOops, line[m[2]:], true
		}
	}
	return "", "", false
}

// quick says whether a line may hold a header: the bytes every header
// has one of.
func quick(b []byte) bool {
	return bytes.Contains(b, []byte("BUG")) || bytes.Contains(b, []byte("WARNING: CPU: ")) ||
		bytes.Contains(b, []byte("INFO: ")) || bytes.Contains(b, []byte(" [#")) ||
		bytes.Contains(b, []byte("Kernel panic")) || bytes.Contains(b, []byte("LOCKUP"))
}

// Line reads the console's next line, without its newline. A long line
// may come cut (its start and end around a note); the report quotes it so.
func (r *Reader) Line(b []byte) {
	b = bytes.TrimRight(b, "\r")
	if r.open == nil && !r.inCut && !quick(b) && !bytes.Contains(b, cutHere) {
		return
	}
	raw := string(b)
	quoted := inert.String(raw)
	text, ts := raw, -1.0
	if m := timeRe.FindStringSubmatch(raw); m != nil {
		ts, _ = strconv.ParseFloat(m[1], 64)
		text = raw[len(m[0]):]
	}
	if strings.Contains(text, string(cutHere)) {
		r.close("")
		r.cut, r.inCut = []string{quoted}, true
		return
	}
	kind, head, cont := header(text)
	if kind != "" {
		if r.continues(kind, cont) {
			o := r.open
			if kind == KindPanic && o.Message == "" {
				o.Message = panicMessage(head)
			}
			r.add(b, quoted, text)
			if kind == KindPanic {
				r.close("") // the kernel stops here
			}
			return
		}
		if kind == KindPanic && r.fatal != nil {
			// The panic that follows an oops, after its end marker:
			// the oops is the report.
			r.close("")
			return
		}
		r.close("")
		r.start(kind, head, ts, quoted)
		return
	}
	if r.open == nil {
		if r.inCut {
			if len(r.cut) < maxCut {
				r.cut = append(r.cut, quoted)
			} else {
				r.cut, r.inCut = nil, false
			}
		}
		return
	}
	r.add(b, quoted, text)
}

// fatalize takes a new report that may be the first fatal one: a
// transient report waits (pending) for a later one within
// TransientWindow, which makes the pending one fatal, its cause.
func (r *Reader) fatalize(rep *Report, quoted string) {
	if r.fatal != nil || !rep.Kind.Fatal() {
		return
	}
	if p := r.pending; p != nil {
		if rep.Time < 0 || p.Time < 0 || rep.Time-p.Time <= TransientWindow {
			p.Again = quoted
			r.fatal, r.pending = p, nil
			r.uncount(p)
			return
		}
		r.pending = nil // it passed: it stays counted with the warnings
	}
	if rep.Kind.Transient() {
		r.pending = rep
		return
	}
	r.fatal = rep
}

// continues says whether a header of kind goes on the open report.
func (r *Reader) continues(kind Kind, cont bool) bool {
	o := r.open
	if o == nil || !cont {
		return false
	}
	if kind == KindPanic {
		// The panic an oops, a lockup or a hung task caused; a panic
		// after a warning (panic_on_warn) is a report of its own.
		return o.Kind.Fatal()
	}
	// die()'s line after "kernel BUG at" or "BUG: unable to handle ...",
	// before any trace.
	return (o.Kind == KindBUG || o.Kind == KindOops) && len(o.Frames) == 0 && o.trace == 0
}

func (r *Reader) start(kind Kind, head string, ts float64, quoted string) {
	rep := &Report{Kind: kind, Header: head, Time: ts, Guilty: -1}
	if r.inCut {
		rep.Lines = append(rep.Lines, r.cut...)
		if kind == KindWarning && len(r.cut) > 1 {
			var msg []string
			for _, l := range r.cut[1:] {
				if m := timeRe.FindStringIndex(l); m != nil {
					l = l[m[1]:]
				}
				msg = append(msg, strings.TrimSpace(l))
			}
			rep.Message = strings.Join(msg, " ")
		}
	}
	r.cut, r.inCut = nil, false
	rep.Lines = append(rep.Lines, quoted)
	switch kind {
	case KindBUG:
		if m := bugAtRe.FindStringSubmatch(head); m != nil {
			rep.Location = m[1]
		}
	case KindWarning:
		if m := warnRe.FindStringSubmatch(head); m != nil {
			rep.Location = m[1]
		}
	case KindPanic:
		rep.Message = panicMessage(head)
		rep.Corrupted = ""
	}
	r.open, r.after = rep, 0
	r.fatalize(rep, quoted)
	if kind == KindPanic {
		// A panic prints its trace after it (dump_stack) or nothing.
		rep.trace = 0
	}
}

func panicMessage(head string) string {
	msg := strings.TrimPrefix(head, "Kernel panic - not syncing")
	return strings.TrimSpace(strings.TrimPrefix(msg, ":"))
}

// add takes a line of the open report: raw as read, quoted as kept, text
// without its time stamp.
func (r *Reader) add(raw []byte, quoted, text string) {
	o := r.open
	if len(o.Lines) >= MaxLines {
		r.close("cut at " + strconv.Itoa(MaxLines) + " lines")
		return
	}
	o.Lines = append(o.Lines, quoted)
	trimmed := strings.TrimSpace(text)
	switch {
	case strings.HasPrefix(trimmed, "---[ end trace") || strings.HasPrefix(trimmed, "---[ end Kernel panic"):
		r.close("")
		return
	case strings.HasPrefix(text, "RIP: "):
		if len(o.Frames) == 0 && o.trace == 0 {
			if m := ripRe.FindStringSubmatch(text); m != nil {
				o.Frames = append(o.Frames, frameOf(m[1], m[2], m[3], m[4], false, "RIP"))
			}
		}
		return
	case trimmed == "Call Trace:":
		if o.trace == 0 {
			o.trace, o.ctx = 1, ""
		}
		return
	}
	if o.trace == 1 {
		if m := ctxRe.FindStringSubmatch(text); m != nil {
			if m[1] == "/" {
				o.ctx = ""
			} else {
				o.ctx = m[2]
			}
			return
		}
		if m := frameRe.FindStringSubmatch(text); m != nil {
			o.Frames = append(o.Frames, frameOf(m[2], m[3], m[4], m[5], m[1] != "", o.ctx))
			return
		}
		if trimmed == "" {
			return
		}
		// The trace has ended.
		o.trace = 2
		switch o.Kind {
		case KindSoftLockup, KindHardLockup, KindHungTask, KindRCUStall, KindPanic:
			// No end marker follows these: the line is the next
			// message's.
			o.Lines = o.Lines[:len(o.Lines)-1]
			r.close("")
			r.Line(raw)
			return
		}
	}
	if o.trace == 2 {
		r.after++
		if r.after > afterTrace {
			r.close("no end marker after its trace")
		}
	}
}

func frameOf(fn, off, size, mod string, unreliable bool, ctx string) Frame {
	o, _ := strconv.ParseUint(off, 16, 64)
	s, _ := strconv.ParseUint(size, 16, 64)
	return Frame{Func: fn, Offset: o, Size: s, Module: mod, Unreliable: unreliable, Context: ctx}
}

// close ends the open report; corrupted, if not "", says why it is not
// whole.
func (r *Reader) close(corrupted string) {
	o := r.open
	if o == nil {
		return
	}
	r.open = nil
	o.complete = true
	if corrupted != "" && o.Corrupted == "" {
		o.Corrupted = corrupted
	}
	o.finish()
	if r.all {
		r.closed = append(r.closed, o)
	}
	if o.Kind == KindWarning || o.Kind.Transient() && o != r.fatal {
		r.count(o)
	}
}

// count adds a closed warning to the tally.
func (r *Reader) count(o *Report) {
	if w := r.byName[o.Title]; w != nil {
		w.Count++
		return
	}
	if len(r.warns) >= MaxWarnings {
		r.moreWarnings++
		return
	}
	if r.byName == nil {
		r.byName = map[string]*Warning{}
	}
	w := &Warning{Report: o, Count: 1}
	r.warns = append(r.warns, w)
	r.byName[o.Title] = w
}

// uncount takes a transient report that turned out fatal out of the
// warnings it was counted with when it closed.
func (r *Reader) uncount(o *Report) {
	w := r.byName[o.Title]
	if w == nil || !o.complete {
		return
	}
	if w.Count--; w.Count > 0 {
		return
	}
	delete(r.byName, o.Title)
	for i := range r.warns {
		if r.warns[i] == w {
			r.warns = append(r.warns[:i], r.warns[i+1:]...)
			break
		}
	}
}

// End says that the console has ended (the VM stopped) or gone quiet: the
// open report, if any, is closed as it stands; a transient report still
// pending is fatal then (the VM stopped, or nothing answered since).
func (r *Reader) End() {
	defer func() {
		if r.fatal == nil && r.pending != nil {
			r.fatal, r.pending = r.pending, nil
			r.uncount(r.fatal)
		}
	}()
	if r.open != nil && r.open.Kind != KindPanic && len(r.open.Frames) == 0 {
		r.close("the console ended before its trace")
		return
	}
	r.close("")
}

// Fatal is a copy of the first fatal report, whole or still growing
// (Report.Complete), or nil.
func (r *Reader) Fatal() *Report {
	if r.fatal == nil {
		return nil
	}
	r.fatal.finish()
	return r.fatal.clone()
}

// Warnings are copies of the warnings seen so far, each with its count,
// in the order they first came; more is the number of warnings whose
// titles came after MaxWarnings others.
func (r *Reader) Warnings() (ws []Warning, more int) {
	for _, w := range r.warns {
		ws = append(ws, Warning{Report: w.Report.clone(), Count: w.Count})
	}
	return ws, r.moreWarnings
}

// AddWarnings adds the warnings of a later console (later, laterMore) to
// those of an earlier one, as one console's would count them: a title seen
// in both counts both, keeping the first report; titles past MaxWarnings
// count in more.
func AddWarnings(ws []Warning, more int, later []Warning, laterMore int) ([]Warning, int) {
	out := append([]Warning(nil), ws...)
	more += laterMore
next:
	for _, w := range later {
		for i := range out {
			if out[i].Report.Title == w.Report.Title {
				out[i].Count += w.Count
				continue next
			}
		}
		if len(out) >= MaxWarnings {
			more += w.Count
			continue
		}
		out = append(out, w)
	}
	return out, more
}

func (r *Report) clone() *Report {
	c := *r
	c.Lines = append([]string(nil), r.Lines...)
	c.Frames = append([]Frame(nil), r.Frames...)
	for i := range c.Frames {
		c.Frames[i].Inlined = append([]Inline(nil), r.Frames[i].Inlined...)
	}
	return &c
}

// Parse reads a whole console and returns its reports in the order they
// began: every fatal one and every warning (each once, not counted), for
// tests and for a console read after the fact.
func Parse(console []byte) []*Report {
	r := Reader{all: true}
	for _, line := range bytes.Split(console, []byte("\n")) {
		r.Line(line)
	}
	r.End()
	return r.closed
}

// finish sets the title and the guilty frame from what the report holds.
func (r *Report) finish() {
	r.Guilty = guilty(r)
	fn := ""
	if f := r.GuiltyFrame(); f != nil {
		fn = baseName(f.Func) // "slob_alloc" of "slob_alloc.isra.0": the same bug
	}
	if r.Kind == KindWarning {
		if m := warnRe.FindStringSubmatch(r.Header); m != nil && !skip(m[2]) {
			fn = m[2]
		}
	}
	in := ""
	if fn != "" {
		in = " in " + fn
	}
	switch r.Kind {
	case KindBUG:
		r.Title = "kernel BUG" + in
		if fn == "" && r.Location != "" {
			r.Title = "kernel BUG at " + r.Location
		}
	case KindWarning:
		r.Title = "WARNING" + in
		if fn == "" && r.Location != "" {
			r.Title = "WARNING at " + r.Location
		}
	case KindSoftLockup:
		r.Title = "BUG: soft lockup" + in
	case KindHardLockup:
		r.Title = "hard lockup" + in
	case KindHungTask:
		r.Title = "INFO: task hung" + in
	case KindRCUStall:
		r.Title = "INFO: rcu detected stall" + in
	case KindPanic:
		msg := r.Message
		if len(msg) > 100 {
			msg = msg[:100] + "..."
		}
		r.Title = "kernel panic: " + msg
	case KindOops:
		r.Title = oopsName(r.Header) + in
	}
}

// oopsName is an oops's name from its header: "BUG: kernel NULL pointer
// dereference", "general protection fault", "invalid opcode", "BUG:
// scheduling while atomic".
func oopsName(head string) string {
	if strings.HasPrefix(head, "BUG: ") {
		rest := head[len("BUG: "):]
		if i := strings.IndexAny(rest, ":,"); i >= 0 {
			rest = rest[:i]
		}
		rest = strings.TrimSuffix(strings.TrimSpace(rest), " for address")
		return "BUG: " + rest
	}
	name := head
	if m := dieRe.FindStringSubmatch(head); m != nil {
		name = m[1]
	}
	if i := strings.Index(name, ","); i >= 0 {
		name = name[:i] // "general protection fault, probably for ..."
	}
	if name == "Oops" {
		return "Oops"
	}
	return strings.TrimSpace(name)
}

// FatalKind is the kind of the first fatal report, "" before one.
func (r *Reader) FatalKind() Kind {
	if r.fatal == nil {
		return ""
	}
	return r.fatal.Kind
}
