package suites

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"

	"golang.org/x/sys/unix"
)

// Wake-ups per cache release, the seed's own metric, is measured with three
// tracefs instruments. They are armed once for the life of the process and
// kept: under TCG arming them (the kprobes' text patching, the hist maps)
// took 10 s a workload, a third of a round. Each workload clears and
// continues the hist triggers at its start and pauses them at its end, so
// that they count the workload alone; kprobe hits are read as differences.
//
//   - a kprobe event on squashfs_cache_put; its hit count in kprobe_profile
//     is the number of puts (most free nothing and wake no one);
//   - a kprobe event on __wake_up_common_lock (or __wake_up where that is
//     inlined) with a hist trigger keyed by the caller's stack: the calls
//     whose waker site is the squashfs release path are the release wake
//     calls, the denominator. The probe sits one call below wake_up() on
//     purpose: at a function's first instruction the frame-pointer unwinder
//     cannot see the immediate caller (its frame is not set up yet), so a
//     probe on __wake_up loses squashfs_cache_put and shows its caller;
//     one level down, the lost frame is __wake_up, which is machinery;
//   - a hist trigger keyed by stack on sched:sched_waking, which fires in the
//     waker's context once per task made runnable: the events whose waker
//     site is the release path are the release wake-ups, the numerator.
//
// The waker site is the first frame outside the wait-queue machinery.
// squashfs_cache_put() ends in a tail call to wake_up(), so unless the
// kernel is built with -fno-optimize-sibling-calls its frame is missing and
// the site is its caller (squashfs_readahead, squashfs_read_metadata, ...):
// any squashfs function other than squashfs_cache_get then counts as the
// release path, because squashfs_cache_get's own wakes (a published block,
// or the patched kernel's hand-off) are not tail calls. docs/suites.md has
// the definition.

const (
	kprobeGroup  = "patchbot"
	putEvent     = "sqfs_cache_put"
	wakeUpEvent  = "wake_up"
	histSize     = 16384
	histTrigger  = "hist:keys=stacktrace:vals=hitcount:size=16384"
	releaseFrame = "squashfs_cache_put"
)

// wakeProbeTargets are where the release wake calls are counted, best
// first: __wake_up_common_lock is static and inlined in some builds.
var wakeProbeTargets = []string{"__wake_up_common_lock", "__wake_up"}

type releaseTrace struct {
	wakeProbe    string // the function of wakeProbeTargets that took the probe
	puts0, puts1 uint64
	armed        []string // trigger files armed, to disarm in close
	probes       bool

	wakeCalls, wakeups   uint64 // attributed to the release path
	wakingTotal          uint64 // every sched_waking event
	cacheWakeups         uint64 // sched_waking from any squashfs waker site
	dropped              uint64 // hist entries lost to a full map
	tailCall             bool   // release sites were callers of squashfs_cache_put
	sites                map[string]uint64
	wakeHist, wakingHist string
	// armedHere: this workload armed the instruments itself (nothing
	// prepared them), and paid for it in its arm phase.
	armedHere bool
}

func ensureTracefs() error {
	if _, err := os.Stat(filepath.Join(tracefsDir, "events")); err == nil {
		return nil
	}
	if err := unix.Mount("nodev", tracefsDir, "tracefs", 0, ""); err != nil {
		// Older layouts expose tracing under debugfs only.
		if _, err2 := os.Stat("/sys/kernel/debug/tracing/events"); err2 == nil {
			tracefsDir = "/sys/kernel/debug/tracing"
			return nil
		}
		return fmt.Errorf("mounting tracefs on %s (CONFIG_TRACING?): %w", tracefsDir, err)
	}
	return nil
}

func tracefsWrite(name, s string, flags int) error {
	f, err := os.OpenFile(filepath.Join(tracefsDir, name), os.O_WRONLY|flags, 0)
	if err != nil {
		return err
	}
	if _, err := f.WriteString(s); err != nil {
		f.Close()
		return fmt.Errorf("writing %q to %s: %w", s, name, err)
	}
	return f.Close()
}

// armedTrace holds the instruments armed for this process.
var armedTrace struct {
	sync.Mutex
	t *releaseTrace
}

// startReleaseTrace starts counting for one workload, arming the
// instruments first if this process has not.
func startReleaseTrace() (*releaseTrace, error) {
	armedTrace.Lock()
	defer armedTrace.Unlock()
	here := armedTrace.t == nil
	a, err := armedLocked()
	if err != nil {
		return nil, err
	}
	t := &releaseTrace{wakeProbe: a.wakeProbe, armed: a.armed, armedHere: here}
	for _, trig := range a.armed {
		if err := tracefsWrite(trig, histTrigger+":clear", 0); err != nil {
			return nil, fmt.Errorf("clearing hist trigger: %w", err)
		}
		if err := tracefsWrite(trig, histTrigger+":cont", 0); err != nil {
			return nil, fmt.Errorf("continuing hist trigger: %w", err)
		}
	}
	if t.puts0, err = t.readPuts(); err != nil {
		return nil, err
	}
	return t, nil
}

// ArmReleaseTrace arms the instruments ahead of the first workload (see
// Prepare); a workload arms them itself when nothing did.
func ArmReleaseTrace() error {
	armedTrace.Lock()
	defer armedTrace.Unlock()
	_, err := armedLocked()
	return err
}

// armedLocked returns the instruments armed for this process, arming them
// first if it has not; armedTrace is held.
func armedLocked() (*releaseTrace, error) {
	if armedTrace.t == nil {
		a, err := armReleaseTrace()
		if err != nil {
			return nil, err
		}
		armedTrace.t = a
	}
	return armedTrace.t, nil
}

// DisarmReleaseTrace removes the instruments (--local and tests, when done;
// a guest's go with its VM).
func DisarmReleaseTrace() {
	armedTrace.Lock()
	defer armedTrace.Unlock()
	if armedTrace.t != nil {
		armedTrace.t.disarm()
		armedTrace.t = nil
	}
}

// armReleaseTrace adds the kprobes and hist triggers, paused.
func armReleaseTrace() (*releaseTrace, error) {
	if err := ensureTracefs(); err != nil {
		return nil, err
	}
	t := &releaseTrace{}
	// Remove what an interrupted run left: adding an existing probe or
	// trigger fails, and a probe with a trigger cannot be removed.
	tracefsWrite("events/sched/sched_waking/trigger", "!"+histTrigger, 0)
	t.removeProbes()
	t.probes = true
	if err := tracefsWrite("kprobe_events", fmt.Sprintf("p:%s/%s squashfs_cache_put\n", kprobeGroup, putEvent), os.O_APPEND); err != nil {
		t.removeProbes()
		return nil, fmt.Errorf("adding kprobe event (CONFIG_KPROBE_EVENTS? squashfs built in?): %w", err)
	}
	var err error
	for _, fn := range wakeProbeTargets {
		err = tracefsWrite("kprobe_events", fmt.Sprintf("p:%s/%s %s\n", kprobeGroup, wakeUpEvent, fn), os.O_APPEND)
		if err == nil {
			t.wakeProbe = fn
			break
		}
	}
	if err != nil {
		t.removeProbes()
		return nil, fmt.Errorf("adding a kprobe event on the wake-up path: %w", err)
	}
	for _, trig := range []string{
		"events/" + kprobeGroup + "/" + wakeUpEvent + "/trigger",
		"events/sched/sched_waking/trigger",
	} {
		if err := tracefsWrite(trig, histTrigger+":pause", 0); err != nil {
			t.disarm()
			return nil, fmt.Errorf("arming hist trigger (CONFIG_HIST_TRIGGERS?): %w", err)
		}
		t.armed = append(t.armed, trig)
	}
	for _, ev := range []string{putEvent, wakeUpEvent} {
		if err := tracefsWrite("events/"+kprobeGroup+"/"+ev+"/enable", "1", 0); err != nil {
			t.disarm()
			return nil, fmt.Errorf("enabling kprobe %s: %w", ev, err)
		}
	}
	return t, nil
}

// stop reads every instrument: the puts first, then the hist maps, paused
// so that they stop counting at the workload's end.
func (t *releaseTrace) stop() error {
	var err error
	if t.puts1, err = t.readPuts(); err != nil {
		return err
	}
	for _, trig := range t.armed {
		if err := tracefsWrite(trig, histTrigger+":pause", 0); err != nil {
			return fmt.Errorf("pausing hist trigger: %w", err)
		}
	}
	wake, err := os.ReadFile(filepath.Join(tracefsDir, "events", kprobeGroup, wakeUpEvent, "hist"))
	if err != nil {
		return fmt.Errorf("reading __wake_up hist: %w", err)
	}
	waking, err := os.ReadFile(filepath.Join(tracefsDir, "events/sched/sched_waking/hist"))
	if err != nil {
		return fmt.Errorf("reading sched_waking hist: %w", err)
	}
	t.wakeHist, t.wakingHist = string(wake), string(waking)
	wh, err := parseHist(t.wakeHist)
	if err != nil {
		return fmt.Errorf("__wake_up hist: %w", err)
	}
	kh, err := parseHist(t.wakingHist)
	if err != nil {
		return fmt.Errorf("sched_waking hist: %w", err)
	}
	t.sites = map[string]uint64{}
	for _, e := range wh.entries {
		if site, ok := releaseSite(e.frames); ok {
			t.wakeCalls += e.hits
			t.sites[site] += e.hits
			t.tailCall = t.tailCall || site != releaseFrame
		}
	}
	for _, e := range kh.entries {
		t.wakingTotal += e.hits
		site, ok := releaseSite(e.frames)
		if ok {
			t.wakeups += e.hits
		}
		if strings.HasPrefix(site, "squashfs_") {
			t.cacheWakeups += e.hits
		}
	}
	t.dropped = wh.dropped + kh.dropped
	return nil
}

func (t *releaseTrace) readPuts() (uint64, error) {
	b, err := os.ReadFile(filepath.Join(tracefsDir, "kprobe_profile"))
	if err != nil {
		return 0, fmt.Errorf("reading kprobe_profile: %w", err)
	}
	return parseKprobeHits(string(b), putEvent)
}

// parseKprobeHits finds "<event> <nhit> <nmissed>" in kprobe_profile.
func parseKprobeHits(profile, event string) (uint64, error) {
	for _, line := range strings.Split(profile, "\n") {
		f := strings.Fields(line)
		if len(f) >= 3 && (f[0] == event || strings.HasSuffix(f[0], "/"+event)) {
			return strconv.ParseUint(f[1], 10, 64)
		}
	}
	return 0, fmt.Errorf("kprobe_profile has no %s line", event)
}

// close ends one workload's use of the instruments; they stay armed for
// the next (DisarmReleaseTrace removes them).
func (t *releaseTrace) close() {}

// disarm removes the triggers and the probes.
func (t *releaseTrace) disarm() {
	for _, trig := range t.armed {
		tracefsWrite(trig, "!"+histTrigger, 0)
	}
	t.armed = nil
	if t.probes {
		t.removeProbes()
		t.probes = false
	}
}

func (t *releaseTrace) removeProbes() {
	tracefsWrite("events/"+kprobeGroup+"/"+wakeUpEvent+"/trigger", "!"+histTrigger, 0)
	for _, ev := range []string{putEvent, wakeUpEvent} {
		tracefsWrite("events/"+kprobeGroup+"/"+ev+"/enable", "0", 0)
		tracefsWrite("kprobe_events", fmt.Sprintf("-:%s/%s\n", kprobeGroup, ev), os.O_APPEND)
	}
}

// hist is a parsed tracefs hist file keyed by stacktrace.
type hist struct {
	entries []histEntry
	hits    uint64
	dropped uint64
}

type histEntry struct {
	frames []string // function names, innermost first
	hits   uint64
}

// parseHist reads entries of the form
//
//	{ stacktrace:
//	         try_to_wake_up+0x1f4/0x5f0
//	         ...
//	} hitcount:          4
//
// and the "Hits:" and "Dropped:" totals.
func parseHist(s string) (*hist, error) {
	h := &hist{}
	var cur *histEntry
	sc := bufio.NewScanner(strings.NewReader(s))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		switch {
		case strings.HasPrefix(line, "{ stacktrace:"):
			cur = &histEntry{}
		case cur != nil && strings.HasPrefix(line, "}"):
			_, v, ok := strings.Cut(line, "hitcount:")
			if !ok {
				return nil, fmt.Errorf("entry end without hitcount: %q", line)
			}
			n, err := strconv.ParseUint(strings.Fields(v)[0], 10, 64)
			if err != nil {
				return nil, fmt.Errorf("hitcount %q: %w", v, err)
			}
			cur.hits = n
			h.entries = append(h.entries, *cur)
			cur = nil
		case cur != nil && line != "":
			fn, _, _ := strings.Cut(line, "+")
			cur.frames = append(cur.frames, strings.Fields(fn)[0])
		case strings.HasPrefix(line, "Hits:"):
			h.hits, _ = strconv.ParseUint(strings.TrimSpace(strings.TrimPrefix(line, "Hits:")), 10, 64)
		case strings.HasPrefix(line, "Dropped:"):
			h.dropped, _ = strconv.ParseUint(strings.TrimSpace(strings.TrimPrefix(line, "Dropped:")), 10, 64)
		}
	}
	if cur != nil {
		return nil, errors.New("truncated hist: entry without end")
	}
	return h, sc.Err()
}

// wakeMachinery are the frames between a waker site and the wake-up itself.
var wakeMachinery = map[string]bool{
	"__wake_up": true, "__wake_up_common": true, "__wake_up_common_lock": true,
	"__wake_up_locked": true, "__wake_up_locked_key": true, "__wake_up_sync_key": true,
	"__wake_up_locked_key_bookmark": true, "__wake_up_sync": true,
	"try_to_wake_up": true, "wake_up_process": true, "wake_up_q": true,
	"default_wake_function": true, "autoremove_wake_function": true,
	"woken_wake_function": true, "wake_bit_function": true,
	"squashfs_cache_wake_function": true, "ttwu_do_activate": true,
	"kprobe_ftrace_handler": true, "kprobe_dispatcher": true, "kprobe_trace_func": true,
}

// releaseSite returns the waker site of a stack (innermost first) and
// whether it is the squashfs release path.
func releaseSite(frames []string) (string, bool) {
	last := -1
	for i, f := range frames {
		if i > 16 {
			break
		}
		if wakeMachinery[f] || strings.HasPrefix(f, "trace_") || strings.HasPrefix(f, "event_") {
			last = i
		}
	}
	if last+1 >= len(frames) {
		return "", false
	}
	site := frames[last+1]
	if site == releaseFrame {
		return site, true
	}
	// Tail call: squashfs_cache_put's frame is gone and its caller shows.
	// Only a wait-queue wake (what wake_up() leads to) qualifies; __wake_up
	// itself may be missing too, as it tail-calls __wake_up_common_lock.
	if strings.HasPrefix(site, "squashfs_") && site != "squashfs_cache_get" &&
		last >= 0 && containsWaitQueueWake(frames[:last+1]) {
		return site, true
	}
	return site, false
}

func containsWaitQueueWake(frames []string) bool {
	for _, f := range frames {
		if f == "__wake_up" || f == "__wake_up_common_lock" || f == "__wake_up_common" {
			return true
		}
	}
	return false
}

// recordRelease adds the release metrics to the round, or says why they
// are missing.
func (c *counters) recordRelease(r *round, workload string, params map[string]string) {
	names := []string{"cache_puts", "release_wake_calls", "release_wakeups", "wakeups_per_release", "waking_events", "cache_wakeups", "cache_wakeups_per_put"}
	if c.releaseErr != nil || c.release == nil {
		reason := "release tracing not set up"
		if c.releaseErr != nil {
			reason = c.releaseErr.Error()
		}
		for _, n := range names {
			r.missing(workload, n, reason)
		}
		return
	}
	t := c.release
	r.sample(workload, params, metric{"cache_puts", "count", false}, float64(t.puts1-t.puts0))
	r.sample(workload, params, metric{"release_wake_calls", "count", false}, float64(t.wakeCalls))
	r.sample(workload, params, metric{"release_wakeups", "count", false}, float64(t.wakeups))
	r.sample(workload, params, metric{"waking_events", "count", false}, float64(t.wakingTotal))
	r.sample(workload, params, metric{"cache_wakeups", "count", false}, float64(t.cacheWakeups))
	if puts := t.puts1 - t.puts0; puts > 0 {
		r.sample(workload, params, metric{"cache_wakeups_per_put", "wakeups/put", false}, float64(t.cacheWakeups)/float64(puts))
	} else {
		r.missing(workload, "cache_wakeups_per_put", "no squashfs_cache_put calls")
	}
	if t.wakeCalls > 0 {
		r.sample(workload, params, metric{"wakeups_per_release", "wakeups/release", false}, float64(t.wakeups)/float64(t.wakeCalls))
	} else {
		r.missing(workload, "wakeups_per_release", "no release found a waiter to wake (no release wake calls)")
	}
	r.res.Notes["release_probe"] = t.wakeProbe
	if t.armedHere {
		r.res.Notes["release_trace_armed/"+workload] = fmt.Sprintf("round %d: the workload armed the release trace itself (nothing prepared it)", r.n)
	}
	if t.dropped > 0 {
		r.res.Notes["release_trace_dropped/"+workload] = fmt.Sprintf("round %d: %d stacks dropped from a full hist map (size %d): release counts are low", r.n, t.dropped, histSize)
	}
	if t.tailCall {
		var sites []string
		for s, n := range t.sites {
			sites = append(sites, fmt.Sprintf("%s=%d", s, n))
		}
		r.res.Notes["release_sites/"+workload] = "squashfs_cache_put frame missing (tail call); release wake calls attributed to its callers: " + strings.Join(sites, " ")
	}
}
