package refcache

// Over 600 lines on purpose: the state machine's steps read and write one
// another's state (the entries, the waiters, the wait queue), and the
// proofs of the checker are about all of them at once; split, one
// algorithm would be read in pieces.

import (
	"fmt"
	"strings"
)

// This file is the cache itself: fs/squashfs/cache.c of Linux 6.1
// (squashfs_cache_get and squashfs_cache_put) as a state machine, one
// atomic step at a time, with the wake-up policy as a value. Simulate and
// Check drive the same steps, so what the exploration proves is about the
// code the simulation measures.
//
// Granularity: a section under cache->lock is one step (the lock makes it
// atomic against every other section; the lockless readers, wait_event's
// condition checks, read fields that a section writes at most once). A
// wait-queue operation (prepare_to_wait*, __wake_up, finish_wait) is one
// step, as it is atomic under the wait-queue head's lock. Everything else a
// thread does between two such steps touches only its own state.

// pc is where a thread is in squashfs_cache_get/put: each value names the
// next atomic step the thread will take.
type pc uint8

const (
	pcIdle         pc = iota // next: squashfs_cache_get(): spin_lock, scan
	pcRelock                 // wait_event returned: spin_lock, num_waiters--, rescan
	pcCacheCheck0            // wait_event(cache->wait_queue, cache->unused): first check
	pcCachePrepare           // prepare_to_wait_event(cache->wait_queue)
	pcCacheCheck             // condition check after prepare
	pcCacheSleep             // schedule(); when woken: prepare_to_wait_event again
	pcKeyedSleep             // keyed: schedule(); when woken: finish_wait, spin_lock, num_waiters--, rescan
	pcWakeBlock              // keyed: __wake_up(cache->wait_queue, ..., &block) after allocating
	pcFill                   // squashfs_read_data running; next: spin_lock, pending = 0
	pcWakeEntry              // wake_up_all(&entry->wait_queue)
	pcHandoff                // keyed: wake_up(&cache->wait_queue) to pass an unspent capacity wake on
	pcEntryCheck0            // wait_event(entry->wait_queue, !entry->pending): first check
	pcEntryPrepare           // prepare_to_wait_event(entry->wait_queue)
	pcEntryCheck             // condition check after prepare
	pcEntrySleep             // schedule(); when woken: prepare_to_wait_event again
	pcHold                   // get returned, the caller uses the entry; next: squashfs_cache_put
	pcPutWake                // put: wake_up(&cache->wait_queue)
	pcDone                   // no more gets
)

// entry is struct squashfs_cache_entry, less the data.
type entry struct {
	block      int // -1 is SQUASHFS_INVALID_BLK
	refcount   int
	pending    bool
	numWaiters int
	waitq      []int // entry->wait_queue: thread ids, head first
}

// cache is struct squashfs_cache.
type cache struct {
	entries    []entry
	currBlk    int
	nextBlk    int
	unused     int
	numWaiters int
	waitq      []int // cache->wait_queue: thread ids, head first
}

// thread is one task calling squashfs_cache_get/put in a loop.
type thread struct {
	pc       pc
	block    int  // block of the current get
	entry    int  // entry index it fills, waits on or holds; -1 none
	sleeping bool // task state is TASK_UNINTERRUPTIBLE (set by prepare_to_wait*)
	queued   bool // on a wait queue (derived from the queues; kept for speed)
	pending  bool // local "pending" of the share path
	// capacityWake is the patch's wait.capacity_wake (keyed only).
	capacityWake bool
	// capWoken is model bookkeeping: the thread was made runnable by a
	// capacity wake and has neither taken a reference nor gone back to
	// sleep. Such a thread stands for the wake it received.
	capWoken bool
	gets     int // gets left (Check; Simulate stops threads itself)

	// woke is statistics only (not part of the explored state): woken and
	// not yet made progress, so sleeping again makes the wake spurious.
	woke bool
}

// counters are statistics the steps keep; Check ignores them.
type counters struct {
	gets, releases, freeingReleases, releaseWakeCalls int64
	cacheWakeups, publishWakeups, entryWakeups        int64
	spurious, handoffs, spentCapacityWakes            int64
	requeues                                          int64 // wake-all/exclusive: back to sleep in wait_event without rescanning
}

// world is the whole system: the cache and the threads using it.
type world struct {
	policy Policy
	c      cache
	th     []thread
	n      counters
	woken  []int     // threads the last step made runnable
	log    *[]string // when set, steps describe themselves (for traces)
	// names are the threads' names in traces: Check relabels threads to
	// a canonical order, and names keeps each thread's own name through it.
	names []int
	// noHandoff removes the patch's hand-off (tests show it is needed).
	noHandoff bool
}

func newWorld(p Policy, threads, entries, getsPerThread int) *world {
	w := &world{policy: p, th: make([]thread, threads)}
	w.c.entries = make([]entry, entries)
	for i := range w.c.entries {
		w.c.entries[i].block = -1
	}
	w.c.unused = entries
	for i := range w.th {
		w.th[i] = thread{pc: pcIdle, block: -1, entry: -1, gets: getsPerThread}
		if getsPerThread == 0 {
			w.th[i].pc = pcDone
		}
	}
	return w
}

// enabled reports whether thread t can take a step: it is not finished and
// not blocked in schedule().
func (w *world) enabled(t int) bool {
	th := &w.th[t]
	switch th.pc {
	case pcDone:
		return false
	case pcCacheSleep, pcKeyedSleep, pcEntrySleep:
		return !th.sleeping
	}
	return true
}

// asleep reports whether thread t is blocked in schedule().
func (w *world) asleep(t int) bool {
	th := &w.th[t]
	switch th.pc {
	case pcCacheSleep, pcKeyedSleep, pcEntrySleep:
		return th.sleeping
	}
	return false
}

// needsLock reports whether the next step of t starts with spin_lock(&cache->lock).
func needsLock(p pc) bool {
	switch p {
	case pcIdle, pcRelock, pcKeyedSleep, pcFill, pcHold:
		return true
	}
	return false
}

// step runs thread t's next atomic step. block is the block a new get asks
// for (used only at pcIdle). The caller checks enabled(t) first.
func (w *world) step(t, block int) {
	w.woken = w.woken[:0]
	th := &w.th[t]
	c := &w.c
	switch th.pc {
	case pcIdle:
		th.block, th.entry = block, -1
		th.capacityWake, th.capWoken, th.woke = false, false, false
		w.n.gets++
		if w.log != nil {
			w.logf(t, "squashfs_cache_get(blk %d): spin_lock", block)
		}
		w.lookup(t)

	case pcRelock:
		c.numWaiters--
		if w.log != nil {
			w.logf(t, "spin_lock; num_waiters-- (now %d); rescan", c.numWaiters)
		}
		w.lookup(t)

	case pcKeyedSleep:
		// schedule() returned: finish_wait(), spin_lock, num_waiters--, continue.
		if th.queued {
			c.waitq = remove(c.waitq, t)
			th.queued = false
		}
		th.sleeping = false
		c.numWaiters--
		if w.log != nil {
			w.logf(t, "woken (capacity_wake=%v); finish_wait; spin_lock; num_waiters-- (now %d); rescan", th.capacityWake, c.numWaiters)
		}
		w.lookup(t)

	case pcCacheCheck0:
		if c.unused > 0 {
			if w.log != nil {
				w.logf(t, "wait_event: cache->unused=%d, no sleep", c.unused)
			}
			th.pc = pcRelock
		} else {
			if w.log != nil {
				w.logf(t, "wait_event: cache->unused=0")
			}
			th.pc = pcCachePrepare
		}

	case pcCachePrepare, pcCacheSleep:
		if th.pc == pcCacheSleep {
			if w.log != nil {
				w.logf(t, "woken; prepare_to_wait_event(cache->wait_queue) again")
			}
		} else {
			if w.log != nil {
				w.logf(t, "prepare_to_wait_event(cache->wait_queue)")
			}
		}
		w.prepareCache(t)
		th.pc = pcCacheCheck

	case pcCacheCheck:
		if c.unused > 0 {
			w.finishWait(&c.waitq, t)
			if w.log != nil {
				w.logf(t, "wait_event: cache->unused=%d; finish_wait", c.unused)
			}
			th.pc = pcRelock
		} else {
			th.pc = pcCacheSleep
			if !th.sleeping {
				// Woken since prepare_to_wait_event: schedule()
				// returns at once and the loop prepares again.
				if w.log != nil {
					w.logf(t, "wait_event: cache->unused=0; schedule() returns at once (already woken)")
				}
				break
			}
			if w.log != nil {
				w.logf(t, "wait_event: cache->unused=0; schedule()")
			}
			if th.capWoken {
				// Woken, found nothing, and back to sleep without rescanning.
				w.n.requeues++
			}
			w.sleepAgain(t)
		}

	case pcWakeBlock:
		w.wakeCache(0, th.block)
		if w.log != nil {
			w.logf(t, "squashfs_cache_wake_block(blk %d): woke %s", th.block, w.ids(w.woken))
		}
		th.pc = pcFill

	case pcFill:
		e := &c.entries[th.entry]
		e.pending = false
		if e.numWaiters > 0 {
			if w.log != nil {
				w.logf(t, "squashfs_read_data done; spin_lock; entry %d pending=0, %d waiters; spin_unlock", th.entry, e.numWaiters)
			}
			th.pc = pcWakeEntry
		} else {
			if w.log != nil {
				w.logf(t, "squashfs_read_data done; spin_lock; entry %d pending=0; spin_unlock", th.entry)
			}
			th.pc = pcHold
		}

	case pcWakeEntry:
		w.wakeEntry(th.entry)
		if w.log != nil {
			w.logf(t, "wake_up_all(entry %d wait_queue): woke %s", th.entry, w.ids(w.woken))
		}
		th.pc = pcHold

	case pcHandoff:
		w.wakeCache(1, -1)
		w.n.handoffs++
		if w.log != nil {
			w.logf(t, "hand-off: wake_up(cache->wait_queue): woke %s", w.ids(w.woken))
		}
		if th.pending {
			th.pc = pcEntryCheck0
		} else {
			th.pc = pcHold
		}

	case pcEntryCheck0:
		if !c.entries[th.entry].pending {
			if w.log != nil {
				w.logf(t, "wait_event(entry %d): not pending, no sleep", th.entry)
			}
			th.pc = pcHold
		} else {
			if w.log != nil {
				w.logf(t, "wait_event(entry %d): pending", th.entry)
			}
			th.pc = pcEntryPrepare
		}

	case pcEntryPrepare, pcEntrySleep:
		if th.pc == pcEntrySleep {
			if w.log != nil {
				w.logf(t, "woken; prepare_to_wait_event(entry %d wait_queue) again", th.entry)
			}
		} else {
			if w.log != nil {
				w.logf(t, "prepare_to_wait_event(entry %d wait_queue)", th.entry)
			}
		}
		e := &c.entries[th.entry]
		if !th.queued {
			e.waitq = pushHead(e.waitq, t)
			th.queued = true
		}
		th.sleeping = true
		th.pc = pcEntryCheck

	case pcEntryCheck:
		e := &c.entries[th.entry]
		if !e.pending {
			w.finishWait(&e.waitq, t)
			if w.log != nil {
				w.logf(t, "wait_event(entry %d): not pending; finish_wait", th.entry)
			}
			th.woke = false
			th.pc = pcHold
		} else {
			th.pc = pcEntrySleep
			if !th.sleeping {
				if w.log != nil {
					w.logf(t, "wait_event(entry %d): pending; schedule() returns at once (already woken)", th.entry)
				}
				break
			}
			if w.log != nil {
				w.logf(t, "wait_event(entry %d): pending; schedule()", th.entry)
			}
			w.sleepAgain(t)
		}

	case pcHold:
		e := &c.entries[th.entry]
		e.refcount--
		w.n.releases++
		if e.refcount == 0 {
			c.unused++
			w.n.freeingReleases++
			if c.numWaiters > 0 {
				if w.log != nil {
					w.logf(t, "squashfs_cache_put(entry %d): spin_lock; refcount 0, unused=%d, num_waiters=%d; spin_unlock", th.entry, c.unused, c.numWaiters)
				}
				th.pc = pcPutWake
				return
			}
			if w.log != nil {
				w.logf(t, "squashfs_cache_put(entry %d): spin_lock; refcount 0, unused=%d, no waiters; spin_unlock", th.entry, c.unused)
			}
		} else {
			if w.log != nil {
				w.logf(t, "squashfs_cache_put(entry %d): spin_lock; refcount %d; spin_unlock", th.entry, e.refcount)
			}
		}
		w.endGet(t)

	case pcPutWake:
		w.n.releaseWakeCalls++
		w.wakeCache(1, -1)
		if w.log != nil {
			w.logf(t, "wake_up(cache->wait_queue): woke %s", w.ids(w.woken))
		}
		w.endGet(t)

	default:
		panic("refcache: step from a finished thread")
	}
}

// lookup is the body of squashfs_cache_get's while (1) loop, run with
// cache->lock held; it ends with spin_unlock.
func (w *world) lookup(t int) {
	th := &w.th[t]
	c := &w.c
	n := len(c.entries)
	found := -1
	for i, k := c.currBlk, 0; k < n; k++ {
		if c.entries[i].block == th.block {
			c.currBlk = i
			found = i
			break
		}
		i = (i + 1) % n
	}

	if found < 0 && c.unused == 0 {
		c.numWaiters++
		if w.policy != Keyed {
			if w.log != nil {
				w.logf(t, "blk %d not cached, unused=0: num_waiters=%d; spin_unlock", th.block, c.numWaiters)
			}
			th.pc = pcCacheCheck0
			return
		}
		// The patch enqueues under cache->lock, so a publish of this
		// block after the unlock finds it on the queue.
		th.capacityWake = false
		c.waitq = append(c.waitq, t) // prepare_to_wait_exclusive: tail
		th.queued, th.sleeping = true, true
		if w.log != nil {
			w.logf(t, "blk %d not cached, unused=0: num_waiters=%d; prepare_to_wait_exclusive; spin_unlock; schedule()", th.block, c.numWaiters)
		}
		th.pc = pcKeyedSleep
		w.sleepAgain(t)
		return
	}

	if found < 0 {
		// Round-robin choice of an unused entry to evict.
		i := c.nextBlk
		for k := 0; k < n; k++ {
			if c.entries[i].refcount == 0 {
				break
			}
			i = (i + 1) % n
		}
		c.nextBlk = (i + 1) % n
		e := &c.entries[i]
		c.unused--
		e.block, e.refcount, e.pending, e.numWaiters = th.block, 1, true, 0
		th.entry = i
		w.progress(t, true)
		if w.policy == Keyed && c.numWaiters > 0 {
			if w.log != nil {
				w.logf(t, "blk %d not cached: fill entry %d (unused=%d), wake_block=%d; spin_unlock", th.block, i, c.unused, c.numWaiters)
			}
			th.pc = pcWakeBlock
			return
		}
		if w.log != nil {
			w.logf(t, "blk %d not cached: fill entry %d (unused=%d); spin_unlock; squashfs_read_data", th.block, i, c.unused)
		}
		th.pc = pcFill
		return
	}

	// Block cached: share the entry.
	e := &c.entries[found]
	consumed := e.refcount == 0
	if consumed {
		c.unused--
	}
	e.refcount++
	th.entry = found
	th.pending = e.pending
	if e.pending {
		e.numWaiters++
	}
	wakeNext := w.policy == Keyed && !w.noHandoff && th.capacityWake && !consumed && c.unused > 0 && c.numWaiters > 0
	w.progress(t, consumed)
	if w.log != nil {
		w.logf(t, "blk %d in entry %d: refcount=%d unused=%d pending=%v%s; spin_unlock", th.block, found, e.refcount, c.unused, e.pending, handoffNote(wakeNext))
	}
	switch {
	case wakeNext:
		th.pc = pcHandoff
	case th.pending:
		th.pc = pcEntryCheck0
	default:
		th.pc = pcHold
	}
}

// progress records that t took a reference to an entry. A capacity wakee
// that shares without consuming an unused entry has spent its wake on
// something a publish would have given it.
func (w *world) progress(t int, consumed bool) {
	th := &w.th[t]
	if th.capWoken && !consumed {
		w.n.spentCapacityWakes++
	}
	th.capWoken = false
	th.woke = false
}

// sleepAgain is called when t commits to sleeping.
func (w *world) sleepAgain(t int) {
	th := &w.th[t]
	if th.woke {
		w.n.spurious++
		th.woke = false
	}
	th.capWoken = false
}

// prepareCache is prepare_to_wait_event on cache->wait_queue for the
// wake-all (non-exclusive: head) and exclusive (tail) policies.
func (w *world) prepareCache(t int) {
	th := &w.th[t]
	if !th.queued {
		if w.policy == WakeAll {
			w.c.waitq = pushHead(w.c.waitq, t)
		} else {
			w.c.waitq = append(w.c.waitq, t)
		}
		th.queued = true
	}
	th.sleeping = true
}

// finishWait is finish_wait: running again, and off the queue.
func (w *world) finishWait(q *[]int, t int) {
	th := &w.th[t]
	th.sleeping = false
	if th.queued {
		*q = remove(*q, t)
		th.queued = false
	}
}

// tryToWakeUp is try_to_wake_up for TASK_NORMAL: it succeeds only if the
// task is still in a sleeping state.
func (w *world) tryToWakeUp(t int) bool {
	th := &w.th[t]
	if !th.sleeping {
		return false
	}
	th.sleeping = false
	th.woke = true
	w.woken = append(w.woken, t)
	return true
}

// wakeCache is __wake_up_common on cache->wait_queue. nr is nr_exclusive
// (0: no limit). key is the published block for the patch's block wake, or
// -1 for a capacity wake (wake_up). Wake functions are
// autoremove_wake_function, or the patch's squashfs_cache_wake_function.
func (w *world) wakeCache(nr, key int) {
	q := w.c.waitq
	kept := q[:0]
	stop := false
	for _, t := range q {
		th := &w.th[t]
		if stop || (key >= 0 && th.block != key) {
			kept = append(kept, t)
			continue
		}
		if w.policy == Keyed {
			th.capacityWake = key < 0
		}
		if !w.tryToWakeUp(t) {
			th.capacityWake = false // the failed wake stays queued
			kept = append(kept, t)
			continue
		}
		th.queued = false
		if key < 0 {
			th.capWoken = true
			w.n.cacheWakeups++
		} else {
			w.n.publishWakeups++
		}
		// Only exclusive entries count against nr_exclusive.
		if w.policy != WakeAll && nr > 0 {
			nr--
			stop = nr == 0
		}
	}
	w.c.waitq = kept
}

// wakeEntry is wake_up_all(&entry->wait_queue).
func (w *world) wakeEntry(i int) {
	e := &w.c.entries[i]
	kept := e.waitq[:0]
	for _, t := range e.waitq {
		if w.tryToWakeUp(t) {
			w.th[t].queued = false
			w.n.entryWakeups++
		} else {
			kept = append(kept, t)
		}
	}
	e.waitq = kept
}

func (w *world) endGet(t int) {
	th := &w.th[t]
	th.entry = -1
	th.gets--
	if th.gets == 0 {
		th.pc = pcDone
	} else {
		th.pc = pcIdle
	}
}

func pushHead(q []int, t int) []int {
	q = append(q, 0)
	copy(q[1:], q)
	q[0] = t
	return q
}

func remove(q []int, t int) []int {
	for i, x := range q {
		if x == t {
			return append(q[:i], q[i+1:]...)
		}
	}
	return q
}

func handoffNote(wakeNext bool) string {
	if wakeNext {
		return ", hand the capacity wake on"
	}
	return ""
}

// logf appends one line to the trace: the thread, then what it did.
func (w *world) logf(t int, format string, args ...any) {
	*w.log = append(*w.log, w.tn(t)+": "+fmt.Sprintf(format, args...))
}

// name is thread t's number in traces.
func (w *world) name(t int) int {
	if w.names != nil {
		return w.names[t]
	}
	return t
}

// tn is thread t's name in traces.
func (w *world) tn(t int) string { return fmt.Sprintf("T%d", w.name(t)) }

// ids names a list of threads.
func (w *world) ids(ts []int) string {
	if len(ts) == 0 {
		return "none"
	}
	s := make([]string, len(ts))
	for i, t := range ts {
		s[i] = w.tn(t)
	}
	return strings.Join(s, ",")
}
