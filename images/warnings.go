package images

import (
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

// parseWarning reads one log line (colours removed) as a warning.
func parseWarning(line string) (Warning, bool) {
	m := warningRe.FindStringSubmatch(line)
	if m == nil {
		return Warning{}, false
	}
	var n int
	fmt.Sscan(m[2], &n)
	return Warning{File: cleanPath(m[1]), Line: n, Message: quoteLine(m[3]), Flag: m[4]}, true
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

// isErrorLine reports whether a log line (colours removed) is one of the
// compiler's, linker's or make's error lines.
func isErrorLine(line string) bool { return errorRe.MatchString(line) }
