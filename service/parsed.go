package service

import (
	"container/list"
	"sync"

	"github.com/patchbot/patchbot/mailbox"
)

// parsedMail keeps the parsed form of stored mail, so that a busy thread
// is not parsed again from its raw bytes on every new mail in it. It holds
// at most max bytes of raw mail, the least recently used going first.
type parsedMail struct {
	mu    sync.Mutex
	max   int64
	size  int64
	byKey map[string]*list.Element
	order *list.List // front: most recently used
}

type parsedEntry struct {
	key string
	m   *mailbox.Message
	n   int64
}

func newParsedMail(max int64) *parsedMail {
	return &parsedMail{max: max, byKey: map[string]*list.Element{}, order: list.New()}
}

// get returns the parsed mail kept under key, parsing raw the first time.
func (c *parsedMail) get(key string, raw []byte) (*mailbox.Message, error) {
	c.mu.Lock()
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
	for c.size > c.max && c.order.Len() > 1 {
		last := c.order.Back()
		ent := last.Value.(*parsedEntry)
		c.order.Remove(last)
		delete(c.byKey, ent.key)
		c.size -= ent.n
	}
	return m, nil
}
