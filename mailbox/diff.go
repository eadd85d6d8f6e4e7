package mailbox

import (
	"sort"
	"strings"
)

// findDiff returns the unified diff in text, from its first header line to
// the end of the last hunk (a "-- " signature line ends it). Quoted lines
// ("> +foo") never start a diff, so a review quoting a patch is not a patch.
// A diff needs a file header and at least one hunk.
func findDiff(text string) string {
	start := -1
	pos := 0
	for pos < len(text) {
		end := strings.IndexByte(text[pos:], '\n')
		next := len(text)
		if end >= 0 {
			next = pos + end + 1
		}
		line := text[pos:next]
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

func checkDiff(d string) string {
	if !strings.Contains(d, "\n@@ ") && !strings.Contains(d, "\nBinary files ") &&
		!strings.Contains(d, "\nGIT binary patch") && !strings.Contains(d, "\nrename from ") &&
		!strings.Contains(d, "\nnew file mode") && !strings.Contains(d, "\ndeleted file mode") {
		return ""
	}
	return d
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
