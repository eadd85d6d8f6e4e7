package images

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"

	"github.com/patchbot/patchbot/internal/inert"
)

// gitStat makes git trust whole-second mtimes and sizes only: the patched
// tree's files are hard links of the base tree's (same inode, new ctime),
// and its index is a copy of the base's, so nothing needs rehashing.
var gitStat = []string{"-c", "core.checkStat=minimal", "-c", "core.trustctime=false"}

var (
	amFailedRe  = regexp.MustCompile(`(?m)^Patch failed at (\d+) (.*)$`)
	amApplyRe   = regexp.MustCompile(`(?m)^Applying: (.*)$`)
	amFailureRe = regexp.MustCompile(`(?m)^(Patch failed at|Patch is empty|Patch format detection failed|error: patch failed|error: .*: does not exist in index|error: .*: patch does not apply)`)
)

// applySeries applies patches (raw mails, in order) on the worktree tree
// with git am -3. A series that does not apply is an *ApplyError naming the
// patch and the hunk git could not place.
func applySeries(ctx context.Context, tree string, patches [][]byte) error {
	if len(patches) == 0 {
		return nil
	}
	dir, err := os.MkdirTemp(filepath.Dir(tree), "series.")
	if err != nil {
		return infra("writing series", err)
	}
	defer os.RemoveAll(dir)
	var files []string
	for i, p := range patches {
		f := filepath.Join(dir, fmt.Sprintf("%04d.patch", i+1))
		if err := os.WriteFile(f, p, 0o600); err != nil {
			return infra("writing series", err)
		}
		files = append(files, f)
	}
	args := append(append([]string{}, gitStat...), "am", "-3", "--keep-cr")
	out, err := git(ctx, tree, append(args, files...)...)
	if err == nil {
		return nil
	}
	var exit *exec.ExitError
	if !errors.As(err, &exit) || !amFailureRe.Match(out) {
		return infra("running git am", err)
	}
	ae := &ApplyError{Output: inert.Bytes(capBytes(out, maxApplyOutput))}
	if m := amFailedRe.FindSubmatch(out); m != nil {
		ae.Index, _ = strconv.Atoi(string(m[1]))
		ae.Subject = string(m[2])
	} else {
		// "Patch is empty" and friends: the last patch git started on.
		all := amApplyRe.FindAllSubmatch(out, -1)
		ae.Index = len(all)
		if len(all) > 0 {
			ae.Subject = string(all[len(all)-1][1])
		} else {
			ae.Index = 1
		}
	}
	if ae.Index >= 1 && ae.Index <= len(files) {
		ae.Hunk = capText(failingHunk(ctx, tree, files[ae.Index-1]), maxQuotedLines, maxQuotedBytes)
	}
	return ae
}

// failingHunk asks git apply which hunk does not fit on the tree as the
// earlier patches left it ("error: while searching for: ...").
func failingHunk(ctx context.Context, tree, patch string) string {
	args := append(append([]string{}, gitStat...), "reset", "-q", "--hard", "HEAD")
	if _, err := git(ctx, tree, args...); err != nil {
		return ""
	}
	out, _ := git(ctx, tree, "apply", "--check", "-v", patch)
	return string(bytes.TrimSpace(out))
}

// git am's output quotes the series (subjects, and the patch when a hunk
// fails): a hostile series must not make the evidence unbounded.
const maxApplyOutput = 64 << 10

func capBytes(b []byte, max int) []byte {
	if len(b) <= max {
		return b
	}
	return append(b[:max:max], fmt.Sprintf("\n... %d more bytes of git's output", len(b)-max)...)
}

// capText keeps the first lines of s, within maxLines and maxBytes, and
// says how many it left out.
func capText(s string, maxLines, maxBytes int) string {
	lines := strings.Split(s, "\n")
	var b strings.Builder
	for i, l := range lines {
		l = quoteLine(l)
		if i == maxLines || b.Len()+len(l)+1 > maxBytes {
			fmt.Fprintf(&b, "... %d more lines", len(lines)-i)
			break
		}
		b.WriteString(l)
		if i < len(lines)-1 {
			b.WriteByte('\n')
		}
	}
	return b.String()
}
