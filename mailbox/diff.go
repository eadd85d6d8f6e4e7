package mailbox

import (
	"fmt"
	"sort"
	"strconv"
	"strings"

	"github.com/patchbot/patchbot/internal/inert"
)

// findDiff returns the unified diff in text, from its first header line to
// the end of the last hunk (a "-- " signature line ends it). Quoted lines
// ("> +foo") never start a diff, so a review quoting a patch is not a patch.
// A diff needs a file header and at least one hunk.
func findDiff(text string) string {
	start, pos := -1, 0
	for line := range strings.Lines(text) {
		next := pos + len(line)
		if start < 0 {
			if strings.HasPrefix(line, "diff --git ") ||
				(strings.HasPrefix(line, "--- ") && strings.HasPrefix(text[next:], "+++ ")) ||
				strings.HasPrefix(line, "Index: ") {
				start = pos
			}
		} else if line == "-- \n" || line == "-- " || line == "-- \r\n" {
			return checkDiff(text[start:pos])
		}
		pos = next
	}
	if start < 0 {
		return ""
	}
	return checkDiff(text[start:])
}

// checkDiff keeps what b4 takes for a diff: a file header ("diff --git",
// or "---" then "+++") with anything after it. Whether its hunks are
// well-formed is diffProblem's question: a broken patch is still a patch.
func checkDiff(d string) string {
	if strings.HasPrefix(d, "Index: ") && !strings.Contains(d, "\n+++ ") {
		return ""
	}
	return d
}

// parseHunkHeader reads "@@ -a[,b] +c[,d] @@..." and returns b and d
// (1 when left out), as `^@@ -\d+(?:,(\d+))? \+\d+(?:,(\d+))? @@` would.
func parseHunkHeader(line string) (oldN, newN int, ok bool) {
	rest, ok := strings.CutPrefix(line, "@@ -")
	if !ok {
		return 0, 0, false
	}
	var o, n int
	if o, rest, ok = hunkRange(rest); !ok {
		return 0, 0, false
	}
	if rest, ok = strings.CutPrefix(rest, " +"); !ok {
		return 0, 0, false
	}
	if n, rest, ok = hunkRange(rest); !ok || !strings.HasPrefix(rest, " @@") {
		return 0, 0, false
	}
	return o, n, true
}

// hunkRange reads "start[,count]" and returns count.
func hunkRange(s string) (int, string, bool) {
	i := 0
	for i < len(s) && s[i] >= '0' && s[i] <= '9' {
		i++
	}
	if i == 0 {
		return 0, s, false
	}
	s = s[i:]
	if !strings.HasPrefix(s, ",") {
		return 1, s, true
	}
	j := 1
	for j < len(s) && s[j] >= '0' && s[j] <= '9' {
		j++
	}
	if j == 1 {
		return 0, s, false
	}
	n, err := strconv.Atoi(s[1:j])
	return n, s[j:], err == nil
}

// diffProblem says why a diff cannot apply as it stands: a malformed hunk
// header, a hunk whose lines do not match its counts, or no change at
// all. "" means it is well-formed (whether it applies to a tree is git's
// question).
func diffProblem(diff string) string {
	if p := pathProblem(diff); p != "" {
		return p
	}
	hunks, other := 0, false
	oldLeft, newLeft := 0, 0
	header := ""
	n := 0
	for line := range strings.Lines(diff) {
		n++
		line = strings.TrimRight(line, "\r\n")
		if oldLeft > 0 || newLeft > 0 {
			c := byte(' ')
			if line != "" {
				c = line[0]
			}
			switch c {
			case ' ':
				oldLeft--
				newLeft--
			case '-':
				oldLeft--
			case '+':
				newLeft--
			case '\\':
				continue // "\ No newline at end of file"
			default:
				return fmt.Sprintf("hunk %q ends early, at line %d of the diff (%q)", header, n, clip(line))
			}
			if oldLeft < 0 || newLeft < 0 {
				return fmt.Sprintf("hunk %q has more lines than its header counts (line %d of the diff)", header, n)
			}
			continue
		}
		switch {
		case strings.HasPrefix(line, "@@"):
			o, nw, ok := parseHunkHeader(line)
			if !ok {
				return fmt.Sprintf("malformed hunk header %q at line %d of the diff", clip(line), n)
			}
			header = clip(line)
			oldLeft, newLeft = o, nw
			hunks++
		case strings.HasPrefix(line, "GIT binary patch"), strings.HasPrefix(line, "Binary files "),
			strings.HasPrefix(line, "old mode "), strings.HasPrefix(line, "new mode "),
			strings.HasPrefix(line, "rename from "), strings.HasPrefix(line, "copy from "),
			strings.HasPrefix(line, "new file mode "), strings.HasPrefix(line, "deleted file mode "):
			other = true
		case strings.HasPrefix(line, "--- "), strings.HasPrefix(line, "+++ "):
		case hunks > 0 && (strings.HasPrefix(line, "+") || strings.HasPrefix(line, "-")):
			return fmt.Sprintf("hunk %q has more lines than its header counts (line %d of the diff)", header, n)
		}
	}
	if oldLeft > 0 || newLeft > 0 {
		return fmt.Sprintf("hunk %q is cut short: %d old and %d new lines missing at the end", header, max(oldLeft, 0), max(newLeft, 0))
	}
	if hunks == 0 && !other {
		return "the diff has no hunks"
	}
	return ""
}

func clip(s string) string {
	if len(s) > 80 {
		return s[:80] + "..."
	}
	return s
}

// pathHeaders are the diff lines that name a file.
var pathHeaders = []string{"diff --git ", "--- ", "+++ ", "rename from ", "rename to ", "copy from ", "copy to "}

// pathProblem refuses a diff whose file names git and patchbot would read
// differently: a name with a NUL (git's C strings end there, Go's do not)
// or another control character, a byte that is not UTF-8, or a quoted
// name ("a/x\001") that decodes to one. The file list decides which suites
// run and whether a series is watched: it must be git's.
func pathProblem(diff string) string {
	for line := range strings.Lines(diff) {
		line = strings.TrimRight(line, "\r\n")
		head := ""
		for _, h := range pathHeaders {
			if strings.HasPrefix(line, h) {
				head = h
				break
			}
		}
		if head == "" {
			continue
		}
		name := line[len(head):]
		if head == "--- " || head == "+++ " {
			name, _, _ = strings.Cut(name, "\t") // "+++ b/file\t2024-01-01 ..." from diff -u
		}
		if inert.Has(name) {
			return fmt.Sprintf("a file name in %q holds a control character or a byte that is not UTF-8: git and patchbot would read it differently", clip(inert.Line(line)))
		}
		for _, q := range quotedNames(name) {
			if inert.Has(q) {
				return fmt.Sprintf("the quoted file name in %q decodes to a control character: git and patchbot would read it differently", clip(line))
			}
		}
	}
	return ""
}

// quotedNames decodes the C-quoted names ("a/caf\303\251.c") in s, as git
// writes names with unusual bytes.
func quotedNames(s string) []string {
	var out []string
	for {
		i := strings.IndexByte(s, '"')
		if i < 0 {
			return out
		}
		s = s[i+1:]
		var b strings.Builder
		j := 0
		for ; j < len(s) && s[j] != '"'; j++ {
			c := s[j]
			if c != '\\' || j+1 == len(s) {
				b.WriteByte(c)
				continue
			}
			j++
			switch e := s[j]; {
			case e >= '0' && e <= '7':
				n := 0
				k := j
				for ; k < len(s) && k < j+3 && s[k] >= '0' && s[k] <= '7'; k++ {
					n = n*8 + int(s[k]-'0')
				}
				b.WriteByte(byte(n))
				j = k - 1
			case strings.IndexByte("abtnvfr", e) >= 0:
				b.WriteByte("\a\b\t\n\v\f\r"[strings.IndexByte("abtnvfr", e)])
			default:
				b.WriteByte(e)
			}
		}
		out = append(out, b.String())
		if j >= len(s) {
			return out
		}
		s = s[j+1:]
	}
}

// DiffFiles lists the files a diff touches (new paths; the old path for a
// deletion), sorted, each once.
func DiffFiles(diff string) []string {
	seen := map[string]bool{}
	add := func(p string) {
		p = strings.TrimSpace(p)
		if i := strings.IndexByte(p, '\t'); i >= 0 {
			p = p[:i] // "+++ b/file\t2024-01-01 ..." from plain diff -u
		}
		if strings.HasPrefix(p, `"`) {
			if q := quotedNames(p); len(q) > 0 {
				p = q[0] // git's quoting of a name with unusual bytes
			}
		}
		if p == "" || p == "/dev/null" {
			return
		}
		for _, pre := range []string{"a/", "b/"} {
			if strings.HasPrefix(p, pre) {
				p = p[len(pre):]
				break
			}
		}
		seen[p] = true
	}
	var minus string
	for line := range strings.Lines(diff) {
		line = strings.TrimRight(line, "\r\n")
		switch {
		case strings.HasPrefix(line, "diff --git "):
			// "diff --git a/x b/x": the b/ path; names with spaces are rare
			// and repeated in ---/+++ lines anyway.
			if i := strings.LastIndex(line, " b/"); i >= 0 {
				add(line[i+1:])
			}
		case strings.HasPrefix(line, "--- "):
			minus = line[4:]
		case strings.HasPrefix(line, "+++ "):
			if p := line[4:]; strings.TrimSpace(p) == "/dev/null" {
				add(minus)
			} else {
				add(p)
			}
		case strings.HasPrefix(line, "rename to "):
			add(line[len("rename to "):])
		}
	}
	files := make([]string, 0, len(seen))
	for f := range seen {
		files = append(files, f)
	}
	sort.Strings(files)
	return files
}
