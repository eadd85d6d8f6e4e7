package store

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"
)

func TestMigrationsApplyOnce(t *testing.T) {
	eachEngine(t, func(t *testing.T, e engine) {
		s, path := e.open(t)
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
		if err := s2.migrate(ctx, append(append([]step{}, migrations...), step{sql: `CREATE TABLE seen (id TEXT PRIMARY KEY)`})); err != nil {
			t.Fatal(err)
		}
		if v, _ := s2.Version(ctx); v != len(migrations)+1 {
			t.Errorf("Version after an added step = %d, want %d", v, len(migrations)+1)
		}
		if err := s2.migrate(ctx, migrations[:0]); err == nil {
			t.Error("a database newer than the code was accepted")
		}
	})
}

func TestOutboxClaims(t *testing.T) {
	eachEngine(t, func(t *testing.T, e engine) {
		s, _ := e.open(t)
		ctx := context.Background()
		m := OutboxMessage{MessageID: "a@x", From: "bot@x", Recipients: []string{"dev@y", "list@z"}, Raw: []byte("Subject: hi\r\n\r\nhi\r\n")}
		id, added, err := s.Enqueue(ctx, m)
		if err != nil || !added {
			t.Fatalf("Enqueue = %d, %v, %v", id, added, err)
		}
		if id2, added, err := s.Enqueue(ctx, m); err != nil || added || id2 != id {
			t.Fatalf("second Enqueue = %d, %v, %v; want the same id, not added", id2, added, err)
		}
		now := time.Now()
		a, err := s.ClaimOutbox(ctx, "a", time.Minute, now)
		if err != nil || a.ID != id || a.State != Sending || a.Owner != "a" || a.Attempts != 1 {
			t.Fatalf("ClaimOutbox(a) = %+v, %v", a, err)
		}
		// Held: nobody else gets it while the lease runs.
		if _, err := s.ClaimOutbox(ctx, "b", time.Minute, now.Add(30*time.Second)); !errors.Is(err, ErrNoMessage) {
			t.Fatalf("ClaimOutbox(b) during a's lease: %v, want ErrNoMessage", err)
		}
		// a failed transiently: back in the queue, not before a minute.
		if err := s.MoveOutbox(ctx, id, "a", Sending, Queued, "timeout", now.Add(time.Minute)); err != nil {
			t.Fatal(err)
		}
		if _, err := s.ClaimOutbox(ctx, "b", time.Minute, now.Add(30*time.Second)); !errors.Is(err, ErrNoMessage) {
			t.Fatalf("ClaimOutbox before the retry time: %v, want ErrNoMessage", err)
		}
		b, err := s.ClaimOutbox(ctx, "b", time.Minute, now.Add(2*time.Minute))
		if err != nil || b.Owner != "b" || b.Attempts != 2 || b.LastError != "timeout" {
			t.Fatalf("ClaimOutbox(b) after the retry time = %+v, %v", b, err)
		}
		// b dies; after its lease c takes over, and b's late moves fail.
		c, err := s.ClaimOutbox(ctx, "c", time.Minute, now.Add(4*time.Minute))
		if err != nil || c.Owner != "c" {
			t.Fatalf("ClaimOutbox(c) after b's lease = %+v, %v", c, err)
		}
		if err := s.MoveOutbox(ctx, id, "b", Sending, Delivering, "", time.Time{}); !errors.Is(err, ErrStateChanged) {
			t.Errorf("a move by the owner who lost the lease: %v, want ErrStateChanged", err)
		}
		if err := s.MoveOutbox(ctx, id, "c", Sending, Delivering, "", time.Time{}); err != nil {
			t.Fatal(err)
		}
		// Delivering is never claimed again, whatever its lease says.
		if _, err := s.ClaimOutbox(ctx, "d", time.Minute, now.Add(time.Hour)); !errors.Is(err, ErrNoMessage) {
			t.Errorf("ClaimOutbox of a delivering message: %v, want ErrNoMessage", err)
		}
		if err := s.MoveOutbox(ctx, id, "c", Delivering, Sent, "", time.Time{}); err != nil {
			t.Fatal(err)
		}
		got, err := s.OutboxMessageByID(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if got.State != Sent || got.Owner != "" || got.Attempts != 3 || len(got.Recipients) != 2 || string(got.Raw) != string(m.Raw) {
			t.Errorf("message = %+v", got)
		}
		if sent, _ := s.OutboxIn(ctx, Sent); len(sent) != 1 {
			t.Errorf("OutboxIn(sent) = %d messages, want 1", len(sent))
		}
	})
}

// Two senders claiming at once never both get a message.
func TestOutboxClaimIsExclusive(t *testing.T) {
	eachEngine(t, func(t *testing.T, e engine) {
		s, _ := e.open(t)
		ctx := context.Background()
		const n = 40
		for i := 0; i < n; i++ {
			s.Enqueue(ctx, OutboxMessage{MessageID: fmt.Sprintf("m%d@x", i), From: "bot@x", Recipients: []string{"a@y"}, Raw: []byte("x")})
		}
		got := make(chan int64, 2*n)
		done := make(chan struct{})
		for _, owner := range []string{"a", "b"} {
			go func() {
				defer func() { done <- struct{}{} }()
				for {
					m, err := s.ClaimOutbox(ctx, owner, time.Hour, time.Now())
					if err != nil {
						return
					}
					got <- m.ID
				}
			}()
		}
		<-done
		<-done
		close(got)
		seen := map[int64]bool{}
		for id := range got {
			if seen[id] {
				t.Fatalf("message %d claimed twice", id)
			}
			seen[id] = true
		}
		if len(seen) != n {
			t.Errorf("claimed %d messages, want %d", len(seen), n)
		}
	})
}

func TestEnqueueRejectsIncomplete(t *testing.T) {
	eachEngine(t, func(t *testing.T, e engine) {
		s, _ := e.open(t)
		if _, _, err := s.Enqueue(context.Background(), OutboxMessage{MessageID: "a@x"}); err == nil {
			t.Error("an outbox message without recipients or body was accepted")
		}
	})
}

// A kept mail keeps who sent it, as verified when it came.
func TestMessageAttestation(t *testing.T) {
	eachEngine(t, func(t *testing.T, e engine) {
		s, _ := e.open(t)
		ctx := context.Background()
		err := s.Update(ctx, func(tx *Tx) error {
			for _, id := range []string{"a@x", "b@x"} {
				if _, err := tx.SaveMessage(ctx, "list", id, "a@x", []byte("mail "+id)); err != nil {
					return err
				}
			}
			return tx.SetAttestation(ctx, "b@x", []byte(`{"from":"dev@x"}`))
		})
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		s.Update(ctx, func(tx *Tx) error {
			ms, err := tx.Thread(ctx, "a@x")
			for _, m := range ms {
				got = append(got, m.MessageID+"="+string(m.Attestation))
			}
			return err
		})
		if want := `[a@x= b@x={"from":"dev@x"}]`; fmt.Sprint(got) != want {
			t.Errorf("thread %s, want %s", got, want)
		}
	})
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

// A delivery left "delivering" by a dead sender becomes uncertain once,
// when its lease has run out; the mail seen coming back on a source
// settles it as sent; a person can queue an uncertain one again.
func TestOutboxUncertain(t *testing.T) {
	eachEngine(t, func(t *testing.T, e engine) {
		s, _ := e.open(t)
		ctx := context.Background()
		at := time.Now()
		for _, id := range []string{"a@x", "b@x"} {
			if _, _, err := s.Enqueue(ctx, OutboxMessage{MessageID: id, From: "bot@x", Recipients: []string{"dev@y"},
				Raw: []byte("x"), ThreadID: "t@x"}); err != nil {
				t.Fatal(err)
			}
			m, err := s.ClaimOutbox(ctx, "dead", time.Minute, at)
			if err != nil {
				t.Fatal(err)
			}
			if err := s.MoveOutbox(ctx, m.ID, "dead", Sending, Delivering, "", time.Time{}); err != nil {
				t.Fatal(err)
			}
		}
		if un, _ := s.MarkUncertain(ctx, at); len(un) != 0 {
			t.Fatalf("marked %d uncertain while their leases run", len(un))
		}
		un, err := s.MarkUncertain(ctx, at.Add(2*time.Minute))
		if err != nil || len(un) != 2 || un[0].State != Uncertain {
			t.Fatalf("MarkUncertain = %+v, %v", un, err)
		}
		if again, _ := s.MarkUncertain(ctx, at.Add(3*time.Minute)); len(again) != 0 {
			t.Errorf("reported %d uncertain deliveries twice", len(again))
		}
		s.Update(ctx, func(tx *Tx) error {
			if ok, err := tx.SeenOutbox(ctx, "a@x"); !ok || err != nil {
				t.Errorf("SeenOutbox = %v, %v", ok, err)
			}
			if n, _ := tx.OutboxSince(ctx, "t@x", "", at.Add(-time.Minute)); n != 2 {
				t.Errorf("OutboxSince(thread) = %d, want 2", n)
			}
			if _, _, err := tx.Enqueue(ctx, OutboxMessage{MessageID: "c@x", From: "bot@x", Recipients: []string{"s@y"},
				Raw: []byte("x"), ThreadID: "t@x", Budget: BudgetUnverified}); err != nil {
				t.Fatal(err)
			}
			if n, _ := tx.OutboxSince(ctx, "t@x", BudgetUnverified, at.Add(-time.Minute)); n != 1 {
				t.Errorf("OutboxSince(thread, unverified) = %d, want 1", n)
			}
			if n, _ := tx.OutboxSince(ctx, "other@x", "", at.Add(-time.Minute)); n != 0 {
				t.Errorf("OutboxSince(other thread) = %d, want 0", n)
			}
			if n, _ := tx.OutboxSince(ctx, "", "", at.Add(time.Minute)); n != 0 {
				t.Errorf("OutboxSince(future) = %d, want 0", n)
			}
			return nil
		})
		if err := s.RequeueUncertain(ctx, un[1].ID); err != nil {
			t.Fatal(err)
		}
		ms, _ := s.OutboxIn(ctx, OutboxStates...)
		if len(ms) != 3 || ms[0].State != Sent || ms[1].State != Queued || ms[1].Owner != "" || ms[2].Budget != BudgetUnverified {
			t.Errorf("after seen and requeue: %+v", ms)
		}
		if err := s.RequeueUncertain(ctx, un[0].ID); !errors.Is(err, ErrStateChanged) {
			t.Errorf("requeueing a sent message: %v", err)
		}
	})
}

// A path with the characters a file: URI gives meaning to opens that file.
func TestOpenOddPath(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "run#1?x=%41")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	s, err := Open(filepath.Join(dir, "state.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.SaveMessage(context.Background(), "src", "7", "a@x", "a@x", []byte("mail")); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "state.db")); err != nil {
		t.Errorf("the database is not where asked: %v", err)
	}
	if _, err := os.Stat(filepath.Join(filepath.Dir(dir), "run")); err == nil {
		t.Error("a database named by the path's start was made")
	}
}
