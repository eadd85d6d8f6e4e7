package images

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// A cold build of the default kernel takes 4-13 minutes on two cores, so
// it says how far it is. Kbuild prints one line a step in its quiet mode
// ("  CC      fs/squashfs/cache.o", "  LD [M]  ..."); the same config
// takes the same steps, so the last complete build of that config says
// how many to expect, and the rate so far how long the rest will take.

// makeProgressEvery is how often a base build's make reports: often
// enough for a terminal, seldom enough for a daemon's log (a cold build
// is 10 to 40 lines).
const makeProgressEvery = 20 * time.Second

// isKbuildStep reports whether a line of make's output is one of kbuild's
// step lines: two spaces, a tag of capitals (CC, LD, AR, HOSTCC, GEN,
// OBJCOPY, ...), an optional " [M]", then spaces and a target.
func isKbuildStep(s string) bool {
	rest, ok := strings.CutPrefix(s, "  ")
	if !ok {
		return false
	}
	i := 0
	for i < len(rest) && (rest[i] >= 'A' && rest[i] <= 'Z' || rest[i] >= '0' && rest[i] <= '9' || rest[i] == '_') {
		i++
	}
	if i == 0 || rest[0] < 'A' || rest[0] > 'Z' {
		return false
	}
	rest = strings.TrimPrefix(rest[i:], " [M]")
	if len(rest) < 2 || rest[0] != ' ' {
		return false
	}
	return strings.TrimSpace(rest) != ""
}

// stepCount is how many kbuild steps the log has seen.
func (l *buildLog) stepCount() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.steps
}

// defaultConfigSteps is how many kbuild steps a cold build of the default
// config takes (1,686 on 2026-12-02, Debian's 6.1.192): what the first
// build on a fresh machine, with no earlier build of its own, estimates
// from. TestDefaultKernel fails when the default config changes the count
// by more than a tenth and this is not updated.
const defaultConfigSteps = 1686

// expectedSteps is what a base build of the config hash is expected to
// take: the newest earlier build of it in the cache, else, for the default
// config, defaultConfigSteps, else 0 (unknown).
func expectedSteps(kernels, configHash string) int {
	if n := lastSteps(kernels, configHash); n > 0 {
		return n
	}
	if configHash == DefaultConfig().Hash() {
		return defaultConfigSteps
	}
	return 0
}

// lastSteps is the number of kbuild steps of the newest complete base
// build of the config hash in the cache's kernels directory, or 0 when
// there is none.
func lastSteps(kernels, configHash string) int {
	ents, err := os.ReadDir(kernels)
	if err != nil {
		return 0
	}
	var best int
	var newest time.Time
	for _, e := range ents {
		if !e.IsDir() {
			continue
		}
		dir := filepath.Join(kernels, e.Name())
		bd, err := loadBuild(dir) // the cache's own reader: complete builds only
		if err != nil || bd.Series != 0 || bd.ConfigHash != configHash {
			continue
		}
		fi, err := os.Stat(filepath.Join(dir, infoFile))
		if err != nil {
			continue
		}
		n := bd.Steps
		if n == 0 {
			// A record from before steps were counted: count its log.
			n = logSteps(filepath.Join(dir, logFile))
		}
		if n > 0 && fi.ModTime().After(newest) {
			best, newest = n, fi.ModTime()
		}
	}
	return best
}

// logSteps counts the kbuild step lines of a build log (at most the
// sandbox's log limit, so bounded), or 0 when it cannot be read.
func logSteps(path string) int {
	f, err := os.Open(path)
	if err != nil {
		return 0
	}
	defer f.Close()
	r := bufio.NewReaderSize(f, maxLine)
	n, cont := 0, false
	for {
		line, more, err := r.ReadLine()
		if err != nil {
			return n
		}
		// The rest of a line longer than the buffer is not a line of its own.
		if !cont && isKbuildStep(string(line)) {
			n++
		}
		cont = more
	}
}

// reportMake writes a progress line every `every` while a build runs,
// until the returned stop is called: the steps done, of how many the last
// build of the config took, and the time left at the rate so far.
func reportMake(w io.Writer, name string, log *buildLog, expected int, every time.Duration) (stop func()) {
	if w == nil {
		return func() {}
	}
	start := time.Now()
	done := make(chan struct{})
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case now := <-t.C:
				fmt.Fprintf(w, "[%s] make bzImage: %s\n", name, makeStatus(log.stepCount(), expected, now.Sub(start)))
			}
		}
	}()
	return func() { close(done); <-finished }
}

// makeStatus says where a build is: "4123 of 9876 steps (41%), 2m10s in,
// about 3m7s left".
func makeStatus(n, expected int, elapsed time.Duration) string {
	in := elapsed.Round(time.Second)
	switch {
	case expected <= 0:
		return fmt.Sprintf("%d steps, %s in (no earlier build of this config to estimate the rest from)", n, in)
	case n == 0:
		return fmt.Sprintf("0 of %d steps, %s in", expected, in)
	case n >= expected:
		return fmt.Sprintf("%d steps, past the %d of the last build of this config, %s in", n, expected, in)
	}
	left := time.Duration(float64(elapsed) * float64(expected-n) / float64(n)).Round(time.Second)
	return fmt.Sprintf("%d of %d steps (%d%%), %s in, about %s left", n, expected, 100*n/expected, in, left)
}
