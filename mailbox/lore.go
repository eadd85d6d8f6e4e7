package mailbox

import (
	"compress/gzip"
	"context"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"time"
)

// Lore reads a public-inbox archive (lore.kernel.org and its mirrors) over
// HTTP, in one of two ways:
//   - one thread by Message-ID, from <list>/<msgid>/t.mbox.gz; the thread is
//     read whole on every Poll (assembly drops mails seen twice);
//   - a list's new mail from its Atom feed <list>/new.atom, each entry
//     fetched from <list>/<msgid>/raw. The feed shows only the newest
//     entries (25 on public-inbox): when every entry is new, more may have
//     come since the last Poll than it shows, and Poll pages back through
//     a search of what the archive received since then
//     (<list>/?q=rt:SINCE..&x=A&o=N) until it has everything.
//
// The list cursor is a seenSet over (received time, Message-ID): what
// was delivered within SeenWindow of the newest entry, so that a mail the
// archive shows late, with an earlier time, is still read once.
type Lore struct {
	List      *url.URL // e.g. https://lore.kernel.org/linux-fsdevel/
	MessageID string   // set to read one thread
	Client    *http.Client
	Logger    *slog.Logger
	// SeenWindow: 0 means an hour. SeenMax bounds the set (0: 4096).
	SeenWindow time.Duration
	SeenMax    int
	// MaxBacklog bounds how many entries one Poll pages back through
	// (0: 100,000).
	MaxBacklog int
}

var _ Source = (*Lore)(nil)

// NewLore takes a list URL (https://lore.kernel.org/linux-fsdevel/) or a
// message URL (https://lore.kernel.org/linux-fsdevel/<msgid>/, optionally
// ending in t.mbox.gz, raw, T/ or t/).
func NewLore(rawURL string) (*Lore, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return nil, fmt.Errorf("parsing lore URL: %w", err)
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return nil, fmt.Errorf("lore URL %q: scheme must be http or https", rawURL)
	}
	var segs []string
	for _, s := range strings.Split(strings.Trim(u.EscapedPath(), "/"), "/") {
		if s == "" {
			continue
		}
		d, err := url.PathUnescape(s)
		if err != nil {
			return nil, fmt.Errorf("lore URL %q: %w", rawURL, err)
		}
		segs = append(segs, d)
	}
	// Drop what follows a Message-ID: t.mbox.gz, raw, T, t, ...
	for len(segs) > 2 {
		segs = segs[:len(segs)-1]
	}
	if len(segs) == 2 && (segs[1] == "new.atom" || segs[1] == "") {
		segs = segs[:1]
	}
	l := &Lore{}
	base := *u
	base.RawQuery, base.Fragment = "", ""
	switch len(segs) {
	case 0:
		return nil, fmt.Errorf("lore URL %q names no list", rawURL)
	case 2:
		l.MessageID = segs[1]
	}
	base.Path = "/" + segs[0] + "/"
	base.RawPath = ""
	l.List = &base
	return l, nil
}

func (l *Lore) client() *http.Client {
	if l.Client == nil {
		return &http.Client{Timeout: 2 * time.Minute}
	}
	return l.Client
}

func (l *Lore) Poll(ctx context.Context, cur string, fn func(*Message, string) error) (string, error) {
	if l.MessageID != "" {
		return cur, l.pollThread(ctx, fn)
	}
	return l.pollFeed(ctx, cur, fn)
}

func (l *Lore) get(ctx context.Context, ref string) (*http.Response, error) {
	// ref is relative to the list and already escaped ("<msgid>/raw",
	// "?q=..."); "./" keeps a ':' in a Message-ID from reading as a scheme.
	rel, err := url.Parse("./" + ref)
	if strings.HasPrefix(ref, "?") {
		rel, err = &url.URL{RawQuery: ref[1:]}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("lore path %q: %w", ref, err)
	}
	u := l.List.ResolveReference(rel)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return nil, err
	}
	resp, err := l.client().Do(req)
	if err != nil {
		return nil, fmt.Errorf("fetching %s: %w", u, err)
	}
	if resp.StatusCode == http.StatusNotFound {
		resp.Body.Close()
		return nil, &notFound{u.String()}
	}
	if resp.StatusCode != http.StatusOK {
		resp.Body.Close()
		return nil, fmt.Errorf("fetching %s: %s", u, resp.Status)
	}
	return resp, nil
}

type notFound struct{ url string }

func (e *notFound) Error() string { return "fetching " + e.url + ": 404 Not Found" }

func (l *Lore) pollThread(ctx context.Context, fn func(*Message, string) error) error {
	resp, err := l.get(ctx, url.PathEscape(l.MessageID)+"/t.mbox.gz")
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	zr, err := gzip.NewReader(resp.Body)
	if err != nil {
		return fmt.Errorf("reading thread %s: %w", l.MessageID, err)
	}
	// A whole thread, decompressed, is bounded too: a small gzip can
	// inflate without end.
	return ReadMbox(io.LimitReader(zr, 1<<30), func(raw []byte, off int64) error {
		m, err := ParseBytes(raw)
		if err != nil {
			logOr(l.Logger).Warn("skipping mail that cannot be parsed", "thread", l.MessageID, "offset", off, "err", err)
			return nil
		}
		return fn(m, "")
	})
}

// atomFeed is the part of public-inbox's Atom feed we read.
type atomFeed struct {
	Entries []struct {
		Updated string `xml:"updated"`
		Links   []struct {
			Href string `xml:"href,attr"`
		} `xml:"link"`
	} `xml:"entry"`
}

// feedEntry is one Atom entry: public-inbox's <updated> is the time the
// archive received the mail (its Received: header, else Date:), the same
// time new.atom sorts by and rt: searches.
type feedEntry struct {
	updated time.Time
	link    string
	key     string // the Message-ID in the link
}

const loreCursorPrefix = "lore1:"

// searchPage is public-inbox's page size for search results.
const searchPage = 200

func (l *Lore) pollFeed(ctx context.Context, cur string, fn func(*Message, string) error) (string, error) {
	window := l.SeenWindow
	if window == 0 {
		window = time.Hour
	}
	set := newSeenSet(loreCursorPrefix, window, l.SeenMax)
	ok, err := set.parse(cur)
	if err != nil {
		return cur, fmt.Errorf("lore cursor: %w", err)
	}
	seen := set.seen
	if !ok && cur != "" {
		// An older patchbot's "RFC3339 time|link" of the newest entry.
		ts, link, _ := strings.Cut(cur, "|")
		t, err := time.Parse(time.RFC3339Nano, ts)
		if err != nil {
			return cur, fmt.Errorf("lore cursor %q is damaged", cur)
		}
		set.low = t.Unix()
		seen = func(u int64, key string) bool {
			return u < t.Unix() || u == t.Unix() && key <= linkKey(link)
		}
	}
	entries, err := l.feed(ctx, "new.atom")
	if err != nil {
		return cur, err
	}
	byKey := map[string]feedEntry{}
	gap := len(entries) > 0 && cur != ""
	for _, e := range entries {
		if seen(e.updated.Unix(), e.key) {
			gap = false // the feed reaches back to what we have
			continue
		}
		byKey[e.key] = e
	}
	if gap {
		// Everything the feed shows is new: more may have come than it
		// shows. Page back through a search of what was received since.
		logOr(l.Logger).Info("more new mail than the list feed shows; paging back through the archive",
			"list", l.List.String(), "since", time.Unix(set.low, 0).UTC())
		for o := 0; ; o += searchPage {
			q := url.Values{"q": {fmt.Sprintf("rt:%d..", set.low)}, "x": {"A"}, "o": {strconv.Itoa(o)}}
			page, err := l.feed(ctx, "?"+q.Encode())
			if err != nil {
				if ctx.Err() != nil {
					return cur, err
				}
				// An archive without search: deliver what the feed has
				// rather than stall on every Poll, and say what may be lost.
				logOr(l.Logger).Error("cannot page back through the archive; mail received since may be missed",
					"list", l.List.String(), "since", time.Unix(set.low, 0).UTC(), "err", err)
				break
			}
			for _, e := range page {
				if !seen(e.updated.Unix(), e.key) {
					byKey[e.key] = e
				}
			}
			if len(page) < searchPage {
				break
			}
			if o >= l.maxBacklog() {
				logOr(l.Logger).Warn("stopped paging back through the archive", "list", l.List.String(), "entries", o+len(page))
				break
			}
		}
	}
	fresh := make([]feedEntry, 0, len(byKey))
	for _, e := range byKey {
		fresh = append(fresh, e)
	}
	sort.Slice(fresh, func(i, j int) bool {
		if !fresh[i].updated.Equal(fresh[j].updated) {
			return fresh[i].updated.Before(fresh[j].updated)
		}
		return fresh[i].key < fresh[j].key
	})
	for _, e := range fresh {
		raw, err := l.raw(ctx, e.link)
		if err != nil {
			return cur, err
		}
		set.add(e.updated.Unix(), e.key)
		cur = set.String()
		m, err := ParseBytes(raw)
		if err != nil {
			logOr(l.Logger).Warn("skipping mail that cannot be parsed", "link", e.link, "err", err)
			continue
		}
		if err := fn(m, cur); err != nil {
			return cur, err
		}
	}
	return cur, nil
}

func (l *Lore) maxBacklog() int {
	if l.MaxBacklog > 0 {
		return l.MaxBacklog
	}
	return 100000
}

// feed reads an Atom feed: new.atom, or a search's "?q=...&x=A". A search
// without results answers 404: no entries.
func (l *Lore) feed(ctx context.Context, ref string) ([]feedEntry, error) {
	resp, err := l.get(ctx, ref)
	if err != nil {
		var nf *notFound
		if strings.HasPrefix(ref, "?") && errors.As(err, &nf) {
			return nil, nil
		}
		return nil, err
	}
	defer resp.Body.Close()
	var feed atomFeed
	dec := xml.NewDecoder(io.LimitReader(resp.Body, 64<<20))
	// public-inbox declares us-ascii (non-ASCII is escaped as entities).
	dec.CharsetReader = func(charset string, in io.Reader) (io.Reader, error) {
		switch strings.ToLower(charset) {
		case "us-ascii", "ascii", "utf-8":
			return in, nil
		}
		return nil, fmt.Errorf("Atom feed in unsupported charset %q", charset)
	}
	if err := dec.Decode(&feed); err != nil {
		return nil, fmt.Errorf("reading Atom feed %s of %s: %w", ref, l.List, err)
	}
	var out []feedEntry
	for _, e := range feed.Entries {
		if len(e.Links) == 0 {
			continue
		}
		t, err := time.Parse(time.RFC3339, strings.TrimSpace(e.Updated))
		if err != nil {
			logOr(l.Logger).Warn("Atom entry with a bad updated time", "updated", e.Updated, "err", err)
			continue
		}
		link := e.Links[0].Href
		out = append(out, feedEntry{t, link, linkKey(link)})
	}
	return out, nil
}

// linkKey is the Message-ID of a message link ".../list/<msgid>/"), so that
// the feed's and a search's links for one mail are one key.
func linkKey(link string) string {
	u, err := url.Parse(link)
	if err != nil {
		return link
	}
	p := strings.TrimSuffix(u.EscapedPath(), "/")
	seg := p[strings.LastIndexByte(p, '/')+1:]
	if id, err := url.PathUnescape(seg); err == nil && id != "" {
		return id
	}
	return link
}

// raw fetches one message from the list, by the Message-ID in the feed's
// link: the link's own host is not trusted (nor needed: behind a proxy it
// may name another). public-inbox serves /raw in mboxrd form: a
// "From mboxrd@z ..." line first, and ">From " lines quoted.
func (l *Lore) raw(ctx context.Context, link string) ([]byte, error) {
	link = url.PathEscape(linkKey(link)) + "/"
	resp, err := l.get(ctx, link+"raw")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var raw []byte
	err = ReadMbox(io.LimitReader(resp.Body, DefaultLimits.MaxSize+64<<10), func(b []byte, _ int64) error {
		if raw == nil {
			raw = b
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("reading %sraw: %w", link, err)
	}
	return raw, nil
}
