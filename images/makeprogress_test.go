package images

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestIsKbuildStep(t *testing.T) {
	for _, c := range []struct {
		line string
		want bool
	}{
		{"  CC      fs/squashfs/cache.o", true},
		{"  CC [M]  fs/squashfs/cache.o", true},
		{"  HOSTCC  scripts/basic/fixdep", true},
		{"  LD      vmlinux.o", true},
		{"  OBJCOPY arch/x86/boot/setup.bin", true},
		{"  GEN     Makefile", true},
		{"  CC", false},           // no target
		{"   CC      x.o", false}, // three spaces: not kbuild's
		{"CC      x.o", false},
		{"  cc      x.o", false},
		{"  3C      x.o", false},
		{"  CCx.o", false},
		{"fs/squashfs/cache.c:12:3: warning: unused variable 'x'", false},
		{"", false},
		{"make[2]: Leaving directory '/build'", false},
	} {
		if got := isKbuildStep(c.line); got != c.want {
			t.Errorf("isKbuildStep(%q) = %v, want %v", c.line, got, c.want)
		}
	}
}

func TestMakeStatus(t *testing.T) {
	for _, c := range []struct {
		n, expected int
		elapsed     time.Duration
		want        string
	}{
		{250, 1000, 60 * time.Second, "250 of 1000 steps (25%), 1m0s in, about 3m0s left"},
		{0, 1000, 5 * time.Second, "0 of 1000 steps, 5s in"},
		{1200, 1000, 300 * time.Second, "1200 steps, past the 1000 of the last build of this config, 5m0s in"},
		{42, 0, 20 * time.Second, "42 steps, 20s in (no earlier build of this config to estimate the rest from)"},
	} {
		if got := makeStatus(c.n, c.expected, c.elapsed); got != c.want {
			t.Errorf("makeStatus(%d, %d, %v) = %q, want %q", c.n, c.expected, c.elapsed, got, c.want)
		}
	}
}

// The estimate comes from the newest complete base build of the same
// config; a record without Steps is counted from its log.
func TestLastSteps(t *testing.T) {
	kernels := t.TempDir()
	write := func(dir string, bd Build, log string, age time.Duration) {
		t.Helper()
		d := filepath.Join(kernels, dir)
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		// A complete build has its bzImage; loadBuild, which reads the
		// records, skips one without.
		bd.BzImage = filepath.Join(d, "bzImage")
		if err := os.WriteFile(bd.BzImage, []byte("kernel"), 0o644); err != nil {
			t.Fatal(err)
		}
		data, _ := json.Marshal(bd)
		p := filepath.Join(d, infoFile)
		if err := os.WriteFile(p, data, 0o644); err != nil {
			t.Fatal(err)
		}
		if log != "" {
			if err := os.WriteFile(filepath.Join(d, logFile), []byte(log), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		mt := time.Now().Add(-age)
		os.Chtimes(p, mt, mt)
	}
	if n := lastSteps(kernels, "cfg"); n != 0 {
		t.Fatalf("empty cache: %d steps, want 0", n)
	}
	if n := expectedSteps(kernels, "cfg"); n != 0 {
		t.Errorf("empty cache, another config: expected %d steps, want 0 (unknown)", n)
	}
	if n := expectedSteps(kernels, DefaultConfig().Hash()); n != defaultConfigSteps {
		t.Errorf("empty cache, the default config: expected %d steps, want defaultConfigSteps (%d)", n, defaultConfigSteps)
	}
	write("old", Build{ConfigHash: "cfg", Steps: 900}, "", 2*time.Hour)
	write("other-config", Build{ConfigHash: "other", Steps: 5}, "", time.Minute)
	write("patched", Build{ConfigHash: "cfg", Series: 1, Steps: 3}, "", time.Minute)
	if n := expectedSteps(kernels, "cfg"); n != 900 {
		t.Errorf("lastSteps = %d, want 900 (the only base build of the config)", n)
	}
	long := strings.Repeat("x", 3*maxLine) + "\n"
	log := "  HOSTCC  scripts/basic/fixdep\n" + long + "  CC      init/main.o\nwarning: x\n  LD [M]  fs/x.ko\n"
	write("newer-unrecorded", Build{ConfigHash: "cfg"}, log, time.Hour)
	if n := lastSteps(kernels, "cfg"); n != 3 {
		t.Errorf("lastSteps = %d, want 3 (the newer build, counted from its log)", n)
	}
	// A record whose bzImage is gone is no complete build to go by.
	write("newest-incomplete", Build{ConfigHash: "cfg", Steps: 7}, "", time.Second)
	os.Remove(filepath.Join(kernels, "newest-incomplete", "bzImage"))
	if n := lastSteps(kernels, "cfg"); n != 3 {
		t.Errorf("lastSteps = %d, want 3 (the newest complete build; an incomplete one is skipped)", n)
	}
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// While make writes its steps into the build log, the reporter says how
// many of the expected are done; after stop it writes nothing more.
func TestReportMake(t *testing.T) {
	f, err := os.Create(filepath.Join(t.TempDir(), "build.log"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	log := newBuildLog(f, 1<<20)
	var out syncBuffer
	stop := reportMake(&out, "base efb677222d3b", log, 100, 5*time.Millisecond)
	for i := 0; i < 50; i++ {
		fmt.Fprintf(log, "  CC      obj%d.o\n", i)
	}
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(out.String(), "50 of 100 steps (50%)") && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	stop()
	got := out.String()
	if !strings.Contains(got, "[base efb677222d3b] make bzImage: 50 of 100 steps (50%)") || !strings.Contains(got, "left") {
		t.Errorf("progress = %q, want a line with 50 of 100 steps and the time left", got)
	}
	if log.stepCount() != 50 {
		t.Errorf("stepCount = %d, want 50", log.stepCount())
	}
	time.Sleep(20 * time.Millisecond)
	if after := out.String(); after != got {
		t.Errorf("the reporter wrote after stop: %q", strings.TrimPrefix(after, got))
	}
	if stop := reportMake(nil, "x", log, 100, time.Millisecond); stop == nil {
		t.Error("reportMake(nil) returned no stop")
	}
}
