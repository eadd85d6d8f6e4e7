package intake

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/patchbot/patchbot/mailbox"
	"github.com/patchbot/patchbot/store"
)

// fakeKnown is Known in memory, as the store would answer inside the
// mail's transaction: the kept mail by thread, the opt-outs, the commands
// logged, the mails queued and the jobs' keys. keep files a mail as
// service.Daemon.Ingest does (its thread, the replies kept under its ID
// moved into it).
type fakeKnown struct {
	kept     []fakeKept
	optOuts  map[string]bool // bare address: verified
	commands []store.Command
	mailed   []fakeMail
	dedupes  []string
}

type fakeKept struct {
	id, source, thread string
	m                  *mailbox.Message
}

type fakeMail struct {
	thread, budget string
	at             time.Time
}

var _ Known = (*fakeKnown)(nil)

func newFake() *fakeKnown { return &fakeKnown{optOuts: map[string]bool{}} }

// keep parses raw and keeps it as read from source, its sender verified
// by a DKIM signature of its From: domain when signed; it returns the
// mail as the desk gets it.
func (f *fakeKnown) keep(t *testing.T, source, raw string, signed bool) Mail {
	t.Helper()
	m, err := mailbox.ParseBytes([]byte(raw))
	if err != nil {
		t.Fatal(err)
	}
	from := mailbox.AddrOf(m.From)
	m.Attestation = &mailbox.Attestation{From: from}
	if signed {
		m.Attestation.Signatures = []mailbox.Signature{{Domain: mailbox.Domain(from), Result: mailbox.Pass, Aligned: true}}
	}
	th, err := ThreadOf(context.Background(), f, m)
	if err != nil {
		t.Fatal(err)
	}
	key := KeyOf(m)
	for i := range f.kept {
		if f.kept[i].thread == key {
			f.kept[i].thread = th
		}
	}
	f.kept = append(f.kept, fakeKept{id: key, source: source, thread: th, m: m})
	return Mail{Message: m, Key: key, Source: source, Thread: th, At: testNow}
}

func (f *fakeKnown) ThreadOf(_ context.Context, ids []string) (string, error) {
	for _, id := range ids {
		for _, k := range f.kept {
			if id != "" && k.id == id {
				return k.thread, nil
			}
		}
	}
	return "", nil
}

func (f *fakeKnown) KeptMail(_ context.Context, thread string) ([]Kept, error) {
	var out []Kept
	for _, k := range f.kept {
		if k.thread == thread {
			out = append(out, Kept{ID: k.id, Source: k.source, Message: k.m})
		}
	}
	return out, nil
}

func (f *fakeKnown) OptOutOf(_ context.Context, addr string) (bool, bool, error) {
	v, ok := f.optOuts[strings.ToLower(addr)]
	return ok, v, nil
}

func (f *fakeKnown) CommandCounts(_ context.Context, sender string, verified bool, since time.Time) (store.CommandCounts, error) {
	var c store.CommandCounts
	for _, d := range f.commands {
		if d.Sender != sender || d.Unverified == verified || d.At.Before(since) {
			continue
		}
		switch d.Outcome {
		case store.CommandRefused:
			c.Refusals++
			c.Counted++
		case store.CommandAccepted, store.CommandAnswered:
			c.Counted++
		}
	}
	return c, nil
}

func (f *fakeKnown) OutboxSince(_ context.Context, thread, budget string, since time.Time) (int, error) {
	n := 0
	for _, m := range f.mailed {
		if m.budget == budget && (thread == "" || m.thread == thread) && !m.at.Before(since) {
			n++
		}
	}
	return n, nil
}

func (f *fakeKnown) DedupesWithPrefix(_ context.Context, prefix string) ([]string, error) {
	var out []string
	for _, d := range f.dedupes {
		if strings.HasPrefix(d, prefix) {
			out = append(out, d)
		}
	}
	return out, nil
}

// apply records a decision as the store would: what a later mail's
// decision then knows.
func (f *fakeKnown) apply(d *Decision) {
	for _, a := range d.Answers {
		f.mailed = append(f.mailed, fakeMail{thread: a.Thread, budget: a.Budget, at: testNow})
	}
	for _, o := range d.OptOuts {
		f.optOuts[o.Address] = f.optOuts[o.Address] || o.Verified
	}
	for _, j := range d.Jobs {
		f.dedupes = append(f.dedupes, string(j.Dedupe))
	}
	f.commands = append(f.commands, d.Commands...)
}
