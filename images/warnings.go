package images

import (
	"bufio"
	"bytes"
	"fmt"
	"regexp"
	"strings"
)

// Warning is one compiler warning from a build log.
type Warning struct {
	File    string // source path relative to the tree
	Line    int
	Message string
	Flag    string // e.g. "-Wunused-function"; empty when gcc gave none
}

func (w Warning) String() string {
	s := fmt.Sprintf("%s:%d: warning: %s", w.File, w.Line, w.Message)
	if w.Flag != "" {
		s += " [" + w.Flag + "]"
	}
	return s
}

// key is the warning without its line number: a patch that moves code
// shifts line numbers of warnings it did not add.
func (w Warning) key() string { return w.File + "\x00" + w.Message + "\x00" + w.Flag }

var (
	// ansiRe matches colour escapes, in case a compiler coloured its output.
	ansiRe    = regexp.MustCompile("\x1b\\[[0-9;]*[mK]")
	warningRe = regexp.MustCompile(`^(\S+?):(\d+):(?:\d+:)? warning: (.*?)(?: \[(-W[^\]]+)\])?$`)
	errorRe   = regexp.MustCompile(`^\S+?:\d+:(?:\d+:)? (?:fatal )?error: |undefined reference to |^ld: .*error|^make.*\*\*\* .*(Error|Killed)`)
)

// cleanPath makes log paths relative to the source tree: out-of-tree
// builds print "../fs/x.c" for sources.
func cleanPath(p string) string {
	for strings.HasPrefix(p, "../") {
		p = p[3:]
	}
	return strings.TrimPrefix(p, "./")
}

// parseWarnings finds the compiler warnings in a build log, each once.
func parseWarnings(log []byte) []Warning {
	var ws []Warning
	seen := map[string]bool{}
	sc := bufio.NewScanner(bytes.NewReader(log))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		m := warningRe.FindStringSubmatch(ansiRe.ReplaceAllString(sc.Text(), ""))
		if m == nil {
			continue
		}
		var line int
		fmt.Sscan(m[2], &line)
		w := Warning{File: cleanPath(m[1]), Line: line, Message: m[3], Flag: m[4]}
		if k := w.String(); !seen[k] {
			seen[k] = true
			ws = append(ws, w)
		}
	}
	return ws
}

// newWarnings lists the warnings of patched that base does not have,
// compared without line numbers. A patched build recompiles only what the
// series changed, so its log holds only the warnings of those files.
func newWarnings(base, patched []Warning) []Warning {
	old := map[string]int{}
	for _, w := range base {
		old[w.key()]++
	}
	var added []Warning
	for _, w := range patched {
		if old[w.key()] > 0 {
			old[w.key()]--
			continue
		}
		added = append(added, w)
	}
	return added
}

// errorLines picks the compiler's, linker's and make's error lines out of
// a failed build's log.
func errorLines(log []byte) []string {
	var lines []string
	sc := bufio.NewScanner(bytes.NewReader(log))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		if l := ansiRe.ReplaceAllString(sc.Text(), ""); errorRe.MatchString(l) {
			lines = append(lines, strings.TrimPrefix(l, "../"))
		}
	}
	return lines
}
