package images

import (
	"context"
	"errors"
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
