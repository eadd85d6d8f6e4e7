package refcache

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"time"
)

// Pattern is the block-access pattern of a simulation.
type Pattern string

const (
	// Uniform picks every block with the same probability.
	Uniform Pattern = "uniform"
	// Zipf picks block k with probability proportional to 1/(k+1)^1.1:
	// a few hot metadata blocks and a long tail.
	Zipf Pattern = "zipf"
	// Fragments is "many small files in few fragments": threads read the
	// files of a directory in order, FilesPerBlock files packed into each
	// fragment block, so concurrent readers hit the same few blocks, often
	// while the block is still being read.
	Fragments Pattern = "fragments"
)

// FilesPerBlock is how many small files the Fragments pattern packs into
// one fragment block.
const FilesPerBlock = 16

// Config is one model run. Zero durations take the defaults below.
type Config struct {
	Policy  Policy  `json:"policy"`
	Threads int     `json:"threads"`
	Entries int     `json:"entries"` // 8 is the squashfs metadata cache, 3 the fragment cache
	Blocks  int     `json:"blocks"`  // distinct blocks the pattern draws from
	Gets    int     `json:"gets"`    // total squashfs_cache_get calls (Simulate)
	Pattern Pattern `json:"pattern"`
	Seed    uint64  `json:"seed"`

	// Simulated time. The simulation is a deterministic discrete-event
	// scheduler: these are costs in simulated time, not host time.
	ReadLatency time.Duration `json:"read_latency"` // squashfs_read_data: read + decompress one block
	HoldTime    time.Duration `json:"hold_time"`    // between get returning and put: copying out of the entry
	ThinkTime   time.Duration `json:"think_time"`   // between a put and the next get
	LockHold    time.Duration `json:"lock_hold"`    // one cache->lock section
	WakeLatency time.Duration `json:"wake_latency"` // from try_to_wake_up to the wakee running
	WakeCost    time.Duration `json:"wake_cost"`    // waker's time per task it wakes
	StepCost    time.Duration `json:"step_cost"`    // any other step (a condition check, prepare_to_wait)

	// The reviewer's concern: thread StallThread (when StallDelay > 0)
	// runs only StallDelay after each wake, as if it were low priority or
	// pinned to a CPU that cannot take it.
	StallThread int           `json:"stall_thread"`
	StallDelay  time.Duration `json:"stall_delay"`

	// GetsPerThread is the number of gets each thread makes in Check
	// (default 1). Simulate uses Gets.
	GetsPerThread int `json:"gets_per_thread,omitempty"`
	// MaxStates bounds Check (default 20,000,000 states).
	MaxStates int `json:"max_states,omitempty"`

	// noHandoff runs keyed without the hand-off, to show what it is for.
	noHandoff bool
}

// Defaults for zero Config durations: a cold metadata read dominated by
// decompression, and Linux wake-up costs on a busy SMP machine.
const (
	DefaultReadLatency = 100 * time.Microsecond
	DefaultHoldTime    = 2 * time.Microsecond
	DefaultThinkTime   = 5 * time.Microsecond
	DefaultLockHold    = 200 * time.Nanosecond
	DefaultWakeLatency = 10 * time.Microsecond
	DefaultWakeCost    = 1 * time.Microsecond
	DefaultStepCost    = 100 * time.Nanosecond
)

func (c *Config) setDefaults() {
	def := func(d *time.Duration, v time.Duration) {
		if *d == 0 {
			*d = v
		}
	}
	def(&c.ReadLatency, DefaultReadLatency)
	def(&c.HoldTime, DefaultHoldTime)
	def(&c.ThinkTime, DefaultThinkTime)
	def(&c.LockHold, DefaultLockHold)
	def(&c.WakeLatency, DefaultWakeLatency)
	def(&c.WakeCost, DefaultWakeCost)
	def(&c.StepCost, DefaultStepCost)
	if c.Pattern == "" {
		c.Pattern = Uniform
	}
	if c.GetsPerThread == 0 {
		c.GetsPerThread = 1
	}
	if c.MaxStates == 0 {
		c.MaxStates = 20_000_000
	}
}

func (c *Config) validate() error {
	var bad []string
	if c.Policy < 0 || int(c.Policy) >= len(policyNames) {
		bad = append(bad, fmt.Sprintf("policy %d unknown", int(c.Policy)))
	}
	if c.Threads < 1 || c.Threads > 100_000 {
		bad = append(bad, fmt.Sprintf("threads %d not in 1..100000", c.Threads))
	}
	if c.Entries < 1 || c.Entries > 100_000 {
		bad = append(bad, fmt.Sprintf("entries %d not in 1..100000", c.Entries))
	}
	if c.Blocks < 1 {
		bad = append(bad, fmt.Sprintf("blocks %d < 1", c.Blocks))
	}
	if c.StallDelay > 0 && (c.StallThread < 0 || c.StallThread >= c.Threads) {
		bad = append(bad, fmt.Sprintf("stall thread %d not in 0..%d", c.StallThread, c.Threads-1))
	}
	if c.Gets < 0 {
		bad = append(bad, fmt.Sprintf("gets %d < 0", c.Gets))
	}
	switch c.Pattern {
	case Uniform, Zipf, Fragments:
	default:
		bad = append(bad, fmt.Sprintf("pattern %q not uniform, zipf or fragments", c.Pattern))
	}
	for _, d := range []time.Duration{c.ReadLatency, c.HoldTime, c.ThinkTime, c.LockHold, c.WakeLatency, c.WakeCost, c.StepCost, c.StallDelay} {
		if d < 0 {
			bad = append(bad, fmt.Sprintf("negative duration %v", d))
			break
		}
	}
	if len(bad) > 0 {
		return fmt.Errorf("invalid model config: %s", strings.Join(bad, "; "))
	}
	return nil
}

// Stats is what a simulation counted. Counts are exact for the seed: the
// same Config gives the same Stats.
type Stats struct {
	Policy  Policy  `json:"policy"`
	Threads int     `json:"threads"`
	Entries int     `json:"entries"`
	Blocks  int     `json:"blocks"`
	Pattern Pattern `json:"pattern"`
	Gets    int64   `json:"gets"`
	// Releases counts squashfs_cache_put calls, which is what a kprobe on
	// squashfs_cache_put counts in the guest.
	Releases int64 `json:"releases"`
	// FreeingReleases are the puts that dropped refcount to zero (one more
	// reusable entry); ReleaseWakeCalls those that then called wake_up.
	FreeingReleases  int64 `json:"freeing_releases"`
	ReleaseWakeCalls int64 `json:"release_wake_calls"`
	// Wakeups counts tasks made runnable (successful try_to_wake_up) by the
	// cache, on any of its queues: CapacityWakeups (release and hand-off
	// wakes on cache->wait_queue), PublishWakeups (the patch's block wakes)
	// and EntryWakeups (entry->wait_queue after a fill).
	Wakeups           int64   `json:"wakeups"`
	CapacityWakeups   int64   `json:"capacity_wakeups"`
	PublishWakeups    int64   `json:"publish_wakeups"`
	EntryWakeups      int64   `json:"entry_wakeups"`
	WakeupsPerRelease float64 `json:"wakeups_per_release"` // Wakeups / Releases
	// SpuriousWakeups: woken, then asleep again in the same get without
	// having taken a reference to an entry.
	SpuriousWakeups int64 `json:"spurious_wakeups"`
	// Requeues: woken from cache->wait_queue and back to sleep without
	// rescanning the cache (wait_event re-check), so a block published
	// meanwhile is not seen.
	Requeues int64 `json:"requeues"`
	// Handoffs: capacity wakes passed on by a waiter that shared instead
	// (keyed only). SpentCapacityWakes: capacity wakees that shared an
	// entry without consuming an unused one.
	Handoffs           int64 `json:"handoffs"`
	SpentCapacityWakes int64 `json:"spent_capacity_wakes"`
	// StrandedNs is simulated time during which an entry was unused while
	// a task was queued on cache->wait_queue.
	StrandedNs int64 `json:"stranded_ns"`
	// Throughput and latency in simulated time.
	SimulatedNs int64   `json:"simulated_ns"`
	OpsPerSec   float64 `json:"ops_per_sec"`
	// MeanGetNs and MaxGetNs time squashfs_cache_get calls, from the
	// call to its return; with a stalled thread, of the other threads only.
	MeanGetNs float64 `json:"mean_get_ns"`
	MaxGetNs  int64   `json:"max_get_ns"`
	// With StallDelay: the stalled thread's own worst get, how many wakes
	// it received, and the simulated time during which an entry was
	// unused and tasks were queued for capacity while the stalled thread
	// held a capacity wake it had not yet run to use: what its stall cost
	// the others.
	StallMaxGetNs  int64 `json:"stall_thread_max_get_ns,omitempty"`
	StallWakes     int64 `json:"stall_wakes,omitempty"`
	StallBlockedNs int64 `json:"stall_blocked_ns,omitempty"`
}

// Simulate runs cfg.Gets gets from cfg.Threads threads against a cache of
// cfg.Entries entries under cfg.Policy and counts what happens. It uses a
// deterministic discrete-event scheduler: threads are the state machines of
// model.go, run one step at a time in simulated-time order (ties by thread
// id), so results are reproducible and a million gets take about a second.
func Simulate(cfg Config) (Stats, error) {
	cfg.setDefaults()
	if err := cfg.validate(); err != nil {
		return Stats{}, err
	}
	s := newSim(cfg)
	if err := s.run(); err != nil {
		return Stats{}, err
	}
	return s.stats(), nil
}

type sim struct {
	cfg        Config
	w          *world
	q          eventQueue
	now        int64
	lockFreeAt int64
	started    int
	pick       func() int

	scheduled               []bool // in the event queue (a wake must not queue it twice)
	lockHeld                []bool // has its cache->lock slot reserved
	getStart                []int64
	getNs                   int64
	getsDone                int64
	maxGet, stallMaxGet     int64
	stranded, strandedSince int64
	strandedOn              bool
	stallWakes              int64
	stallBlocked, blockedAt int64
	blockedOn               bool
}

func newSim(cfg Config) *sim {
	s := &sim{cfg: cfg, w: newWorld(cfg.Policy, cfg.Threads, cfg.Entries, 1), getStart: make([]int64, cfg.Threads), scheduled: make([]bool, cfg.Threads), lockHeld: make([]bool, cfg.Threads)}
	s.w.woken = make([]int, 0, cfg.Threads)
	s.w.noHandoff = cfg.noHandoff
	r := rand.New(rand.NewPCG(cfg.Seed, 0x5175a5f5))
	switch cfg.Pattern {
	case Uniform:
		s.pick = func() int { return r.IntN(cfg.Blocks) }
	case Zipf:
		if cfg.Blocks == 1 {
			s.pick = func() int { return 0 }
			break
		}
		z := rand.NewZipf(r, 1.1, 1, uint64(cfg.Blocks-1))
		s.pick = func() int { return int(z.Uint64()) }
	case Fragments:
		file := 0
		s.pick = func() int {
			b := (file / FilesPerBlock) % cfg.Blocks
			file++
			return b
		}
	}
	for t := range s.w.th {
		s.w.th[t].gets = 1 << 62 // the simulation stops threads itself
		s.schedule(0, t)
	}
	return s
}

func (s *sim) run() error {
	w := s.w
	cfg := &s.cfg
	lock, step := int64(cfg.LockHold), int64(cfg.StepCost)
	var ev event
	have := false // ev is the next event, not yet in the queue
	for have || s.q.len() > 0 {
		if !have {
			ev = s.q.pop()
		}
		have = false
		s.now = ev.at
		t := int(ev.tid)
		s.scheduled[t] = false
		th := &w.th[t]
		took := needsLock(th.pc)
		if took && !s.lockHeld[t] {
			// cache->lock is a queued spinlock: take the next free slot
			// and spin until then. The slot is reserved now, so
			// spinners are served in arrival order.
			at := max(s.now, s.lockFreeAt)
			s.lockFreeAt = at + lock
			if at > s.now {
				s.lockHeld[t] = true
				s.schedule(at, t)
				continue
			}
		}
		s.lockHeld[t] = false
		block := -1
		if th.pc == pcIdle {
			if s.started == cfg.Gets {
				th.pc = pcDone
				continue
			}
			s.started++
			block = s.pick()
			s.getStart[t] = s.now
		}
		prev := th.pc
		w.step(t, block)

		next := s.now + step
		if took {
			next = s.now + lock
		}
		if n := len(w.woken); n > 0 {
			next += int64(n) * int64(cfg.WakeCost)
			for _, u := range w.woken {
				delay := int64(cfg.WakeLatency)
				if cfg.StallDelay > 0 && u == cfg.StallThread {
					delay = int64(cfg.StallDelay)
					s.stallWakes++
				}
				if !s.scheduled[u] { // else it had not gone to sleep yet
					s.schedule(next+delay, u)
				}
			}
		}
		switch th.pc {
		case pcFill:
			if prev != pcFill {
				next += int64(cfg.ReadLatency)
			}
		case pcHold:
			if prev != pcHold {
				s.endGet(t)
				next += int64(cfg.HoldTime)
			}
		case pcIdle:
			next += int64(cfg.ThinkTime)
		}
		s.trackStranded()
		if w.enabled(t) {
			// Most steps are followed by the same thread's next one:
			// skip the queue when nothing comes before it.
			if e := (event{at: next, tid: int32(t)}); s.q.len() == 0 || less(e, s.q.h[0]) {
				ev, have = e, true
				s.scheduled[t] = true
			} else {
				s.schedule(next, t)
			}
		}
	}
	if s.started != cfg.Gets || !s.allDone() {
		return fmt.Errorf("simulating %s: %w at %v simulated: %s", cfg.Policy, errDeadlock, time.Duration(s.now), s.w.describe())
	}
	return nil
}

func (s *sim) schedule(at int64, t int) {
	s.scheduled[t] = true
	s.q.push(event{at: at, tid: int32(t)})
}

var errDeadlock = errors.New("deadlock: every live thread is asleep")

func (s *sim) allDone() bool {
	for t := range s.w.th {
		if s.w.th[t].pc != pcDone {
			return false
		}
	}
	return true
}

func (s *sim) endGet(t int) {
	d := s.now - s.getStart[t]
	if s.cfg.StallDelay > 0 && t == s.cfg.StallThread {
		s.stallMaxGet = max(s.stallMaxGet, d)
		return
	}
	s.getNs += d
	s.getsDone++
	s.maxGet = max(s.maxGet, d)
}

// trackStranded integrates the time an entry is unused while some task is
// queued for capacity.
func (s *sim) trackStranded() {
	on := s.w.c.unused > 0 && len(s.w.c.waitq) > 0
	integrate(on, &s.strandedOn, &s.strandedSince, &s.stranded, s.now)
	if s.cfg.StallDelay > 0 {
		on = on && s.w.th[s.cfg.StallThread].capWoken
		integrate(on, &s.blockedOn, &s.blockedAt, &s.stallBlocked, s.now)
	}
}

// integrate adds to *total the time a condition held, given its new value.
func integrate(on bool, was *bool, since, total *int64, now int64) {
	if on == *was {
		return
	}
	if on {
		*since = now
	} else {
		*total += now - *since
	}
	*was = on
}

func (s *sim) stats() Stats {
	n := s.w.n
	st := Stats{
		Policy: s.cfg.Policy, Threads: s.cfg.Threads, Entries: s.cfg.Entries, Blocks: s.cfg.Blocks, Pattern: s.cfg.Pattern,
		Gets: n.gets, Releases: n.releases, FreeingReleases: n.freeingReleases, ReleaseWakeCalls: n.releaseWakeCalls,
		CapacityWakeups: n.cacheWakeups, PublishWakeups: n.publishWakeups, EntryWakeups: n.entryWakeups,
		SpuriousWakeups: n.spurious, Requeues: n.requeues, Handoffs: n.handoffs, SpentCapacityWakes: n.spentCapacityWakes,
		StrandedNs: s.stranded, SimulatedNs: s.now, MaxGetNs: s.maxGet,
		StallMaxGetNs: s.stallMaxGet, StallWakes: s.stallWakes, StallBlockedNs: s.stallBlocked,
	}
	st.Wakeups = st.CapacityWakeups + st.PublishWakeups + st.EntryWakeups
	if st.Releases > 0 {
		st.WakeupsPerRelease = float64(st.Wakeups) / float64(st.Releases)
	}
	if s.now > 0 {
		st.OpsPerSec = float64(st.Gets) / (float64(s.now) / 1e9)
	}
	if s.getsDone > 0 {
		st.MeanGetNs = float64(s.getNs) / float64(s.getsDone)
	}
	return st
}

// event is a thread becoming ready to take its next step at simulated time at.
type event struct {
	at  int64
	tid int32
}

// eventQueue is a binary min-heap on (at, tid): ties go to the lower
// thread id, which keeps runs deterministic.
type eventQueue struct{ h []event }

func (q *eventQueue) len() int { return len(q.h) }

func less(a, b event) bool { return a.at < b.at || (a.at == b.at && a.tid < b.tid) }

func (q *eventQueue) push(e event) {
	q.h = append(q.h, e)
	i := len(q.h) - 1
	for i > 0 {
		p := (i - 1) / 2
		if !less(q.h[i], q.h[p]) {
			break
		}
		q.h[i], q.h[p] = q.h[p], q.h[i]
		i = p
	}
}

func (q *eventQueue) pop() event {
	top := q.h[0]
	last := len(q.h) - 1
	q.h[0] = q.h[last]
	q.h = q.h[:last]
	i := 0
	for {
		l, r, m := 2*i+1, 2*i+2, i
		if l < last && less(q.h[l], q.h[m]) {
			m = l
		}
		if r < last && less(q.h[r], q.h[m]) {
			m = r
		}
		if m == i {
			break
		}
		q.h[i], q.h[m] = q.h[m], q.h[i]
		i = m
	}
	return top
}
