package mailbox

import (
	"encoding/base64"
	"encoding/binary"
	"fmt"
	"hash/fnv"
	"sort"
	"strconv"
	"strings"
	"time"
)

// seenSet is what a Maildir or a lore list feed has delivered, kept small
// enough to live in a cursor string. Every item has a time (a Maildir
// name's delivery time, an Atom entry's received time) and a key (the
// name, the link). Items older than low are taken as seen; newer ones are
// seen when their key's hash is in the set. low trails the newest item by
// window, so a mail that turns up late with a time up to window older than
// the newest one already delivered, or that sorts before it, is still
// read; and the set holds only what came within window, at most max items
// (past that, low moves up past the oldest ones).
//
// The cursor form is "<prefix><low>.<newest>.<base64 of (time delta, hash) pairs>".
type seenSet struct {
	prefix string
	window int64 // seconds
	max    int
	low    int64
	newest int64
	items  []seenItem // ascending by time
	index  map[uint64]bool
}

type seenItem struct {
	time int64
	hash uint64
}

func keyHash(key string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(key))
	return h.Sum64()
}

func newSeenSet(prefix string, window time.Duration, max int) *seenSet {
	if window <= 0 {
		window = time.Hour
	}
	if max <= 0 {
		max = 4096
	}
	return &seenSet{prefix: prefix, window: int64(window / time.Second), max: max, index: map[uint64]bool{}}
}

// parse reads a cursor written by String. ok is false when cur is not of
// this form (empty, or a cursor of an older patchbot).
func (s *seenSet) parse(cur string) (bool, error) {
	rest, ok := strings.CutPrefix(cur, s.prefix)
	if !ok || cur == "" {
		return false, nil
	}
	parts := strings.SplitN(rest, ".", 3)
	if len(parts) != 3 {
		return false, fmt.Errorf("cursor %q: want low.newest.set", cur)
	}
	low, err1 := strconv.ParseInt(parts[0], 10, 64)
	newest, err2 := strconv.ParseInt(parts[1], 10, 64)
	blob, err3 := base64.RawURLEncoding.DecodeString(parts[2])
	if err1 != nil || err2 != nil || err3 != nil {
		return false, fmt.Errorf("cursor %q is damaged", cur)
	}
	s.low, s.newest = low, newest
	for len(blob) > 0 {
		d, n := binary.Uvarint(blob)
		if n <= 0 || len(blob) < n+8 {
			return false, fmt.Errorf("cursor %q is damaged", cur)
		}
		h := binary.LittleEndian.Uint64(blob[n:])
		blob = blob[n+8:]
		s.items = append(s.items, seenItem{low + int64(d), h})
		s.index[h] = true
	}
	sort.SliceStable(s.items, func(i, j int) bool { return s.items[i].time < s.items[j].time })
	return true, nil
}

// seen says whether an item was delivered already.
func (s *seenSet) seen(t int64, key string) bool {
	return t < s.low || s.index[keyHash(key)]
}

// add records a delivered item. Items must come in ascending time within
// one Poll (late ones from an earlier Poll are fine): low never passes an
// item not yet delivered.
func (s *seenSet) add(t int64, key string) {
	h := keyHash(key)
	if s.index[h] {
		return
	}
	s.index[h] = true
	i := sort.Search(len(s.items), func(i int) bool { return s.items[i].time > t })
	s.items = append(s.items, seenItem{})
	copy(s.items[i+1:], s.items[i:])
	s.items[i] = seenItem{t, h}
	if t > s.newest {
		s.newest = t
	}
	low := max(s.low, s.newest-s.window)
	if n := len(s.items) - s.max; n > 0 {
		// Too many in the window: forget the oldest, but never past t.
		low = max(low, min(s.items[n].time, t))
	}
	s.low = low
	drop := 0
	for drop < len(s.items) && s.items[drop].time < low {
		delete(s.index, s.items[drop].hash)
		drop++
	}
	s.items = s.items[drop:]
}

func (s *seenSet) String() string {
	blob := make([]byte, 0, len(s.items)*11)
	for _, it := range s.items {
		blob = binary.AppendUvarint(blob, uint64(it.time-s.low))
		blob = binary.LittleEndian.AppendUint64(blob, it.hash)
	}
	return s.prefix + strconv.FormatInt(s.low, 10) + "." + strconv.FormatInt(s.newest, 10) + "." +
		base64.RawURLEncoding.EncodeToString(blob)
}
