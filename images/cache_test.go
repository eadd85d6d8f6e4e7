package images

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"path/filepath"
	"testing"
	"time"
)

func TestLockFileWaitsForHolder(t *testing.T) {
	path := filepath.Join(t.TempDir(), "k.lock")
	ctx := context.Background()
	unlock, err := lockFile(ctx, path, nil)
	if err != nil {
		t.Fatal(err)
	}
	released := make(chan time.Time, 1)
	go func() {
		time.Sleep(500 * time.Millisecond)
		released <- time.Now()
		unlock()
	}()
	// A second holder (another test binary, in CI) waits, with no progress writer.
	unlock2, err := lockFile(ctx, path, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer unlock2()
	if got := time.Now(); got.Before(<-released) {
		t.Error("second lockFile returned while the first still held the lock")
	}

	short, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	if _, err := lockFile(short, path, nil); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("lockFile on a held lock with an ending context = %v, want deadline exceeded", err)
	}
}

// A build format bump must give every build a new key, and the format
// that was there before the number existed must keep the keys it had.
func TestBuildFormatIsInTheKey(t *testing.T) {
	inputs := [][]byte{[]byte("base"), []byte("0123abcd"), []byte("confighash"), []byte("gcc 12")}
	old := hashKey(inputs...)
	defer func(f int) { buildFormat = f }(buildFormat)
	buildFormat = 2
	if bumped := hashKey(inputs...); bumped == old {
		t.Fatalf("format 2 kept the key %s", old)
	}
	buildFormat = 1
	h := sha256.New()
	for _, p := range inputs {
		fmt.Fprintf(h, "%d\n", len(p))
		h.Write(p)
	}
	if want := hex.EncodeToString(h.Sum(nil))[:20]; old != want {
		t.Errorf("format 1's key %s is not the key made before the format existed (%s): every cached kernel would be rebuilt", old, want)
	}
}
