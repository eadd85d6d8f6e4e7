package refcache

import (
	"slices"
	"testing"
)

// driver runs chosen threads of a world through named moves, so that a
// test can replay an interleaving from the commit message or the review
// under every policy.
type driver struct {
	t *testing.T
	w *world
}

func newDriver(t *testing.T, p Policy, threads, entries int) *driver {
	w := newWorld(p, threads, entries, 2)
	var lines []string
	w.log = &lines
	w.names = nil
	t.Cleanup(func() {
		if t.Failed() {
			for _, l := range lines {
				t.Log(l)
			}
			t.Log(w.describe())
		}
	})
	return &driver{t: t, w: w}
}

// runUntil steps thread i until done says stop, it blocks, or it finishes
// a get.
func (d *driver) runUntil(i int, done func(*thread) bool) {
	d.t.Helper()
	for n := 0; n < 100; n++ {
		th := &d.w.th[i]
		if done(th) || !d.w.enabled(i) {
			return
		}
		d.w.step(i, th.block)
		if th.pc == pcIdle {
			return
		}
	}
	d.t.Fatalf("T%d does not stop", i)
}

// get starts a get of block b on thread i and runs it until the thread
// reads the block, holds an entry, or sleeps.
func (d *driver) get(i, b int) {
	d.t.Helper()
	if d.w.th[i].pc != pcIdle {
		d.t.Fatalf("T%d is not idle", i)
	}
	d.w.step(i, b)
	d.run(i)
}

// begin takes only the first step of a get: the locked lookup.
func (d *driver) begin(i, b int) { d.w.step(i, b) }

// run steps thread i until it reads, holds, sleeps or has put its entry.
func (d *driver) run(i int) {
	d.runUntil(i, func(th *thread) bool { return th.pc == pcFill || th.pc == pcHold })
}

// fill completes thread i's read and publishes the entry.
func (d *driver) fill(i int) {
	d.t.Helper()
	if d.w.th[i].pc != pcFill {
		d.t.Fatalf("T%d is not reading", i)
	}
	d.w.step(i, -1)
	d.run(i)
}

// put releases thread i's entry, including the wake that follows.
func (d *driver) put(i int) {
	d.t.Helper()
	if d.w.th[i].pc != pcHold {
		d.t.Fatalf("T%d holds no entry", i)
	}
	d.runUntil(i, func(th *thread) bool { return th.pc == pcIdle || th.pc == pcDone })
}

// hold brings thread i to holding an entry (get, read, publish).
func (d *driver) hold(i, b int) {
	d.get(i, b)
	if d.w.th[i].pc == pcFill {
		d.fill(i)
	}
}

// finish runs every thread to completion in round-robin order; each still
// has a get to do, of block 9, so later releases wake any sleeper.
func (d *driver) finish() {
	d.t.Helper()
	for n := 0; n < 10000; n++ {
		progress := false
		for i := range d.w.th {
			if d.w.enabled(i) {
				d.w.step(i, 9)
				progress = true
			}
		}
		if !progress {
			for i := range d.w.th {
				if d.w.th[i].pc != pcDone {
					d.t.Fatalf("deadlock: %s", d.w.sleepers())
				}
			}
			return
		}
	}
	d.t.Fatal("no end")
}

func (d *driver) kinds() []string {
	var k []string
	for _, is := range d.w.check() {
		k = append(k, is.kind)
	}
	return k
}

// expect is what a scenario's checkpoint must show under one policy.
type expect struct {
	kinds    []string // violation and observation kinds in the checkpoint state
	runnable []int    // threads that must have been woken
	asleep   []int    // threads that must still sleep
	handoffs int64
	spent    int64 // capacity wakes spent on sharing
	capWakes int64
}

func TestScenarios(t *testing.T) {
	scenarios := []struct {
		name    string
		threads int
		entries int
		noHand  bool
		play    func(d *driver)
		want    map[Policy]expect
	}{{
		// The commit message: "A waiter woken for capacity may also find
		// its block already published, share it, and leave the freed
		// entry unclaimed". T2 and T3 miss; the first release's capacity
		// goes to a newcomer T4 that publishes T2's block; the second
		// release's wake goes to T2, which shares.
		name: "capacity wake then share", threads: 5, entries: 2,
		play: func(d *driver) {
			d.hold(0, 0)
			d.hold(1, 1)
			d.begin(2, 2)
			d.begin(3, 3)
			d.put(0)
			d.get(4, 2)
			d.run(2)
			d.run(3)
			d.put(1)
			d.run(2)
		},
		want: map[Policy]expect{
			// All sleepers woken; T3 is on its way to the free entry.
			WakeAll: {runnable: []int{3}, spent: 1, capWakes: 2},
			// The one wake went to T2, spent on sharing: T3 sleeps
			// beside a free entry until some later release.
			Exclusive: {kinds: []string{KindStrandedCapacity}, asleep: []int{3}, spent: 1, capWakes: 1},
			// T2 queued under the lock, so it had the first release's
			// wake; the second goes to T3.
			Keyed: {runnable: []int{3}, spent: 1, capWakes: 2},
		},
	}, {
		// The patch's hand-off: T3, woken for capacity, finds T2's
		// publish of its block (the block wake is still pending) and
		// shares; T4 sleeps for capacity and only T3's hand-off wakes it.
		name: "capacity wake then share: hand-off", threads: 5, entries: 2,
		play: func(d *driver) {
			d.hold(0, 0)
			d.hold(1, 1)
			d.get(2, 2)
			d.get(3, 2)
			d.put(0)
			d.runUntil(2, func(th *thread) bool { return th.entry >= 0 }) // allocates blk 2; block wake not yet sent
			d.get(4, 0)
			d.put(1)
			d.runUntil(3, func(th *thread) bool { return th.entry >= 0 && th.pc != pcHandoff })
		},
		want: map[Policy]expect{
			// T4 was woken by the release like everyone else.
			WakeAll: {runnable: []int{4}, spent: 1, capWakes: 3},
			// T3 spent the only wake: T4 strands.
			Exclusive: {kinds: []string{KindStrandedCapacity}, asleep: []int{4}, spent: 1, capWakes: 2},
			Keyed:     {runnable: []int{4}, handoffs: 1, spent: 1, capWakes: 3},
		},
	}, {
		name: "capacity wake then share: keyed without the hand-off", threads: 5, entries: 2, noHand: true,
		play: func(d *driver) {
			d.hold(0, 0)
			d.hold(1, 1)
			d.get(2, 2)
			d.get(3, 2)
			d.put(0)
			d.runUntil(2, func(th *thread) bool { return th.entry >= 0 })
			d.get(4, 0)
			d.put(1)
			d.runUntil(3, func(th *thread) bool { return th.entry >= 0 })
		},
		want: map[Policy]expect{
			Keyed: {kinds: []string{KindStrandedCapacity}, asleep: []int{4}, spent: 1, capWakes: 2},
		},
	}, {
		// The commit message: "later wakees see zero and queue again
		// inside wait_event() without rescanning". One entry; T1 and T2
		// both want block 1.
		name: "requeue without rescan", threads: 3, entries: 1,
		play: func(d *driver) {
			d.hold(0, 0)
			d.get(1, 1)
			d.get(2, 1)
			d.put(0)
			d.run(1) // allocates blk 1
			d.run(2)
		},
		want: map[Policy]expect{
			// T2 re-checked unused == 0 and went back to sleep with
			// its block in the cache.
			WakeAll: {kinds: []string{ObsMissedShare}, asleep: []int{2}, capWakes: 2},
			// T2 was never woken: the release woke one.
			Exclusive: {kinds: []string{ObsMissedShare}, asleep: []int{2}, capWakes: 1},
			// T1's publish woke T2, which shares the pending entry.
			Keyed: {asleep: []int{2}, capWakes: 1},
		},
	}, {
		// The thundering herd: one release, four sleepers.
		name: "herd", threads: 5, entries: 1,
		play: func(d *driver) {
			d.hold(0, 0)
			for i := 1; i <= 4; i++ {
				d.get(i, i)
			}
			d.put(0)
		},
		want: map[Policy]expect{
			WakeAll: {runnable: []int{1, 2, 3, 4}, capWakes: 4},
			// The rest wait for T1 to run: the reviewer's case below.
			Exclusive: {kinds: []string{ObsBlockedBehindWakee}, runnable: []int{1}, asleep: []int{2, 3, 4}, capWakes: 1},
			Keyed:     {kinds: []string{ObsBlockedBehindWakee}, runnable: []int{1}, asleep: []int{2, 3, 4}, capWakes: 1},
		},
	}, {
		// The review: "If the task that is woken cannot be scheduled ...
		// then none of the other threads can run either." T1 is woken
		// and does not run; T2 needs the same free entry.
		name: "woken waiter does not run", threads: 3, entries: 1,
		play: func(d *driver) {
			d.hold(0, 0)
			d.get(1, 1)
			d.get(2, 2)
			d.put(0)
		},
		want: map[Policy]expect{
			WakeAll:   {runnable: []int{1, 2}, capWakes: 2},
			Exclusive: {kinds: []string{ObsBlockedBehindWakee}, runnable: []int{1}, asleep: []int{2}, capWakes: 1},
			Keyed:     {kinds: []string{ObsBlockedBehindWakee}, runnable: []int{1}, asleep: []int{2}, capWakes: 1},
		},
	}}
	for _, sc := range scenarios {
		for _, p := range Policies {
			want, ok := sc.want[p]
			if !ok {
				continue
			}
			t.Run(sc.name+"/"+p.String(), func(t *testing.T) {
				d := newDriver(t, p, sc.threads, sc.entries)
				d.w.noHandoff = sc.noHand
				sc.play(d)
				got := d.kinds()
				for _, k := range want.kinds {
					if !slices.Contains(got, k) {
						t.Errorf("checkpoint shows %v, want %s", got, k)
					}
				}
				for _, k := range got {
					if !slices.Contains(want.kinds, k) {
						t.Errorf("checkpoint shows %s, not expected (want %v)", k, want.kinds)
					}
				}
				for _, i := range want.runnable {
					if !d.w.enabled(i) {
						t.Errorf("T%d is not runnable", i)
					}
				}
				for _, i := range want.asleep {
					if !d.w.asleep(i) {
						t.Errorf("T%d is not asleep", i)
					}
				}
				n := d.w.n
				if n.handoffs != want.handoffs || n.spentCapacityWakes != want.spent || n.cacheWakeups != want.capWakes {
					t.Errorf("handoffs %d, spent capacity wakes %d, capacity wakeups %d; want %d, %d, %d",
						n.handoffs, n.spentCapacityWakes, n.cacheWakeups, want.handoffs, want.spent, want.capWakes)
				}
				// Whatever the checkpoint, every policy finishes.
				d.finish()
			})
		}
	}
}
