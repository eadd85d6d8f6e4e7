package mailbox

import (
	"compress/gzip"
	"context"
	"encoding/xml"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"sort"
	"strings"
	"time"
)

// Lore reads a public-inbox archive (lore.kernel.org and its mirrors) over
// HTTP, in one of two ways:
//   - one thread by Message-ID, from <list>/<msgid>/t.mbox.gz; the thread is
//     read whole on every Poll (assembly drops mails seen twice);
//   - a list's new mail from its Atom feed <list>/new.atom, each entry
//     fetched from <list>/<msgid>/raw. The cursor is the "updated" time and
//     link of the newest entry delivered.
type Lore struct {
	List      *url.URL // e.g. https://lore.kernel.org/linux-fsdevel/
	MessageID string   // set to read one thread
	Client    *http.Client
	Logger    *slog.Logger
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
	u := l.List.ResolveReference(&url.URL{Path: ref})
	if strings.Contains(ref, "://") {
		var err error
		if u, err = url.Parse(ref); err != nil {
			return nil, fmt.Errorf("lore link %q: %w", ref, err)
		}
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return nil, err
	}
	resp, err := l.client().Do(req)
	if err != nil {
		return nil, fmt.Errorf("fetching %s: %w", u, err)
	}
	if resp.StatusCode != http.StatusOK {
		resp.Body.Close()
		return nil, fmt.Errorf("fetching %s: %s", u, resp.Status)
	}
	return resp, nil
}

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
	return ReadMbox(zr, func(raw []byte, off int64) error {
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

type feedEntry struct {
	updated time.Time
	link    string
}

// feedCursor is "RFC3339 time|link" of the newest entry delivered; entries
// that sort after it are new.
func (e feedEntry) cursor() string { return e.updated.UTC().Format(time.RFC3339Nano) + "|" + e.link }

func (e feedEntry) after(cur string) bool {
	if cur == "" {
		return true
	}
	ts, link, _ := strings.Cut(cur, "|")
	t, err := time.Parse(time.RFC3339Nano, ts)
	if err != nil {
		return true
	}
	if !e.updated.Equal(t) {
		return e.updated.After(t)
	}
	return e.link > link
}

func (l *Lore) pollFeed(ctx context.Context, cur string, fn func(*Message, string) error) (string, error) {
	resp, err := l.get(ctx, "new.atom")
	if err != nil {
		return cur, err
	}
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
	err = dec.Decode(&feed)
	resp.Body.Close()
	if err != nil {
		return cur, fmt.Errorf("reading Atom feed of %s: %w", l.List, err)
	}
	var entries []feedEntry
	for _, e := range feed.Entries {
		if len(e.Links) == 0 {
			continue
		}
		t, err := time.Parse(time.RFC3339, strings.TrimSpace(e.Updated))
		if err != nil {
			logOr(l.Logger).Warn("Atom entry with a bad updated time", "updated", e.Updated, "err", err)
			continue
		}
		fe := feedEntry{t, e.Links[0].Href}
		if fe.after(cur) {
			entries = append(entries, fe)
		}
	}
	sort.Slice(entries, func(i, j int) bool {
		if !entries[i].updated.Equal(entries[j].updated) {
			return entries[i].updated.Before(entries[j].updated)
		}
		return entries[i].link < entries[j].link
	})
	for _, e := range entries {
		link := e.link
		if !strings.HasSuffix(link, "/") {
			link += "/"
		}
		resp, err := l.get(ctx, link+"raw")
		if err != nil {
			return cur, err
		}
		raw, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
		resp.Body.Close()
		if err != nil {
			return cur, fmt.Errorf("reading %sraw: %w", link, err)
		}
		cur = e.cursor()
		m, err := ParseBytes(raw)
		if err != nil {
			logOr(l.Logger).Warn("skipping mail that cannot be parsed", "link", link, "err", err)
			continue
		}
		if err := fn(m, cur); err != nil {
			return cur, err
		}
	}
	return cur, nil
}
