package mailbox

import (
	"container/list"
	"sync"
)

// Threads keeps parsed mail grouped by thread, so that a daemon
// re-assembles a thread on each new mail without parsing the thread's
// stored mails again: each mail is parsed once when it arrives (or once
// per process, when a thread is first loaded from the store), and the
// series are assembled from the parsed mails, which costs microseconds.
//
// A mail joins every thread it names (its Message-ID, In-Reply-To and
// References), merging them, so that a reply whose References list its
// parent first, or arrives before its parent, still ends up in the one
// thread. Threads used least recently are dropped when the raw mail kept
// passes MaxBytes; a dropped thread is simply loaded again (Known says
// whether it is there).
//
// It is safe for concurrent use.
type Threads struct {
	MaxBytes int64 // 0 means 256 MiB

	mu     sync.Mutex
	byID   map[string]*thread
	lru    *list.List // of *thread, most recent first
	bytes  int64
	nextID int
}

type thread struct {
	key    string // the key Add returned when the thread was made
	msgs   []*Message
	ids    map[string]bool // every Message-ID the thread's mails name
	have   map[string]bool // Message-IDs of the mails held
	bytes  int64
	elem   *list.Element
	series []*Series // cached Assemble; nil after a change
}

// NewThreads makes an empty cache of at most maxBytes of raw mail
// (0: 256 MiB).
func NewThreads(maxBytes int64) *Threads {
	return &Threads{MaxBytes: maxBytes}
}

func (t *Threads) init() {
	if t.byID == nil {
		t.byID = map[string]*thread{}
		t.lru = list.New()
	}
}

// Add keeps a parsed mail and returns the key of its thread: the key
// stays the thread's while it is kept, and a thread that Add merged into
// another answers to the surviving key only. A mail whose Message-ID is
// held already is not added twice.
func (t *Threads) Add(m *Message) string {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.init()
	ids := threadIDs(m)
	var th *thread
	for _, id := range ids {
		o := t.byID[id]
		if o == nil || o == th {
			continue
		}
		if th == nil {
			th = o
			continue
		}
		// m links two threads: the smaller joins the larger.
		if len(o.msgs) > len(th.msgs) {
			th, o = o, th
		}
		t.merge(th, o)
	}
	if th == nil {
		t.nextID++
		th = &thread{ids: map[string]bool{}, have: map[string]bool{}}
		th.key = m.MessageID
		if th.key == "" {
			th.key = "thread-" + itoa(t.nextID)
		}
		th.elem = t.lru.PushFront(th)
	}
	if m.MessageID == "" || !th.have[m.MessageID] {
		th.msgs = append(th.msgs, m)
		th.bytes += int64(len(m.Raw))
		t.bytes += int64(len(m.Raw))
		if m.MessageID != "" {
			th.have[m.MessageID] = true
		}
		th.series = nil
	}
	for _, id := range ids {
		th.ids[id] = true
		t.byID[id] = th
	}
	t.lru.MoveToFront(th.elem)
	t.evict(th)
	return th.key
}

func (t *Threads) merge(into, from *thread) {
	for _, m := range from.msgs {
		if m.MessageID == "" || !into.have[m.MessageID] {
			into.msgs = append(into.msgs, m)
			into.bytes += int64(len(m.Raw))
			if m.MessageID != "" {
				into.have[m.MessageID] = true
			}
		} else {
			t.bytes -= int64(len(m.Raw))
		}
	}
	for id := range from.ids {
		into.ids[id] = true
		t.byID[id] = into
	}
	// The old key finds the merged thread too.
	t.byID[from.key] = into
	into.ids[from.key] = true
	into.series = nil
	t.lru.Remove(from.elem)
}

// evict drops least recently used threads, never keep, until the cache
// is within MaxBytes.
func (t *Threads) evict(keep *thread) {
	limit := t.MaxBytes
	if limit <= 0 {
		limit = 256 << 20
	}
	for t.bytes > limit {
		e := t.lru.Back()
		if e == nil || e.Value.(*thread) == keep {
			return
		}
		old := e.Value.(*thread)
		t.lru.Remove(e)
		for id := range old.ids {
			if t.byID[id] == old {
				delete(t.byID, id)
			}
		}
		t.bytes -= old.bytes
	}
}

// Known says whether the thread with this key (or holding a mail with
// this Message-ID) is in the cache. A daemon that finds it is not loads
// the thread's stored mails with Add first.
func (t *Threads) Known(key string) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.init()
	return t.byID[key] != nil
}

// Series assembles the series of the thread with this key (see Assemble);
// the result is kept until the thread changes. Callers must not change
// what it returns.
func (t *Threads) Series(key string) []*Series {
	t.mu.Lock()
	th := t.find(key)
	if th == nil {
		t.mu.Unlock()
		return nil
	}
	if th.series != nil {
		s := th.series
		t.mu.Unlock()
		return s
	}
	msgs := append([]*Message(nil), th.msgs...)
	t.mu.Unlock()
	series := Assemble(msgs)
	if series == nil {
		series = []*Series{}
	}
	t.mu.Lock()
	if t.find(key) == th && len(th.msgs) == len(msgs) {
		th.series = series
	}
	t.mu.Unlock()
	return series
}

// Messages are the mails of the thread with this key, in the order added.
func (t *Threads) Messages(key string) []*Message {
	t.mu.Lock()
	defer t.mu.Unlock()
	if th := t.find(key); th != nil {
		return append([]*Message(nil), th.msgs...)
	}
	return nil
}

func (t *Threads) find(key string) *thread {
	t.init()
	th := t.byID[key]
	if th != nil {
		t.lru.MoveToFront(th.elem)
	}
	return th
}

// ThreadIDs are the Message-IDs a mail names: its own, In-Reply-To and
// References. A store that indexes mail by all of them finds a thread
// whole, whatever order the References are in.
func (m *Message) ThreadIDs() []string { return threadIDs(m) }

func threadIDs(m *Message) []string {
	ids := make([]string, 0, 2+len(m.References))
	if m.MessageID != "" {
		ids = append(ids, m.MessageID)
	}
	if m.InReplyTo != "" {
		ids = append(ids, m.InReplyTo)
	}
	return append(ids, m.References...)
}

func itoa(n int) string {
	var b [20]byte
	i := len(b)
	for {
		i--
		b[i] = byte('0' + n%10)
		n /= 10
		if n == 0 {
			return string(b[i:])
		}
	}
}
