package store

import (
	"context"
	"testing"
	"time"
)

// Base rounds are kept per key, replaced when kept again, and survive a
// restart; a key never kept is not found.
func TestBaseRounds(t *testing.T) {
	eachEngine(t, func(t *testing.T, e engine) {
		ctx := context.Background()
		s, name := e.open(t)
		if _, _, ok, err := s.BaseRounds(ctx, "k1"); ok || err != nil {
			t.Fatalf("an empty store has base rounds: %v %v", ok, err)
		}
		at := time.Date(2026, 12, 3, 14, 0, 0, 0, time.UTC)
		if err := s.PutBaseRounds(ctx, "k1", []byte(`{"rounds":1}`), at); err != nil {
			t.Fatal(err)
		}
		if err := s.PutBaseRounds(ctx, "k1", []byte(`{"rounds":2}`), at.Add(time.Hour)); err != nil {
			t.Fatal(err)
		}
		if err := s.PutBaseRounds(ctx, "k2", []byte(`{"rounds":9}`), at); err != nil {
			t.Fatal(err)
		}
		s.Close()
		s = reopen(t, name)
		got, saved, ok, err := s.BaseRounds(ctx, "k1")
		if err != nil || !ok || string(got) != `{"rounds":2}` || !saved.Equal(at.Add(time.Hour)) {
			t.Errorf("k1: %q saved %v (%v, %v): want the second put", got, saved, ok, err)
		}
		if got, _, _, _ := s.BaseRounds(ctx, "k2"); string(got) != `{"rounds":9}` {
			t.Errorf("k2: %q", got)
		}
	})
}
