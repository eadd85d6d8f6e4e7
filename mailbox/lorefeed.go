package mailbox

import (
	"context"
	"encoding/base64"
	"encoding/binary"
	"fmt"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"
)

// The Atom feed is the way to read a list whose archive serves no git
// (and the CLI's quick look at a list). public-inbox's new.atom shows the
// newest 25 entries, and its search pages through the rest 200 at a time,
// both ordered by the time the archive received each mail (its Received:
// header, else its Date:): a time the mail claims, not the order of
// arrival. So the cursor is not a time but the Message-IDs delivered
// last, and a Poll reads back from the newest entry until its page ends
// in mail it has seen.

// feedEntry is one Atom entry: public-inbox's <updated> is the time the
// archive received the mail (its Received: header, else Date:), the same
// time new.atom sorts by and rt: searches.
type feedEntry struct {
	updated time.Time
	link    string
	key     string // the Message-ID in the link
}

// loreCursorPrefix is the feed cursor of an older patchbot: a seenSet by
// received time (migrated, see legacySeen).
const loreCursorPrefix = "lore1:"

const loreFeedPrefix = "feed2:"

// searchPage is public-inbox's page size for search results.
const searchPage = 200

// feedCursor is what the feed path delivered last: the Message-IDs, as
// 64-bit FNV hashes, oldest first, at most max of them. The form is
// "feed2:" + base64 of the hashes (8 bytes each, little-endian).
type feedCursor struct {
	ids   []uint64
	index map[uint64]bool
	max   int
}

func newFeedCursor(max int) *feedCursor {
	if max <= 0 {
		max = 512
	}
	return &feedCursor{index: map[uint64]bool{}, max: max}
}

func (c *feedCursor) parse(cur string) error {
	rest, ok := strings.CutPrefix(cur, loreFeedPrefix)
	if !ok {
		return fmt.Errorf("lore cursor %q is not a feed cursor", cur)
	}
	blob, err := base64.RawURLEncoding.DecodeString(rest)
	if err != nil || len(blob)%8 != 0 {
		return fmt.Errorf("lore cursor %q is damaged", cur)
	}
	for ; len(blob) > 0; blob = blob[8:] {
		c.addHash(binary.LittleEndian.Uint64(blob))
	}
	return nil
}

func (c *feedCursor) has(id string) bool { return c.index[keyHash(id)] }

func (c *feedCursor) add(id string) { c.addHash(keyHash(id)) }

func (c *feedCursor) addHash(h uint64) {
	if c.index[h] {
		return
	}
	c.ids = append(c.ids, h)
	c.index[h] = true
	if n := len(c.ids) - c.max; n > 0 {
		for _, old := range c.ids[:n] {
			delete(c.index, old)
		}
		c.ids = slices.Delete(c.ids, 0, n)
	}
}

func (c *feedCursor) String() string {
	blob := make([]byte, 0, len(c.ids)*8)
	for _, h := range c.ids {
		blob = binary.LittleEndian.AppendUint64(blob, h)
	}
	return loreFeedPrefix + base64.RawURLEncoding.EncodeToString(blob)
}

// pollFeed reads a list's new mail from its Atom feed.
//
// With a cursor, the feed's entries that are not in it are new; when the
// feed's oldest entry is new too, more may have come than it shows, and
// Poll pages back through the archive's search (everything, newest first)
// until a page's oldest entry is one it delivered before. Without a
// cursor it starts at Since: "now" takes what the feed shows as read; a
// time reads what the archive received since (an rt: search); empty (the
// CLI) delivers what the feed shows. New entries are fetched from
// <msgid>/raw and delivered oldest first.
func (l *Lore) pollFeed(ctx context.Context, cur string, fn func(*Message, string) error) (string, error) {
	c := newFeedCursor(l.SeenMax)
	var legacy func(int64, string) bool
	switch {
	case cur == "":
	case strings.HasPrefix(cur, loreFeedPrefix):
		if err := c.parse(cur); err != nil {
			return cur, err
		}
	default:
		// An older patchbot's cursor: what it saw, by time and Message-ID,
		// counts as delivered.
		var err error
		if legacy, err = l.legacySeen(cur); err != nil {
			return cur, err
		}
	}
	seen := func(e feedEntry) bool {
		return c.has(e.key) || legacy != nil && legacy(e.updated.Unix(), e.key)
	}
	entries, err := l.feed(ctx, "new.atom")
	if err != nil {
		return cur, err
	}
	var fresh []feedEntry // newest first, as the archive lists them
	picked := map[string]bool{}
	pick := func(e feedEntry) {
		if !picked[e.key] {
			picked[e.key] = true
			fresh = append(fresh, e)
		}
	}
	var old []feedEntry // seen entries of the feed, for a migrated cursor
	switch {
	case cur == "" && l.Since == "now":
		old = entries
	case cur == "" && l.Since != "":
		since, err := ParseSince(l.Since)
		if err != nil {
			return cur, err
		}
		for _, e := range entries {
			if !e.updated.Before(since) {
				pick(e)
			}
		}
		if len(entries) > 0 && !entries[len(entries)-1].updated.Before(since) {
			if err := l.pageBack(ctx, fmt.Sprintf("rt:%d..", max(since.Unix(), 1)), func(page []feedEntry) bool {
				for _, e := range page {
					if !e.updated.Before(since) {
						pick(e)
					}
				}
				return false
			}); err != nil {
				return cur, err
			}
		}
	case cur == "":
		for _, e := range entries {
			pick(e)
		}
	default:
		for _, e := range entries {
			if seen(e) {
				old = append(old, e)
			} else {
				pick(e)
			}
		}
		if len(entries) > 0 && !seen(entries[len(entries)-1]) {
			// The feed's oldest entry is new: page back until we meet
			// mail delivered before.
			logOr(l.Logger).Info("more new mail than the list feed shows; paging back through the archive", "list", l.List.String())
			if err := l.pageBack(ctx, "z:0..", func(page []feedEntry) bool {
				for _, e := range page {
					if !seen(e) {
						pick(e)
					}
				}
				return len(page) > 0 && seen(page[len(page)-1])
			}); err != nil {
				return cur, err
			}
		}
	}
	if legacy != nil || cur == "" {
		// The overlap the next Poll meets: what the feed shows that was
		// read before (or, at "now", all of it).
		for i := len(old) - 1; i >= 0; i-- {
			c.add(old[i].key)
		}
	}
	for i := len(fresh) - 1; i >= 0; i-- {
		e := fresh[i]
		raw, err := l.raw(ctx, e.link)
		if err != nil {
			return cur, err
		}
		c.add(e.key)
		next := c.String()
		m, err := ParseBytes(raw)
		if err != nil {
			logOr(l.Logger).Warn("skipping mail that cannot be parsed", "link", e.link, "err", err)
			cur = next
			continue
		}
		if err := fn(m, next); err != nil {
			return cur, err // the last good cursor
		}
		cur = next
	}
	return c.String(), nil
}

// pageBack reads a search's Atom pages (newest first, searchPage at a
// time) until done says so, a page is short, or MaxBacklog entries were
// read. A search the archive cannot answer is logged and ends the paging:
// what was found is delivered rather than nothing, and the log says that
// mail may be missed.
func (l *Lore) pageBack(ctx context.Context, query string, done func([]feedEntry) bool) error {
	for o := 0; ; o += searchPage {
		q := url.Values{"q": {query}, "x": {"A"}, "o": {strconv.Itoa(o)}}
		page, err := l.feed(ctx, "?"+q.Encode())
		if err != nil {
			if ctx.Err() != nil {
				return err
			}
			logOr(l.Logger).Error("cannot page back through the archive; mail it received meanwhile may be missed",
				"list", l.List.String(), "query", query, "err", err)
			return nil
		}
		if done(page) || len(page) < searchPage {
			return nil
		}
		if o+len(page) >= l.maxBacklog() {
			logOr(l.Logger).Warn("stopped paging back through the archive", "list", l.List.String(), "entries", o+len(page))
			return nil
		}
	}
}

func (l *Lore) maxBacklog() int {
	if l.MaxBacklog > 0 {
		return l.MaxBacklog
	}
	return 100000
}
