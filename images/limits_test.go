package images

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/patchbot/patchbot/blame"
)

// A patched build that stops at a limit is the patch's when its base kept
// within the same limit, and the machine's otherwise.
func TestCompareWithTheBase(t *testing.T) {
	base := &Build{Duration: 6 * time.Minute, Limits: &DefaultLimits, Timeout: 2 * time.Hour,
		Usage: &Usage{Output: 180 << 20, Memory: 800 << 20}}
	old := &Build{Duration: 6 * time.Minute, Usage: &Usage{Output: 180 << 20}} // a record from before limits were kept
	at := func(resource string, err error, u Usage) error {
		return &InfraError{Op: "make bzImage", Err: err, usage: &u, resource: resource}
	}
	tests := []struct {
		name     string
		base     *Build
		limits   Limits
		timeout  time.Duration
		err      error
		resource string // "" for the machine's
		says     string
	}{
		{"time", base, Limits{}, 0, at("time", ErrTimeout, Usage{}), "time", "finished in 6m0s"},
		{"time, outside make", base, Limits{}, 0, infra("patched", fmt.Errorf("%w: git am", ErrTimeout)), "time", ""},
		{"memory", base, Limits{}, 0, at("memory", fmt.Errorf("%w: cc1: out of memory", ErrOutOfMemory), Usage{}), "memory", "peaked at 800.0 MiB"},
		{"memory, a record from before", old, Limits{}, 0, at("memory", ErrOutOfMemory, Usage{}), "memory", ""},
		{"memory, less than the base peaked at", base, Limits{Memory: 512 << 20}, 0, at("memory", ErrOutOfMemory, Usage{}), "", ""},
		{"memory, less than the base had but more than it used", base, Limits{Memory: 1 << 30}, 0, at("memory", ErrOutOfMemory, Usage{}), "memory", ""},
		{"time, less than the base took", base, Limits{}, 5 * time.Minute, at("time", ErrTimeout, Usage{}), "", ""}, // the base took 6 minutes
		{"output, less than the base left", base, Limits{Output: 100 << 20}, 0, at("output", ErrOutput, Usage{Output: 200 << 20}), "", ""},
		{"processes", base, Limits{}, 0, at("processes", ErrLimit, Usage{}), "processes", ""},
		{"output", base, Limits{}, 0, at("output", ErrOutput, Usage{Output: 9 << 30, Files: 3100}), "output", "reached 9.0 GiB in 3100 files"},
		{"/tmp", base, Limits{}, 0, at("tmp", fmt.Errorf("%w: No space left on device", ErrNoSpace), Usage{}), "/tmp", "had room"},
		{"disk filled by the build", base, Limits{}, 0, at("disk", ErrNoSpace, Usage{Grew: 3 << 30, FreeAtStart: 3 << 30}), "disk", "it wrote 3.0 GiB"},
		{"disk short: the build wrote little", base, Limits{}, 0, at("disk", ErrNoSpace, Usage{Grew: 48 << 20, FreeAtStart: 48 << 20}), "", ""},
		{"killed from outside", base, Limits{}, 0, infra("make", fmt.Errorf("%w: by signal 9", ErrKilled)), "", ""},
		{"not a limit", base, Limits{}, 0, errors.New("git am: no such file"), "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := &Builder{Limits: tt.limits, Timeout: tt.timeout}
			l := b.compare(tt.base, tt.err, 0, 0)
			switch {
			case tt.resource == "" && l != nil:
				t.Fatalf("compare = %+v, want the machine's", l)
			case tt.resource == "":
				return
			case l == nil:
				t.Fatalf("compare = nil, want the %s limit", tt.resource)
			case l.Resource != tt.resource || !strings.Contains(l.String(), tt.says):
				t.Fatalf("compare = %q (%s), want %s saying %q", l, l.Resource, tt.resource, tt.says)
			}
			be := limitError(l, tt.err, "/log")
			if blame.Of(be) != blame.Patch || !errors.Is(be, errors.Unwrap(tt.err.(*InfraError).Err)) && !errors.Is(be, tt.err.(*InfraError).Err) {
				t.Errorf("limitError: blame %q, chain %v", blame.Of(be), be)
			}
			if !strings.HasPrefix(be.Lines[0], "patchbot: the build stopped at its "+tt.resource+" limit") {
				t.Errorf("first line %q", be.Lines[0])
			}
		})
	}
}

// A patched build's time limit comes from the host's cold build of its
// config: the longest base build of that config on record, times
// PatchedTimeFactor, at least PatchedTimeMin, at most the builder's own;
// past it the build is the patch's at once.
func TestPatchedTimeFromTheColdBuild(t *testing.T) {
	cache := t.TempDir()
	kernels := filepath.Join(cache, "kernels")
	record := func(key, hash string, series int, took time.Duration) *Build {
		dir := filepath.Join(kernels, key)
		if err := os.MkdirAll(dir, 0o700); err != nil {
			t.Fatal(err)
		}
		bd := &Build{Dir: dir, ConfigHash: hash, Series: series, Duration: took, BzImage: filepath.Join(dir, "bzImage"),
			Usage: &Usage{Duration: took}}
		if err := os.WriteFile(bd.BzImage, nil, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := saveBuild(bd); err != nil {
			t.Fatal(err)
		}
		return bd
	}
	record("cold", "h1", 0, 20*time.Minute)        // the first build of the config: cold
	warm := record("warm", "h1", 0, 2*time.Minute) // a later base, ccache warm
	record("other", "h2", 0, 50*time.Minute)       // another config
	record("patched", "h1", 1, 90*time.Minute)     // a patched build is no reference
	b := &Builder{Cache: cache}
	warm.Cached = true
	limit, cold := b.patchedTimeout(warm)
	if cold != 20*time.Minute || limit != 80*time.Minute {
		t.Errorf("limit %s from a cold build of %s, want 80m from 20m", limit, cold)
	}
	b.Timeout = time.Hour
	if limit, _ := b.patchedTimeout(warm); limit != time.Hour {
		t.Errorf("limit %s, want the builder's own hour", limit)
	}
	b.Timeout = 0
	fresh := record("fresh", "h3", 0, time.Minute)
	if limit, cold := b.patchedTimeout(fresh); limit != PatchedTimeMin || cold != time.Minute {
		t.Errorf("limit %s from %s, want the floor %s", limit, cold, PatchedTimeMin)
	}
	if limit, cold := b.patchedTimeout(&Build{ConfigHash: "none"}); limit != 2*time.Hour || cold != 0 {
		t.Errorf("without a record: limit %s from %s, want the builder's 2h", limit, cold)
	}
	err := &InfraError{Op: "make bzImage", Err: ErrTimeout, usage: &Usage{}, resource: "time"}
	l := b.compare(warm, err, 80*time.Minute, 20*time.Minute)
	if l == nil || !l.Once || !strings.Contains(l.String(), "a cold build of the whole kernel took 20m0s on this host") ||
		strings.Contains(l.String(), "twice") {
		t.Errorf("compare = %v", l)
	}
}
