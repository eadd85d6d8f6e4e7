package refcache

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"
	"time"
)

// Violation kinds: each is a state no correct wake-up policy may reach.
const (
	// Deadlock: no thread can run, and some have gets left.
	KindDeadlock = "deadlock"
	// KindLostWakeup: a task sleeps although what it waits for has
	// happened and no wake for it is pending (an entry waiter whose entry
	// is filled; under keyed, a waiter whose block has been published).
	KindLostWakeup = "lost-wakeup"
	// KindStrandedCapacity: a task sleeps for capacity while an entry is
	// unused and no wake for it is pending.
	KindStrandedCapacity = "stranded-capacity"
)

// Observation kinds: states and steps that tell the policies apart, legal
// in themselves.
const (
	// ObsMissedShare: a task asleep for capacity while its block sits in
	// the cache; it will sleep until the next release.
	ObsMissedShare = "missed-share"
	// ObsRequeue: a task woken for capacity finds unused == 0 in
	// wait_event's re-check and sleeps again without rescanning.
	ObsRequeue = "requeue-without-rescan"
	// ObsHerd: one release made two or more tasks runnable.
	ObsHerd = "herd"
	// ObsSpentWake: a task woken for capacity shared an entry instead of
	// using the unused one.
	ObsSpentWake = "spent-capacity-wake"
	// ObsHandoff: the patch's hand-off of an unspent capacity wake.
	ObsHandoff = "handoff"
	// ObsBlockedBehindWakee: the reviewer's concern. Free capacity that
	// sleeping tasks could use is promised only to woken tasks that have
	// not run yet; until they run, the sleepers wait.
	ObsBlockedBehindWakee = "blocked-behind-wakee"
)

// Finding is one violation or observation kind, with how many states (or
// steps) showed it and the shortest trace reaching the first of them.
type Finding struct {
	Kind   string   `json:"kind"`
	What   string   `json:"what"`
	Count  int64    `json:"count"`
	Trace  []string `json:"trace"`
	state  int32
	parent int32 // for step observations: the state the step starts from
	tid    int8
	choice int8
}

// CheckResult is what an exhaustive exploration found.
type CheckResult struct {
	Policy        Policy        `json:"policy"`
	Threads       int           `json:"threads"`
	Entries       int           `json:"entries"`
	Blocks        int           `json:"blocks"`
	GetsPerThread int           `json:"gets_per_thread"`
	States        int64         `json:"states"`
	Transitions   int64         `json:"transitions"`
	Complete      bool          `json:"complete"` // false: stopped at MaxStates
	Elapsed       time.Duration `json:"elapsed_ns"`
	StatesPerSec  float64       `json:"states_per_sec"`
	Violations    []Finding     `json:"violations"`
	Observations  []Finding     `json:"observations"`
}

// Check explores every interleaving of the steps of cfg.Threads threads,
// each making cfg.GetsPerThread gets of any of cfg.Blocks blocks, against a
// cache of cfg.Entries entries under cfg.Policy. It checks every reachable
// state for deadlock, lost wake-ups and stranded capacity, and records the
// states that tell the policies apart. The search is breadth-first, so
// every trace is a shortest one.
func Check(cfg Config) (CheckResult, error) {
	return CheckContext(context.Background(), cfg)
}

// CheckContext is Check that stops when ctx is done, returning what it
// explored so far (Complete false) with ctx's error.
func CheckContext(ctx context.Context, cfg Config) (CheckResult, error) {
	cfg.setDefaults()
	if err := cfg.validate(); err != nil {
		return CheckResult{}, err
	}
	if cfg.Threads > 8 || cfg.Entries > 4 || cfg.Blocks > 8 || cfg.GetsPerThread < 1 || cfg.GetsPerThread > 4 {
		return CheckResult{}, fmt.Errorf("exhaustive check of %d threads × %d gets, %d entries, %d blocks: too large (limits: 8 threads, 4 entries, 8 blocks, 1..4 gets per thread)",
			cfg.Threads, cfg.GetsPerThread, cfg.Entries, cfg.Blocks)
	}
	start := time.Now()
	x := explorer{cfg: cfg, index: map[string]int32{}, found: map[string]*Finding{}}
	err := x.run(ctx)
	r := CheckResult{
		Policy: cfg.Policy, Threads: cfg.Threads, Entries: cfg.Entries, Blocks: cfg.Blocks, GetsPerThread: cfg.GetsPerThread,
		States: int64(len(x.states)), Transitions: x.transitions, Complete: x.complete, Elapsed: time.Since(start),
	}
	if s := r.Elapsed.Seconds(); s > 0 {
		r.StatesPerSec = float64(r.States) / s
	}
	for _, k := range []string{KindDeadlock, KindLostWakeup, KindStrandedCapacity} {
		if f := x.found[k]; f != nil {
			f.Trace = x.trace(f)
			r.Violations = append(r.Violations, *f)
		}
	}
	for _, k := range []string{ObsMissedShare, ObsRequeue, ObsHerd, ObsSpentWake, ObsHandoff, ObsBlockedBehindWakee} {
		if f := x.found[k]; f != nil {
			f.Trace = x.trace(f)
			r.Observations = append(r.Observations, *f)
		}
	}
	if err != nil {
		return r, fmt.Errorf("exploring %s after %d states: %w", cfg.Policy, r.States, err)
	}
	return r, nil
}

// explorer is a breadth-first search over encoded states.
type explorer struct {
	cfg         Config
	index       map[string]int32
	states      []string
	parent      []int32
	via         [][2]int8 // thread and block choice of the step into each state
	transitions int64
	complete    bool
	found       map[string]*Finding
}

func (x *explorer) root() *world {
	w := newWorld(x.cfg.Policy, x.cfg.Threads, x.cfg.Entries, x.cfg.GetsPerThread)
	w.noHandoff = x.cfg.noHandoff
	return w
}

func (x *explorer) add(w *world, parent int32, tid, choice int) (int32, bool) {
	w.canonicalize()
	key := string(w.encode(nil))
	if i, ok := x.index[key]; ok {
		return i, false
	}
	i := int32(len(x.states))
	x.index[key] = i
	x.states = append(x.states, key)
	x.parent = append(x.parent, parent)
	x.via = append(x.via, [2]int8{int8(tid), int8(choice)})
	return i, true
}

func (x *explorer) run(ctx context.Context) error {
	w := x.root()
	x.add(w, -1, -1, -1)
	x.inspect(w, 0)
	x.complete = true
	for head := 0; head < len(x.states); head++ {
		if len(x.states) >= x.cfg.MaxStates {
			x.complete = false
			return nil
		}
		if head%4096 == 0 && ctx.Err() != nil {
			x.complete = false
			return ctx.Err()
		}
		for t := 0; t < x.cfg.Threads; t++ {
			w.decode(x.states[head], x.cfg)
			if !w.enabled(t) {
				continue
			}
			choices := 1
			if w.th[t].pc == pcIdle {
				choices = x.cfg.Blocks
			}
			for b := 0; b < choices; b++ {
				if b > 0 {
					w.decode(x.states[head], x.cfg)
				}
				w.n = counters{}
				pc := w.th[t].pc
				w.step(t, b)
				x.transitions++
				issues := w.stepIssues(pc, t)
				child, fresh := x.add(w, int32(head), t, b)
				for _, is := range issues {
					x.note(is.kind, is.what, child, int32(head), t, b)
				}
				if fresh {
					x.inspect(w, child)
				}
			}
		}
	}
	return nil
}

func (x *explorer) note(kind, what string, state, parent int32, tid, choice int) {
	f := x.found[kind]
	if f == nil {
		f = &Finding{Kind: kind, What: what, state: state, parent: parent, tid: int8(tid), choice: int8(choice)}
		x.found[kind] = f
	}
	f.Count++
}

// stepIssues are the observations that are steps rather than states: what
// thread t's step from pc from just did, judged from the step's counters.
func (w *world) stepIssues(from pc, t int) []issue {
	var out []issue
	n := w.n
	switch {
	case n.requeues > 0:
		out = append(out, issue{ObsRequeue, fmt.Sprintf("%s, woken for capacity, re-checks cache->unused in wait_event, finds 0 and sleeps again without rescanning the cache", w.tn(t))})
	case n.spentCapacityWakes > 0:
		out = append(out, issue{ObsSpentWake, fmt.Sprintf("%s, woken for capacity, finds its block cached and shares it, leaving the unused entry to others", w.tn(t))})
	}
	if n.handoffs > 0 {
		out = append(out, issue{ObsHandoff, fmt.Sprintf("%s passes its capacity wake on to the next waiter", w.tn(t))})
	}
	if from == pcPutWake && n.cacheWakeups >= 2 {
		out = append(out, issue{ObsHerd, fmt.Sprintf("one squashfs_cache_put by %s made %d tasks runnable for one unused entry", w.tn(t), n.cacheWakeups)})
	}
	return out
}

// inspect checks one new state for violations and observations.
func (x *explorer) inspect(w *world, s int32) {
	for _, f := range w.check() {
		x.note(f.kind, f.what, s, -1, -1, -1)
	}
}

type issue struct{ kind, what string }

// check evaluates the invariants on one state.
func (w *world) check() []issue {
	var out []issue
	c := &w.c
	anyEnabled, allDone := false, true
	var capSleepers []int
	pendingPut, pendingHandoff, inFlight := 0, 0, 0
	var inFlightIDs []int
	for t := range w.th {
		th := &w.th[t]
		if w.enabled(t) {
			anyEnabled = true
		}
		if th.pc != pcDone {
			allDone = false
		}
		switch {
		case th.pc == pcPutWake:
			pendingPut++
		case th.pc == pcHandoff:
			pendingHandoff++
		}
		if th.capWoken {
			inFlight++
			inFlightIDs = append(inFlightIDs, t)
		}
		if w.asleep(t) && (th.pc == pcCacheSleep || th.pc == pcKeyedSleep) {
			capSleepers = append(capSleepers, t)
		}
	}
	// A keyed sleeper whose block wake is pending will share, not take
	// capacity: it needs no capacity wake.
	var needCap []int
	for _, t := range capSleepers {
		b := w.th[t].block
		if !w.pendingStep(pcWakeBlock, func(u *thread) bool { return u.block == b }) {
			needCap = append(needCap, t)
		}
	}
	if !anyEnabled && !allDone {
		out = append(out, issue{KindDeadlock, "no task can run: " + w.sleepers()})
	}

	// Entry waiters: woken by wake_up_all after the fill.
	for t := range w.th {
		th := &w.th[t]
		if !w.asleep(t) || th.pc != pcEntrySleep || c.entries[th.entry].pending {
			continue
		}
		if !w.pendingStep(pcWakeEntry, func(u *thread) bool { return u.entry == th.entry }) {
			out = append(out, issue{KindLostWakeup, fmt.Sprintf("%s sleeps on entry %d's wait_queue, the entry is filled, and no wake_up_all is pending", w.tn(t), th.entry)})
		}
	}

	// Capacity waiters whose block is cached.
	for _, t := range capSleepers {
		th := &w.th[t]
		if w.cached(th.block) < 0 || w.pendingStep(pcWakeBlock, func(u *thread) bool { return u.block == th.block }) {
			continue
		}
		what := fmt.Sprintf("%s sleeps for capacity while its blk %d is in entry %d", w.tn(t), th.block, w.cached(th.block))
		if w.policy == Keyed {
			out = append(out, issue{KindLostWakeup, what + ", and no block wake for it is pending"})
		}
		out = append(out, issue{ObsMissedShare, what})
	}

	// Capacity: a sleeper for each unused entry needs a wake pending.
	if len(needCap) > 0 && c.unused > 0 {
		need := min(len(needCap), c.unused)
		var have int
		if w.policy == WakeAll {
			if pendingPut > 0 {
				have = need // one wake_up wakes them all
			}
		} else {
			have = pendingPut + pendingHandoff + inFlight
		}
		if have < need {
			out = append(out, issue{KindStrandedCapacity, fmt.Sprintf("%s asleep for capacity, cache->unused=%d, and %d capacity wake(s) pending", w.ids(needCap), c.unused, have)})
		} else if w.policy != WakeAll && pendingPut+pendingHandoff < need && inFlight > 0 {
			out = append(out, issue{ObsBlockedBehindWakee, fmt.Sprintf("%s asleep for capacity, cache->unused=%d, and the only capacity wake is held by %s, woken but not yet run", w.ids(needCap), c.unused, w.ids(inFlightIDs))})
		}
	}
	return out
}

// pendingStep reports whether some thread is about to take step p with a
// matching argument.
func (w *world) pendingStep(p pc, match func(*thread) bool) bool {
	for u := range w.th {
		if w.th[u].pc == p && match(&w.th[u]) {
			return true
		}
	}
	return false
}

// cached returns the entry holding block, or -1.
func (w *world) cached(block int) int {
	for i := range w.c.entries {
		if w.c.entries[i].block == block {
			return i
		}
	}
	return -1
}

func (w *world) sleepers() string {
	var s []string
	for t := range w.th {
		th := &w.th[t]
		switch {
		case th.pc == pcDone:
			s = append(s, fmt.Sprintf("%s done", w.tn(t)))
		case w.asleep(t) && th.pc == pcEntrySleep:
			s = append(s, fmt.Sprintf("%s asleep on entry %d", w.tn(t), th.entry))
		case w.asleep(t):
			s = append(s, fmt.Sprintf("%s asleep for capacity (blk %d)", w.tn(t), th.block))
		}
	}
	return strings.Join(s, ", ")
}

// trace replays the steps from the initial state to f's state, describing
// each step and the cache after it.
func (x *explorer) trace(f *Finding) []string {
	end := f.state
	if f.parent >= 0 {
		end = f.parent // then the step itself, below
	}
	var path []int32
	for s := end; s > 0; s = x.parent[s] {
		path = append(path, s)
	}
	w := x.root()
	w.names = make([]int, len(w.th))
	for t := range w.names {
		w.names[t] = t
	}
	var lines []string
	lines = append(lines, "start: "+w.describe())
	step := func(t, b int) []issue {
		w.log = &lines
		w.n = counters{}
		from := w.th[t].pc
		w.step(t, b)
		w.log = nil
		lines = append(lines, "        "+w.describe())
		is := w.stepIssues(from, t)
		w.canonicalize() // the stored steps name threads in canonical order
		return is
	}
	for i := len(path) - 1; i >= 0; i-- {
		v := x.via[path[i]]
		step(int(v[0]), int(v[1]))
	}
	is := w.check()
	if f.parent >= 0 {
		is = step(int(f.tid), int(f.choice))
	}
	// Say it again with the trace's thread names.
	for _, i := range is {
		if i.kind == f.Kind {
			f.What = i.what
			break
		}
	}
	lines = append(lines, "=> "+f.What)
	return lines
}

// describe is a one-line picture of the cache and of who sleeps where.
func (w *world) describe() string {
	c := &w.c
	var b strings.Builder
	fmt.Fprintf(&b, "unused=%d num_waiters=%d next_blk=%d [", c.unused, c.numWaiters, c.nextBlk)
	for i := range c.entries {
		e := &c.entries[i]
		if i > 0 {
			b.WriteString(" ")
		}
		if e.block < 0 {
			fmt.Fprintf(&b, "e%d:empty", i)
			continue
		}
		fmt.Fprintf(&b, "e%d:blk%d ref%d", i, e.block, e.refcount)
		if e.pending {
			b.WriteString(" pending")
		}
		if len(e.waitq) > 0 {
			fmt.Fprintf(&b, " wq=%s", w.ids(e.waitq))
		}
	}
	b.WriteString("]")
	if len(c.waitq) > 0 {
		fmt.Fprintf(&b, " cache_wq=%s", w.ids(c.waitq))
	}
	var asleep []int
	for t := range w.th {
		if w.asleep(t) {
			asleep = append(asleep, t)
		}
	}
	slices.SortFunc(asleep, func(a, b int) int { return cmp.Compare(w.name(a), w.name(b)) })
	if len(asleep) > 0 {
		fmt.Fprintf(&b, " asleep=%s", w.ids(asleep))
	}
	return b.String()
}

func bit(b bool) byte {
	if b {
		return 1
	}
	return 0
}

// encode appends the explored state (everything that decides the future,
// no statistics) to buf.
func (w *world) encode(buf []byte) []byte {
	c := &w.c
	buf = append(buf, byte(c.currBlk), byte(c.nextBlk), byte(c.unused), byte(c.numWaiters), byte(len(c.waitq)))
	for _, t := range c.waitq {
		buf = append(buf, byte(t))
	}
	for i := range c.entries {
		e := &c.entries[i]
		buf = append(buf, byte(e.block+1), byte(e.refcount), bit(e.pending), byte(e.numWaiters), byte(len(e.waitq)))
		for _, t := range e.waitq {
			buf = append(buf, byte(t))
		}
	}
	for i := range w.th {
		th := &w.th[i]
		flags := bit(th.sleeping) | bit(th.capWoken)<<1 | bit(th.capacityWake)<<2 | bit(th.pending)<<3
		buf = append(buf, byte(th.pc), byte(th.block+1), byte(th.entry+1), flags, byte(th.gets))
	}
	return buf
}

// decode is the inverse of encode, reusing w's slices.
func (w *world) decode(s string, cfg Config) {
	if len(w.th) != cfg.Threads || len(w.c.entries) != cfg.Entries {
		*w = *newWorld(cfg.Policy, cfg.Threads, cfg.Entries, cfg.GetsPerThread)
		w.noHandoff = cfg.noHandoff
	}
	w.n = counters{}
	w.woken = w.woken[:0]
	i := 0
	next := func() int { v := int(s[i]); i++; return v }
	c := &w.c
	c.currBlk, c.nextBlk, c.unused, c.numWaiters = next(), next(), next(), next()
	for t := range w.th {
		w.th[t].queued = false
	}
	// A wait queue is its length, then its threads, each marked queued.
	queue := func(q []int) []int {
		q = q[:0]
		for n := next(); n > 0; n-- {
			t := next()
			q = append(q, t)
			w.th[t].queued = true
		}
		return q
	}
	c.waitq = queue(c.waitq)
	for k := range c.entries {
		e := &c.entries[k]
		e.block, e.refcount, e.pending, e.numWaiters = next()-1, next(), next() == 1, next()
		e.waitq = queue(e.waitq)
	}
	for t := range w.th {
		th := &w.th[t]
		th.pc, th.block, th.entry = pc(next()), next()-1, next()-1
		f := next()
		th.sleeping, th.capWoken, th.capacityWake, th.pending = f&1 != 0, f&2 != 0, f&4 != 0, f&8 != 0
		th.gets = next()
		th.woke = false
	}
}

// canonicalize renumbers the threads into a canonical order, so that states
// that differ only in which thread is which are explored once. Threads are
// interchangeable: same code, and in Check each chooses any block. The
// order sorts threads by their own state and their place in the wait
// queues; two threads that tie are in the same state and on no queue, so
// either order gives the same encoding.
func (w *world) canonicalize() {
	n := len(w.th)
	var sig [8][8]byte
	for t := range w.th {
		th := &w.th[t]
		flags := bit(th.sleeping) | bit(th.capWoken)<<1 | bit(th.capacityWake)<<2 | bit(th.pending)<<3
		sig[t] = [8]byte{byte(th.pc), byte(th.block + 1), byte(th.entry + 1), flags, byte(th.gets), 255, 255}
	}
	for i, t := range w.c.waitq {
		sig[t][5] = byte(i)
	}
	for k := range w.c.entries {
		for i, t := range w.c.entries[k].waitq {
			sig[t][6] = byte(i)
		}
	}
	var perm [8]int // perm[new] = old
	for i := range n {
		perm[i] = i
	}
	// Insertion sort: at most 8 threads.
	for i := 1; i < n; i++ {
		for j := i; j > 0 && string(sig[perm[j]][:]) < string(sig[perm[j-1]][:]); j-- {
			perm[j], perm[j-1] = perm[j-1], perm[j]
		}
	}
	identity := true
	for i := range n {
		if perm[i] != i {
			identity = false
			break
		}
	}
	if identity {
		return
	}
	var inv [8]int // inv[old] = new
	for i := range n {
		inv[perm[i]] = i
	}
	old := make([]thread, n)
	copy(old, w.th)
	for i := range n {
		w.th[i] = old[perm[i]]
	}
	if w.names != nil {
		names := append([]int(nil), w.names...)
		for i := range n {
			w.names[i] = names[perm[i]]
		}
	}
	for i, t := range w.c.waitq {
		w.c.waitq[i] = inv[t]
	}
	for k := range w.c.entries {
		q := w.c.entries[k].waitq
		for i, t := range q {
			q[i] = inv[t]
		}
	}
}
