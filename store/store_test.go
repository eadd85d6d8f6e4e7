package store

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"testing"
)

func open(t *testing.T) (*Store, string) {
	path := filepath.Join(t.TempDir(), "patchbot.db")
	s, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s, path
}

func TestMigrationsApplyOnce(t *testing.T) {
	s, path := open(t)
	ctx := context.Background()
	if v, err := s.Version(ctx); err != nil || v != len(migrations) {
		t.Fatalf("Version = %d, %v; want %d", v, err, len(migrations))
	}
	s.Close()
	// Reopening must not run step 1 again (it would fail: table exists).
	s2, err := Open(path)
	if err != nil {
		t.Fatalf("reopening: %v", err)
	}
	defer s2.Close()
	// A later step is applied on top of the existing schema.
	if err := s2.migrate(ctx, append(append([]string{}, migrations...), `CREATE TABLE seen (id TEXT PRIMARY KEY)`)); err != nil {
		t.Fatal(err)
	}
	if v, _ := s2.Version(ctx); v != len(migrations)+1 {
		t.Errorf("Version after an added step = %d, want %d", v, len(migrations)+1)
	}
	if err := s2.migrate(ctx, migrations[:0]); err == nil {
		t.Error("a database newer than the code was accepted")
	}
}

func TestOutboxLifecycle(t *testing.T) {
	s, _ := open(t)
	ctx := context.Background()
	m := OutboxMessage{MessageID: "a@x", From: "bot@x", Recipients: []string{"dev@y", "list@z"}, Raw: []byte("Subject: hi\r\n\r\nhi\r\n")}
	id, added, err := s.Enqueue(ctx, m)
	if err != nil || !added {
		t.Fatalf("Enqueue = %d, %v, %v", id, added, err)
	}
	if id2, added, err := s.Enqueue(ctx, m); err != nil || added || id2 != id {
		t.Fatalf("second Enqueue = %d, %v, %v; want the same id, not added", id2, added, err)
	}
	steps := []struct {
		from, to OutboxState
		pending  int
	}{
		{Queued, Sending, 1},
		{Sending, Queued, 1}, // a failed attempt goes back to the queue
		{Queued, Sending, 1},
		{Sending, Delivering, 0},
		{Delivering, Sent, 0},
	}
	for _, st := range steps {
		if err := s.Transition(ctx, id, st.from, st.to, ""); err != nil {
			t.Fatal(err)
		}
		p, err := s.Pending(ctx)
		if err != nil || len(p) != st.pending {
			t.Fatalf("after %s -> %s: Pending = %d, %v; want %d", st.from, st.to, len(p), err, st.pending)
		}
	}
	if err := s.Transition(ctx, id, Queued, Sending, ""); !errors.Is(err, ErrStateChanged) {
		t.Errorf("claiming a sent message: %v, want ErrStateChanged", err)
	}
	got, err := s.Message(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if got.State != Sent || got.Attempts != 2 || len(got.Recipients) != 2 || string(got.Raw) != string(m.Raw) {
		t.Errorf("message = %+v", got)
	}
}

func TestEnqueueRejectsIncomplete(t *testing.T) {
	s, _ := open(t)
	if _, _, err := s.Enqueue(context.Background(), OutboxMessage{MessageID: "a@x"}); err == nil {
		t.Error("an outbox message without recipients or body was accepted")
	}
}

// Each Enqueue is one durable commit (WAL, synchronous=FULL).
func BenchmarkEnqueue(b *testing.B) {
	s, err := Open(filepath.Join(b.TempDir(), "patchbot.db"))
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	raw := make([]byte, 8<<10) // a reply is a few KiB
	i := 0
	for b.Loop() {
		i++
		m := OutboxMessage{MessageID: fmt.Sprintf("bench-%d@x", i), From: "bot@x", Recipients: []string{"a@y"}, Raw: raw}
		if _, _, err := s.Enqueue(context.Background(), m); err != nil {
			b.Fatal(err)
		}
	}
}
