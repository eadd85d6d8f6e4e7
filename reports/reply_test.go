package reports

import (
	"bytes"
	"errors"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/patchbot/patchbot/judge"
	"github.com/patchbot/patchbot/judge/stats"

	"github.com/emersion/go-message/mail"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/golden")

var testOptions = ReplyOptions{From: "patchbot <patchbot@patchbot.example>"}

// golden compares got with testdata/golden/name, or rewrites it with -update.
func golden(t *testing.T, name string, got []byte) {
	path := filepath.Join("testdata", "golden", name)
	if *update {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("reading golden file (run go test -update to create it): %v", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s differs from the golden file (go test -update rewrites it):\n--- got\n%s", path, got)
	}
}

func TestReplyGolden(t *testing.T) {
	tests := []struct {
		run  string
		want []string // phrases the reply must contain
		deny []string // phrases it must not contain
	}{
		{"squashfs-improvement",
			[]string{"Improvement: the patch", "cuts", "95% interval", "wake-all", "keyed", "Test setup:", "TCG", "$ patchbot run",
				"  ✓ [PATCH] squashfs: avoid thundering-herd cache wakeups\n  ---\n  ✓ Signed: DKIM/linux.dev\n"},
			[]string{"No change", "Regression"}},
		{"fuse-rfc-build-failure",
			[]string{"does not build", "'expires' undeclared", "fs/fuse/dev.c:1240:9"},
			[]string{"%change", "improves"}},
		{"does-not-apply",
			[]string{"does not apply", "hunk #2 of fs/squashfs/cache.c", "patch does not apply"},
			[]string{"%change"}},
		{"boot-panic",
			[]string{"does not boot", "Kernel panic - not syncing"},
			[]string{"%change"}},
		{"aa-no-change",
			[]string{"No change: none of the", "No significant change in", "could have detected"},
			[]string{"Improvement", "Regression", "The patch improves", "The patch cuts"}},
		{"readahead-warning",
			[]string{"-Wunused-function", "readers=16", "lt256K"},
			nil},
	}
	for _, tt := range tests {
		t.Run(tt.run, func(t *testing.T) {
			run, err := LoadRun(filepath.Join("testdata", "runs", tt.run))
			if err != nil {
				t.Fatal(err)
			}
			reply, err := Render(run, testOptions)
			if err != nil {
				t.Fatal(err)
			}
			raw, err := reply.Bytes()
			if err != nil {
				t.Fatal(err)
			}
			text := strings.ReplaceAll(string(raw), "\r\n", "\n")
			golden(t, tt.run+".eml", []byte(text))
			for _, w := range tt.want {
				if !strings.Contains(reply.Body, w) {
					t.Errorf("reply lacks %q", w)
				}
			}
			for _, d := range tt.deny {
				if strings.Contains(reply.Body, d) {
					t.Errorf("reply claims %q", d)
				}
			}
			for i, line := range strings.Split(text, "\n") {
				if i > 0 && strings.HasPrefix(line, " ") && !strings.Contains(text[:strings.Index(text, "\n\n")], line) {
					continue
				}
				if n := utf8.RuneCountInString(line); n > MaxColumns && !isHeader(line) {
					t.Errorf("line %d is %d columns: %q", i+1, n, line)
				}
			}
			checkThreading(t, run, raw)
		})
	}
}

func isHeader(line string) bool {
	// Folded address headers may pass 80 columns; RFC 5322 allows 998.
	return !strings.HasPrefix(line, " ") && strings.Contains(line, ": ") && len(line) < 998
}

// checkThreading parses the encoded mail back and checks what puts it in
// the right thread and in the right inboxes.
func checkThreading(t *testing.T, run *Run, raw []byte) {
	r, err := mail.CreateReader(bytes.NewReader(raw))
	if err != nil {
		t.Fatalf("parsing the encoded reply: %v", err)
	}
	h := r.Header
	subject, _ := h.Subject()
	if want := "Re: " + run.Thread.Subject; subject != want {
		t.Errorf("Subject = %q, want %q", subject, want)
	}
	irt, _ := h.MsgIDList("In-Reply-To")
	if len(irt) != 1 || irt[0] != trimID(run.Thread.MessageID) {
		t.Errorf("In-Reply-To = %v, want %s", irt, run.Thread.MessageID)
	}
	refs, _ := h.MsgIDList("References")
	if len(refs) == 0 || refs[len(refs)-1] != trimID(run.Thread.MessageID) {
		t.Errorf("References = %v, must end with %s", refs, run.Thread.MessageID)
	}
	if id, _ := h.MessageID(); !strings.HasPrefix(id, "patchbot-") {
		t.Errorf("Message-ID = %q, want a fresh patchbot id", id)
	}
	to, _ := h.AddressList("To")
	if len(to) != 1 || !strings.Contains(run.Thread.Author, to[0].Address) {
		t.Errorf("To = %v, want the author %s", to, run.Thread.Author)
	}
	cc, _ := h.AddressList("Cc")
	for _, l := range run.Thread.Lists {
		found := false
		for _, a := range cc {
			found = found || strings.Contains(l, a.Address)
		}
		if !found {
			t.Errorf("Cc %v lacks the list %s", cc, l)
		}
	}
}

func TestRenderIsDeterministic(t *testing.T) {
	run, err := LoadRun(filepath.Join("testdata", "runs", "squashfs-improvement"))
	if err != nil {
		t.Fatal(err)
	}
	a, err := Render(run, testOptions)
	if err != nil {
		t.Fatal(err)
	}
	b, err := Render(run, testOptions)
	if err != nil {
		t.Fatal(err)
	}
	if a.Header.MessageID != b.Header.MessageID || a.Body != b.Body {
		t.Error("rendering the same run twice gave different replies")
	}
}

func TestRenderRefuses(t *testing.T) {
	base := func() *Run {
		r, err := LoadRun(filepath.Join("testdata", "runs", "boot-panic"))
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	tests := []struct {
		name   string
		modify func(*Run)
		opt    ReplyOptions
		is     error
	}{
		{"base kernel failed", func(r *Run) { r.Failure.Kernel = "base" }, testOptions, ErrNotPatchFault},
		{"no message id", func(r *Run) { r.Thread.MessageID = "" }, testOptions, nil},
		{"no author", func(r *Run) { r.Thread.Author = "" }, testOptions, nil},
		{"no from", func(r *Run) {}, ReplyOptions{}, nil},
		{"bad from", func(r *Run) {}, ReplyOptions{From: "not an address"}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := base()
			tt.modify(r)
			_, err := Render(r, tt.opt)
			if err == nil {
				t.Fatal("Render succeeded, want an error")
			}
			if tt.is != nil && !errors.Is(err, tt.is) {
				t.Errorf("error %v is not %v", err, tt.is)
			}
		})
	}
}

func TestListCcConfigurable(t *testing.T) {
	run, err := LoadRun(filepath.Join("testdata", "runs", "boot-panic"))
	if err != nil {
		t.Fatal(err)
	}
	reply, err := Render(run, ReplyOptions{From: testOptions.From, NoListCc: true, ExtraCc: []string{"lab@example.org"}})
	if err != nil {
		t.Fatal(err)
	}
	cc := strings.Join(reply.Header.Cc, ",")
	if strings.Contains(cc, "vger.kernel.org") || !strings.Contains(cc, "lab@example.org") {
		t.Errorf("Cc = %s, want no lists and the extra Cc", cc)
	}
}

func TestSaveLoadRun(t *testing.T) {
	run, err := LoadRun(filepath.Join("testdata", "runs", "squashfs-improvement"))
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "run")
	if err := SaveRun(dir, run); err != nil {
		t.Fatal(err)
	}
	back, err := LoadRun(dir)
	if err != nil {
		t.Fatal(err)
	}
	a, _ := Render(run, testOptions)
	b, err := Render(back, testOptions)
	if err != nil || a.Body != b.Body || a.Header.MessageID != b.Header.MessageID {
		t.Errorf("a saved and loaded run renders differently (%v)", err)
	}
	os.Remove(filepath.Join(dir, BaseFile))
	if _, err := LoadRun(dir); err == nil {
		t.Error("a run without failure and without base results loaded")
	}
	os.WriteFile(filepath.Join(dir, RunFile), []byte(`{"thred": {}}`), 0o644)
	if _, err := LoadRun(dir); err == nil || !strings.Contains(err.Error(), "thred") {
		t.Errorf("a misspelt key: %v", err)
	}
}

// Real runs carry long subjects, paths and names: the reply must still be
// rendered, wrapped to 80 columns wherever a line can be broken.
func TestRenderLongFields(t *testing.T) {
	run, err := LoadRun(filepath.Join("testdata", "runs", "squashfs-improvement"))
	if err != nil {
		t.Fatal(err)
	}
	run.Thread.Subject = "[PATCH v12 07/23] squashfs: make the fragment cache wake exactly the waiters that can use a published block"
	run.ConfigPath = "/var/cache/patchbot/builds/3c5f1a9e7b2d4c6f8a0b1c2d3e4f5a6b7c8d9e0f/linux-6.1.192/.config"
	run.Commands = []string{"patchbot run --mbox /var/lib/patchbot/runs/2026-11-29T10:20:00Z-squashfs-make-the-fragment-cache/series.mbox --suite cache-contention"}
	run.Layout = LayoutNote([]byte("CONFIG_DEBUG_FORCE_FUNCTION_ALIGN_64B=y\n"))
	// The sequential rule's runs line, the longest setup value.
	run.Options.Rule = &stats.RuleBefore
	for i := range run.Patched {
		for j := range run.Patched[i].Samples {
			run.Patched[i].Samples[j].Workload += "-with-a-very-long-workload-name-for-the-heading"
		}
	}
	for i := range run.Base {
		for j := range run.Base[i].Samples {
			run.Base[i].Samples[j].Workload += "-with-a-very-long-workload-name-for-the-heading"
		}
	}
	reply, err := Render(run, testOptions)
	if err != nil {
		t.Fatal(err)
	}
	if len(reply.Folded) > 0 {
		t.Errorf("lines %v were too wide and had to be folded:\n%s", reply.Folded, reply.Body)
	}
	for _, line := range strings.Split(reply.Body, "\n") {
		if utf8.RuneCountInString(line) > MaxColumns && !unbreakable(line) {
			t.Errorf("line of %d columns: %q", utf8.RuneCountInString(line), line)
		}
	}
	if !strings.Contains(reply.Body, run.ConfigPath) {
		t.Error("the config path was cut")
	}
	if !strings.Contains(reply.Body, "layout:") || !strings.Contains(reply.Body, "the rule runs 3 to 10") {
		t.Errorf("the layout or the runs line is missing:\n%s", reply.Body)
	}
}

func TestRenderNeedsFinishTime(t *testing.T) {
	run, err := LoadRun(filepath.Join("testdata", "runs", "boot-panic"))
	if err != nil {
		t.Fatal(err)
	}
	run.Finished = time.Time{}
	if _, err := Render(run, testOptions); err == nil {
		t.Error("a run without a finish time was rendered")
	}
}

func TestFailureWithoutEvidence(t *testing.T) {
	run, err := LoadRun(filepath.Join("testdata", "runs", "boot-panic"))
	if err != nil {
		t.Fatal(err)
	}
	run.Failure.Detail, run.Failure.Excerpt = "", ""
	reply, err := Render(run, testOptions)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(reply.Body, "Console:") || strings.Contains(reply.Body, ": .") {
		t.Errorf("empty evidence rendered as if present:\n%s", reply.Body)
	}
	if !strings.Contains(reply.Body, "does not boot.") {
		t.Errorf("verdict lost:\n%s", reply.Body)
	}
}

// A series that fails before any VM ran says nothing about a VM.
func TestBuildFailureHasNoVMLine(t *testing.T) {
	run, err := LoadRun(filepath.Join("testdata", "runs", "boot-panic"))
	if err != nil {
		t.Fatal(err)
	}
	run.Failure.Stage, run.Failure.Detail, run.Failure.Excerpt = judge.StageBuild, "error: x", "error: x"
	run.CPUs, run.MemMiB, run.Accel = 0, 0, ""
	reply, err := Render(run, testOptions)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(reply.Body, "VM:") {
		t.Errorf("a VM line without a VM:\n%s", reply.Body)
	}
}

// A line a template forgot to wrap is folded under its indentation, and
// said so, rather than costing the reply.
func TestFoldKeepsTheReply(t *testing.T) {
	long := "  runs:      " + strings.Repeat("word ", 30)
	text, folded := fold("short\n" + long + "\nhttps://example.org/" + strings.Repeat("x", 90))
	if len(folded) != 1 || folded[0] != 2 {
		t.Fatalf("folded %v, want line 2", folded)
	}
	for _, l := range strings.Split(text, "\n") {
		if utf8.RuneCountInString(l) > MaxColumns && !unbreakable(l) {
			t.Errorf("still %d columns: %q", utf8.RuneCountInString(l), l)
		}
	}
	if strings.Count(text, "word") != 30 || !strings.Contains(text, "\n  word") {
		t.Errorf("words lost or not indented:\n%s", text)
	}
}
