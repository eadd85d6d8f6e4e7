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
	"strings"
	"sync"
	"time"
)

// Lore reads a public-inbox archive (lore.kernel.org and its mirrors) over
// HTTP, in one of three ways:
//   - one thread by Message-ID, from <list>/<msgid>/t.mbox.gz; the thread is
//     read whole on every Poll (assembly drops mails seen twice);
//   - a list, by the archive's own log (with a Mirror, as the daemon runs
//     it): the list's git epochs (<list>/git/N.git, listed in
//     <list>/manifest.js.gz) are mirrored and fetched as they grow, and each
//     new commit is one mail, read in the archive's order. The cursor is the
//     last commit read per epoch (loregit.go);
//   - a list without git, or without a Mirror (the CLI), from its Atom feed
//     <list>/new.atom, paging back through the archive's search when the
//     feed shows only new mail, each entry fetched from <list>/<msgid>/raw.
//     The cursor is the Message-IDs delivered last (lorefeed.go). The feed is
//     ordered by a time the mail itself claims, so this path can miss mail
//     that git does not (docs/mailbox.md says when).
type Lore struct {
	List      *url.URL // e.g. https://lore.kernel.org/linux-fsdevel/
	MessageID string   // set to read one thread
	Client    *http.Client
	Logger    *slog.Logger
	// Mirror is the directory that holds the list's git epochs (the
	// daemon's default is STATE_DIR/lore/NAME). It is a cache: removed, it
	// is fetched again from the cursor. Empty: the list is read from its
	// Atom feed.
	Mirror string
	// Since is where a list is read from when there is no cursor yet:
	// "now", a date (2006-01-02) or an RFC 3339 time (ParseSince). Empty
	// is "now", except without a Mirror, where a first Poll delivers what
	// the feed shows (the CLI's view of a list's newest mail).
	Since string
	// FetchTimeout bounds one git fetch (0: 30 minutes).
	FetchTimeout time.Duration
	// SeenMax bounds the feed cursor: the Message-IDs of the last mails
	// delivered (0: 512).
	SeenMax int
	// MaxBacklog bounds how many entries one Poll of the feed pages back
	// through (0: 100,000).
	MaxBacklog int

	noGit sync.Once
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
	if l.Mirror == "" || strings.HasPrefix(cur, loreFeedPrefix) {
		return l.pollFeed(ctx, cur, fn)
	}
	epochs, err := l.manifest(ctx)
	if errors.Is(err, errNoGit) && !strings.HasPrefix(cur, loreGitPrefix) {
		l.noGit.Do(func() {
			logOr(l.Logger).Warn("the archive serves no git epochs for this list: following its Atom feed, "+
				"which orders mail by the time it claims and can miss some (see docs/mailbox.md)", "list", l.List.String())
		})
		return l.pollFeed(ctx, cur, fn)
	}
	if err != nil {
		return cur, err
	}
	return l.pollGit(ctx, epochs, cur, fn)
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
// may name another).
func (l *Lore) raw(ctx context.Context, link string) ([]byte, error) {
	return l.rawByID(ctx, linkKey(link))
}

// rawByID fetches <list>/<msgid>/raw. public-inbox serves it in mboxrd
// form: a "From mboxrd@z ..." line first, and ">From " lines quoted.
func (l *Lore) rawByID(ctx context.Context, id string) ([]byte, error) {
	link := url.PathEscape(id) + "/"
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
