package mailbox

import (
	"math/rand/v2"
	"testing"
)

func TestThreads(t *testing.T) {
	msgs := readFixture(t, "../testdata/mailbox/reroll.mbox")
	msgs = append(msgs, readFixture(t, "../testdata/b4/irt-before-refs.mbox")...)
	want := summary(Assemble(msgs))
	for seed := range uint64(20) {
		// Any arrival order gives the series Assemble gives on all of it.
		shuffled := append([]*Message(nil), msgs...)
		rand.New(rand.NewPCG(seed, 1)).Shuffle(len(shuffled), func(i, j int) { shuffled[i], shuffled[j] = shuffled[j], shuffled[i] })
		th := NewThreads(0)
		keys := map[string]bool{}
		for _, m := range shuffled {
			th.Add(m)
		}
		var got []*Series
		for _, m := range msgs {
			k := th.Add(m) // again: nothing is added twice
			if !keys[k] {
				keys[k] = true
				got = append(got, th.Series(k)...)
			}
		}
		if len(keys) != 2 {
			t.Fatalf("seed %d: %d threads, want 2", seed, len(keys))
		}
		// Assemble orders series by first mail; compare as sets.
		if g := summary(got); g != want && summary([]*Series{got[1], got[0]}) != want {
			t.Fatalf("seed %d: got\n%s\nwant\n%s", seed, g, want)
		}
	}
	// Series is kept until the thread changes.
	th := NewThreads(0)
	var k string
	for _, m := range msgs[:3] {
		k = th.Add(m)
	}
	a, b := th.Series(k), th.Series(k)
	if len(a) != 1 || a[0] != b[0] {
		t.Fatalf("series not kept: %v %v", a, b)
	}
	th.Add(msgs[3])
	if c := th.Series(k); len(c) != 1 || c[0] == a[0] {
		t.Fatalf("series not renewed after a new mail")
	}
}

func TestThreadsEvict(t *testing.T) {
	a := readFixture(t, "../testdata/b4/cover-trailers.mbox")
	b := readFixture(t, "../testdata/b4/naked-cover.mbox")
	size := int64(0)
	for _, m := range a {
		size += int64(len(m.Raw))
	}
	th := NewThreads(size + 100) // room for a, not for a and b
	ka := th.Add(a[0])
	for _, m := range a[1:] {
		th.Add(m)
	}
	if !th.Known(ka) || !th.Known("c-r2@demo.example") {
		t.Fatal("thread a unknown")
	}
	kb := ""
	for _, m := range b {
		kb = th.Add(m)
	}
	if th.Known(ka) || th.Known("c-r2@demo.example") || !th.Known(kb) {
		t.Fatalf("a known %v, b known %v: the least recent thread should be dropped", th.Known(ka), th.Known(kb))
	}
	if th.Series(ka) != nil || len(th.Series(kb)) != 1 {
		t.Fatal("series of a dropped / kept thread")
	}
}

// BenchmarkThreadsAdd is one new mail in a stored thread of 200 mails:
// the daemon's cost per mail with Threads (compare BenchmarkReparseThread).
func BenchmarkThreadsAdd(b *testing.B) {
	msgs := readFixture(b, "../testdata/mailbox/reroll.mbox")
	root := msgs[0]
	var thread []*Message
	for i := range 200 {
		m := *msgs[2]
		m.MessageID = "reply-" + itoa(i) + "@demo.example"
		m.Subject = "Re: " + root.Subject
		m.InReplyTo, m.References = root.MessageID, []string{root.MessageID}
		thread = append(thread, &m)
	}
	th := NewThreads(0)
	th.Add(root)
	for _, m := range thread {
		th.Add(m)
	}
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		m := *thread[0]
		m.MessageID = "new-" + itoa(i) + "@demo.example"
		i++
		th.Series(th.Add(&m))
	}
}

// BenchmarkReparseThread is what the daemon did per new mail before:
// parse the stored thread's 200 mails again and assemble.
func BenchmarkReparseThread(b *testing.B) {
	msgs := readFixture(b, "../testdata/mailbox/reroll.mbox")
	var raws [][]byte
	raws = append(raws, msgs[0].Raw)
	for range 200 {
		raws = append(raws, msgs[2].Raw)
	}
	b.ReportAllocs()
	for b.Loop() {
		var parsed []*Message
		for _, r := range raws {
			m, _ := ParseBytes(r)
			parsed = append(parsed, m)
		}
		Assemble(parsed)
	}
}
