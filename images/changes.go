package images

import (
	"bufio"
	"bytes"
	"context"
	"strconv"
	"strings"
)

// Change is a file a series changed and the lines it changed there, as
// the patched tree numbers them: the lines it added or rewrote, and where
// it only removed lines, the lines on both sides of the gap. The reply
// says which functions those lines are in and whether the suites ran them
// (vmrunner/report.Changed finds them in the patched vmlinux).
type Change struct {
	File  string   `json:"file"`
	Lines [][2]int `json:"lines"` // inclusive ranges, ascending
}

// At most this much of a series' diff is kept in a build's record.
const (
	maxChangedFiles  = 500
	maxChangedRanges = 5000
)

// changes are the lines the series changed on base, from git diff -U0 in
// the patched tree (after git am, outside the sandbox like it).
func changes(ctx context.Context, tree, base string) ([]Change, error) {
	out, err := git(ctx, tree, "diff", "-U0", "--no-color", "--no-ext-diff", "--no-textconv", "--no-renames", base, "HEAD", "--")
	if err != nil {
		return nil, infra("listing the series' changed lines", err)
	}
	return parseChanges(out), nil
}

// parseChanges reads a unified diff (with or without context lines, as
// git diff -U0 or a patch mail has it): the added lines, and around each
// run of removed lines the lines on both sides of the gap, as the new side
// numbers them.
func parseChanges(diff []byte) []Change {
	var out []Change
	var cur *Change
	ranges := 0
	line, left := 0, 0 // the new side's next line; lines left in the hunk (both sides)
	oldLeft := 0
	mark := func(a, b int) {
		if cur == nil || ranges >= maxChangedRanges {
			return
		}
		a = max(a, 1)
		if n := len(cur.Lines); n > 0 && cur.Lines[n-1][1] >= a-1 {
			cur.Lines[n-1][1] = max(cur.Lines[n-1][1], b)
			return
		}
		cur.Lines = append(cur.Lines, [2]int{a, b})
		ranges++
	}
	sc := bufio.NewScanner(bytes.NewReader(diff))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		text := sc.Text()
		if left > 0 || oldLeft > 0 {
			switch {
			case strings.HasPrefix(text, "+"):
				mark(line, line)
				line++
				left--
				continue
			case strings.HasPrefix(text, "-"):
				mark(line-1, line)
				oldLeft--
				continue
			case strings.HasPrefix(text, " ") || text == "":
				line++
				left--
				oldLeft--
				continue
			case strings.HasPrefix(text, `\`):
				continue
			}
			left, oldLeft = 0, 0 // the hunk ended early: read on as headers
		}
		switch {
		case strings.HasPrefix(text, "+++ "):
			cur = nil
			name := strings.TrimPrefix(text, "+++ ")
			if !strings.HasPrefix(name, "b/") || len(out) == maxChangedFiles {
				continue // a deleted file (/dev/null) has no lines now
			}
			out = append(out, Change{File: strings.TrimPrefix(name, "b/")})
			cur = &out[len(out)-1]
		case strings.HasPrefix(text, "@@ ") && cur != nil:
			// @@ -a[,b] +c[,d] @@
			f := strings.Fields(text)
			if len(f) < 3 || !strings.HasPrefix(f[1], "-") || !strings.HasPrefix(f[2], "+") {
				continue
			}
			_, oldCount := hunkRange(f[1][1:])
			start, count := hunkRange(f[2][1:])
			if start < 0 || oldCount < 0 {
				continue
			}
			if count == 0 {
				start++ // "+c,0": the lines were removed after line c
			}
			line, left, oldLeft = start, count, oldCount
		}
	}
	kept := out[:0]
	for _, c := range out {
		if len(c.Lines) > 0 {
			kept = append(kept, c)
		}
	}
	return kept
}

// hunkRange reads "c[,d]": the start and count (1 when not given); -1 when
// it is not that.
func hunkRange(s string) (start, count int) {
	a, b, found := strings.Cut(s, ",")
	start, err := strconv.Atoi(a)
	if err != nil || start < 0 {
		return -1, 0
	}
	count = 1
	if found {
		if count, err = strconv.Atoi(b); err != nil || count < 0 {
			return -1, 0
		}
	}
	return start, count
}

// mergeChanges adds more's files and ranges to acc.
func mergeChanges(acc, more []Change) []Change {
	at := map[string]int{}
	for i, c := range acc {
		at[c.File] = i
	}
	for _, c := range more {
		if i, ok := at[c.File]; ok {
			acc[i].Lines = append(acc[i].Lines, c.Lines...)
			continue
		}
		at[c.File] = len(acc)
		acc = append(acc, c)
	}
	return acc
}
