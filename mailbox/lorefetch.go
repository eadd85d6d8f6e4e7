package mailbox

import (
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"net/url"
	"strconv"
	"strings"
)

// Fetcher is a Source that can also fetch mail by Message-ID, out of its
// order: a public-inbox archive (Lore). Before the daemon tells a series'
// author that a patch never came, it asks the source for it.
type Fetcher interface {
	// FetchMissing asks the archive for the mails s lacks and delivers
	// each one it has. Finding none is not an error.
	FetchMissing(ctx context.Context, s *Series, fn func(*Message) error) error
}

var _ Fetcher = (*Lore)(nil)

// FetchMissing looks for a series' missing mails in the archive, cheapest
// first, each by its Message-ID (<list>/<msgid>/raw):
//   - the Message-IDs the missing patches would have, where the present
//     ones are numbered as git format-patch and b4 number them
//     (<stamp>-2-<who>@host for patch 2: the counter is renumbered);
//   - the Message-IDs the series' mails answer or reference and that are
//     not among them (a cover letter, a patch answered in a deep thread);
//
// and when a patch is still missing, the thread as the archive holds it
// (<list>/<root>/t.mbox.gz), every mail of it that the series lacks.
// What it delivers is for the caller to keep: a store that has a mail
// already knows it by its Message-ID.
func (l *Lore) FetchMissing(ctx context.Context, s *Series, fn func(*Message) error) error {
	have := map[string]bool{}
	var root string
	for _, m := range seriesMessages(s) {
		have[m.MessageID] = true
		if root == "" {
			root = m.MessageID
			if len(m.References) > 0 {
				root = m.References[0]
			} else if m.InReplyTo != "" {
				root = m.InReplyTo
			}
		}
	}
	var want []string
	asked := map[string]bool{}
	ask := func(id string) {
		if id != "" && !have[id] && !asked[id] {
			asked[id] = true
			want = append(want, id)
		}
	}
	for _, k := range s.Missing {
		for _, p := range s.Patches {
			if id, ok := renumberID(p.MessageID, p.Index, k); ok {
				ask(id)
				break
			}
		}
	}
	for _, m := range seriesMessages(s) {
		ask(m.InReplyTo)
		for _, r := range m.References {
			ask(r)
		}
	}
	found := map[int]bool{}
	for _, id := range want {
		raw, err := l.rawByID(ctx, id)
		var nf *notFound
		if errors.As(err, &nf) {
			continue
		}
		if err != nil {
			return err
		}
		m, err := ParseBytes(raw)
		if err != nil {
			logOr(l.Logger).Warn("skipping fetched mail that cannot be parsed", "message_id", id, "err", err)
			continue
		}
		have[m.MessageID] = true
		if sub := ParseSubject(m.Subject); !sub.Reply && sub.Total == s.Total {
			found[sub.Index] = true
		}
		if err := fn(m); err != nil {
			return err
		}
	}
	missing := false
	for _, k := range s.Missing {
		missing = missing || !found[k]
	}
	if !missing || root == "" {
		return nil
	}
	// The thread, as the archive has it.
	resp, err := l.get(ctx, url.PathEscape(root)+"/t.mbox.gz")
	var nf *notFound
	if errors.As(err, &nf) {
		return nil
	}
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	zr, err := gzip.NewReader(resp.Body)
	if err != nil {
		return fmt.Errorf("reading thread %s: %w", root, err)
	}
	return ReadMbox(io.LimitReader(zr, 1<<30), func(raw []byte, _ int64) error {
		m, err := ParseBytes(raw)
		if err != nil || have[m.MessageID] {
			return nil
		}
		have[m.MessageID] = true
		return fn(m)
	})
}

// seriesMessages are the mails a series holds: its cover letter, then its
// patches.
func seriesMessages(s *Series) []*Message {
	var out []*Message
	if s.Cover != nil {
		out = append(out, s.Cover)
	}
	for _, p := range s.Patches {
		if p.Message != nil {
			out = append(out, p.Message)
		}
	}
	return out
}

// renumberID makes the Message-ID that patch to of a series would have,
// from patch from's, when it is numbered as git format-patch
// (20261103101500.4242-2-ada@example.org) and b4
// (20261103-topic-v2-2-0a1b2c3d@example.org) number them: "-N-" before
// the sender's part. The last such counter in the local part is taken.
func renumberID(id string, from, to int) (string, bool) {
	local, host, ok := strings.Cut(id, "@")
	if !ok || from < 0 || to < 0 {
		return "", false
	}
	mark := "-" + strconv.Itoa(from) + "-"
	i := strings.LastIndex(local, mark)
	if i < 0 {
		return "", false
	}
	return local[:i] + "-" + strconv.Itoa(to) + "-" + local[i+len(mark):] + "@" + host, true
}
