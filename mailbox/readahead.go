package mailbox

import (
	"context"
	"sync"
)

// Verification has a budget: the DKIM keys of the mails a source hands
// over are looked up side by side, ahead of the mail being acted on
// (Verifier.Prefetch), while the mails are still acted on one at
// a time, in the source's order (the daemon's ingest, each mail in its own
// transaction). A
// stranger's key that never answers costs its own lookup's timeout once,
// concurrently with every other, instead of one timeout for each mail in
// turn; and a domain that did not answer is not asked again for a while.
// So a signed maintainer's command behind a thousand such mails waits
// about one timeout, not a thousand (docs/md, "Verification has a
// budget").

// The read-ahead's bounds: mails, and their bytes, handed over by the
// source and not yet acted on.
const (
	readAheadMails = 1024
	readAheadBytes = 64 << 20
)

// ReadAhead is one poll of a source, its mail acted on behind the reader.
type ReadAhead struct {
	// ctx is the poll's: it ends when the daemon stops or acting on a
	// mail failed, so that a source waiting for mail (IMAP IDLE) stops
	// too and the mail is read again from the cursor stored.
	ctx    context.Context
	cancel context.CancelFunc
	act    func(*Message, string) error
	verify *Verifier

	ch   chan pending
	done chan struct{}

	mu    sync.Mutex
	cond  *sync.Cond
	bytes int   // of the mails queued
	err   error // the first failure to act; nothing is acted on after it
}

type pending struct {
	m   *Message
	cur string
}

// NewReadAhead acts on each mail with act, in order, behind a reader that
// may run up to readAheadMails (and readAheadBytes) ahead and looks up
// their keys meanwhile (v nil: none). Hand the source Context and Take,
// then Wait.
func NewReadAhead(ctx context.Context, v *Verifier, act func(*Message, string) error) *ReadAhead {
	ctx, cancel := context.WithCancel(ctx)
	r := &ReadAhead{ctx: ctx, cancel: cancel, act: act, verify: v, ch: make(chan pending, readAheadMails), done: make(chan struct{})}
	r.cond = sync.NewCond(&r.mu)
	go r.run()
	return r
}

func (r *ReadAhead) run() {
	defer close(r.done)
	for p := range r.ch {
		r.mu.Lock()
		failed := r.err != nil
		r.mu.Unlock()
		var err error
		if !failed {
			err = r.act(p.m, p.cur)
		}
		r.mu.Lock()
		if err != nil && r.err == nil {
			r.err = err
			r.cancel()
		}
		r.bytes -= len(p.m.Raw)
		r.cond.Broadcast()
		r.mu.Unlock()
	}
}

// Context is the poll's, for the source: it ends when ctx does or acting
// on a mail failed.
func (r *ReadAhead) Context() context.Context { return r.ctx }

// Take is the source's callback: it starts the mail's key lookups and
// queues it, waiting while the queue is full; it returns the first
// failure to act on a mail before it (the source then stops: the mails
// after it are read again at the next poll, from the cursor stored with
// the last mail acted on).
func (r *ReadAhead) Take(m *Message, cur string) error {
	r.mu.Lock()
	for r.err == nil && r.bytes > 0 && r.bytes+len(m.Raw) > readAheadBytes && r.ctx.Err() == nil {
		r.cond.Wait()
	}
	err := r.err
	if err == nil {
		err = r.ctx.Err()
	}
	if err == nil {
		r.bytes += len(m.Raw)
	}
	r.mu.Unlock()
	if err != nil {
		return err
	}
	if r.verify != nil && m.Attestation == nil {
		r.verify.Prefetch(m)
	}
	select {
	case r.ch <- pending{m, cur}:
		return nil
	case <-r.ctx.Done():
		r.mu.Lock()
		r.bytes -= len(m.Raw)
		r.mu.Unlock()
		return r.ctx.Err()
	}
}

// Wait acts on what is queued and returns the first failure to act.
func (r *ReadAhead) Wait() error {
	close(r.ch)
	<-r.done
	r.cancel()
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.err
}
