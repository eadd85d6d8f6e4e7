//go:build linux && amd64

package main

import (
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/patchbot/patchbot/internal/testenv"
)

// date(1), which reads the clock through glibc and the vDSO, sees the
// shifted clock, both ways; its exit status comes back.
func TestSkewsTheWallClock(t *testing.T) {
	testenv.Tools(t, "date")
	for _, off := range []time.Duration{-10 * time.Minute, 3 * time.Hour} {
		r, w, err := os.Pipe()
		if err != nil {
			t.Fatal(err)
		}
		code := run(off, []string{"date", "+%s"}, []uintptr{0, w.Fd(), 2})
		w.Close()
		out := make([]byte, 64)
		n, _ := r.Read(out)
		r.Close()
		got, err := strconv.ParseInt(strings.TrimSpace(string(out[:n])), 10, 64)
		if code != 0 || err != nil {
			t.Fatalf("offset %s: exit %d, output %q", off, code, out[:n])
		}
		if d := time.Unix(got, 0).Sub(time.Now().Add(off)); d < -5*time.Second || d > 5*time.Second {
			t.Errorf("offset %s: date said %s, %s away from the shifted clock", off, time.Unix(got, 0).UTC(), d)
		}
	}
	if code := run(0, []string{"false"}, []uintptr{0, 1, 2}); code != 1 {
		t.Errorf("false under skewclock exited %d, want 1", code)
	}
}
