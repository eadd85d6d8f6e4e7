package intake

import (
	"container/list"
	"context"
	"encoding/json"
	"sync"
	"time"

	"github.com/patchbot/patchbot/mailbox"
	"github.com/patchbot/patchbot/store"
)

// Known is what the store already knows, as the front desk reads it:
// read-only, inside the transaction that will apply the desk's decision,
// so that what it read is still true when the decision commits. View is
// the real one; the tests' is a map.
type Known interface {
	// ThreadOf is the thread of the first of ids that is a kept mail, in
	// the order given, or "" when none is kept.
	ThreadOf(ctx context.Context, ids []string) (string, error)
	// KeptMail is the mail kept in a thread, in the order seen.
	KeptMail(ctx context.Context, thread string) ([]Kept, error)
	// OptOutOf says whether an address opted out, and whether by a
	// verified "stop".
	OptOutOf(ctx context.Context, addr string) (out, verified bool, err error)
	// CommandCounts counts a sender's commands since a time: those of the
	// verified sender, or those of mail only claiming the address.
	CommandCounts(ctx context.Context, sender string, verified bool, since time.Time) (store.CommandCounts, error)
	// OutboxSince counts the mails of a budget ("" or
	// store.BudgetUnverified) queued since a time, in a thread or, for "",
	// in all.
	OutboxSince(ctx context.Context, thread, budget string, since time.Time) (int, error)
	// DedupesWithPrefix lists the keys of the jobs whose key starts with
	// prefix (the candidates for one claim: SeriesClaim).
	DedupesWithPrefix(ctx context.Context, prefix string) ([]string, error)
}

// Kept is a kept mail: the name it is kept under, the source it was
// first read from, and the mail parsed, with who sent it as verified when
// it came (its Attestation is the store's word, not its own).
type Kept struct {
	ID      string
	Source  string
	Message *mailbox.Message
}

// View is Known over a store transaction, parsing kept mail through a
// cache shared by the mails of every transaction.
type View struct {
	*store.Tx
	Parsed *ParseCache
}

var _ Known = View{}

// KeptMail parses the thread's kept mail; a kept mail that no longer
// parses (it was parsed once already) is left out.
func (v View) KeptMail(ctx context.Context, thread string) ([]Kept, error) {
	stored, err := v.Tx.Thread(ctx, thread)
	if err != nil {
		return nil, err
	}
	var out []Kept
	for _, sm := range stored {
		parsed, err := v.Parsed.get(sm.MessageID, sm.Raw)
		if err != nil {
			continue
		}
		// A copy: the parsed mail is shared, the attestation is the
		// store's word for this mail.
		m := *parsed
		m.Attestation = nil
		if len(sm.Attestation) > 0 {
			var a mailbox.Attestation
			if json.Unmarshal(sm.Attestation, &a) == nil {
				m.Attestation = &a
			}
		}
		out = append(out, Kept{ID: sm.MessageID, Source: sm.Source, Message: &m})
	}
	return out, nil
}

// ParseCache keeps the parsed form of kept mail, so that a busy thread is
// not parsed again from its raw bytes at every new mail in it. It holds at
// most Max bytes of raw mail, the least recently used going first.
type ParseCache struct {
	Max int64

	mu    sync.Mutex
	size  int64
	byKey map[string]*list.Element
	order *list.List // front: most recently used
}

type parsedEntry struct {
	key string
	m   *mailbox.Message
	n   int64
}

// get returns the parsed mail kept under key, parsing raw the first time.
func (c *ParseCache) get(key string, raw []byte) (*mailbox.Message, error) {
	c.mu.Lock()
	if c.byKey == nil {
		c.byKey, c.order = map[string]*list.Element{}, list.New()
	}
	if e, ok := c.byKey[key]; ok && e.Value.(*parsedEntry).n == int64(len(raw)) {
		c.order.MoveToFront(e)
		m := e.Value.(*parsedEntry).m
		c.mu.Unlock()
		return m, nil
	}
	c.mu.Unlock()
	m, err := mailbox.ParseBytes(raw)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if e, ok := c.byKey[key]; ok {
		c.size -= e.Value.(*parsedEntry).n
		c.order.Remove(e)
	}
	c.byKey[key] = c.order.PushFront(&parsedEntry{key: key, m: m, n: int64(len(raw))})
	c.size += int64(len(raw))
	for c.size > c.Max && c.order.Len() > 1 {
		last := c.order.Back()
		ent := last.Value.(*parsedEntry)
		c.order.Remove(last)
		delete(c.byKey, ent.key)
		c.size -= ent.n
	}
	return m, nil
}
