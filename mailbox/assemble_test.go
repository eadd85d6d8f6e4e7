package mailbox

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/patchbot/patchbot/internal/testenv"
)

// readFixture parses every mail of an mbox file in testdata.
func readFixture(t testing.TB, path string) []*Message {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var msgs []*Message
	err = ReadMbox(f, func(raw []byte, off int64) error {
		m, err := ParseBytes(raw)
		if err != nil {
			t.Logf("%s: skipping mail at %d: %v", path, off, err)
			return nil
		}
		msgs = append(msgs, m)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return msgs
}

// want is what one series of a fixture must look like.
type want struct {
	version  int
	total    int
	complete bool
	missing  []int
	cover    string
	patches  []string // Message-IDs in order
	files    [][]string
	trailers map[int][]string // index -> "Name: value"
}

func TestAssembleFixtures(t *testing.T) {
	tests := []struct {
		file   string
		series []want
	}{
		{"../testdata/mbox/squashfs-thundering-herd.mbox", []want{{
			version: 1, total: 1, complete: true,
			patches: []string{"20260724190556.1950693-1-usama.arif@linux.dev"},
			files:   [][]string{{"fs/squashfs/cache.c"}},
		}}},
		{"../testdata/mbox/fuse-waitq-rfc.mbox", []want{{
			version: 1, total: 1, complete: true,
			patches: []string{"6ba14287-336d-cdcd-0d39-680f288ca776@ddn.com"},
			files:   [][]string{{"fs/fuse/dev.c"}},
		}}},
		{"../testdata/mbox/fuse-waitq-v2.mbox", []want{{
			version: 2, total: 1, complete: true,
			patches: []string{"fixture-fuse-waitq-v2@ddn.example"},
			files:   [][]string{{"fs/fuse/dev.c"}},
		}}},
		{"../testdata/mbox/squashfs-readahead-off.mbox", []want{{
			version: 1, total: 1, complete: true,
			patches: []string{"fixture-squashfs-readahead-off@example.org"},
			files:   [][]string{{"fs/squashfs/file.c"}},
		}}},
		// A reply quoting a patch is not a patch.
		{"../testdata/seeds/003_33782ee12e9f287c.txt", nil},
		{"../testdata/mailbox/reroll.mbox", []want{{
			version: 2, total: 3, complete: true, cover: "v2-0@demo.example",
			patches: []string{"v2-1@demo.example", "v2-2@demo.example", "v2-3@demo.example"},
			files:   [][]string{{"fs/demo/a.c"}, {"mm/readahead.c"}, {"fs/demo/a.c"}},
			trailers: map[int][]string{
				// The Acked-by answering the v2 cover letter is on no patch:
				// that cover answers v1's and has a base-commit: line, so
				// b4 takes it for a follow-up (testdata/b4/cover-trailers
				// has cover trailers that do reach every patch).
				1: {"Tested-by: Carol Tester <carol@example.org>"},
				// Given on v1 2/3; v2 2/3 is the same change.
				2: {"Reviewed-by: Bob Reviewer <bob@example.org>"},
			},
		}}},
		{"../testdata/mailbox/missing-part.mbox", []want{{
			version: 1, total: 3, complete: false, missing: []int{2}, cover: "v1-0@demo.example",
			patches: []string{"v1-1@demo.example", "v1-3@demo.example"},
			files:   [][]string{{"fs/demo/a.c"}, {"fs/demo/a.c"}},
		}}},
		{"../testdata/mailbox/partial-reroll.mbox", []want{{
			version: 2, total: 3, complete: true, cover: "v1-0@demo.example",
			patches: []string{"v1-1@demo.example", "v2-2@demo.example", "v1-3@demo.example"},
			files:   [][]string{{"fs/demo/a.c"}, {"mm/readahead.c"}, {"fs/demo/a.c"}},
		}}},
		{"../testdata/mailbox/attachment.mbox", []want{{
			version: 3, total: 1, complete: true,
			patches: []string{"attach-1@demo.example"},
			files:   [][]string{{"fs/demo/a.c"}},
		}}},
		{"../testdata/mailbox/unknown-charset.mbox", []want{{
			version: 1, total: 1, complete: true,
			patches: []string{"charset-1@demo.example"},
			files:   [][]string{{"mm/readahead.c"}},
		}}},
	}
	for _, tt := range tests {
		t.Run(filepath.Base(tt.file), func(t *testing.T) {
			got := Assemble(readFixture(t, tt.file))
			if len(got) != len(tt.series) {
				t.Fatalf("got %d series, want %d: %+v", len(got), len(tt.series), got)
			}
			for i, w := range tt.series {
				checkSeries(t, got[i], w)
			}
		})
	}
}

func checkSeries(t *testing.T, s *Series, w want) {
	t.Helper()
	if s.Version != w.version || s.Total != w.total || s.Complete != w.complete {
		t.Errorf("v%d total %d complete %v, want v%d total %d complete %v (reason %q)",
			s.Version, s.Total, s.Complete, w.version, w.total, w.complete, s.Reason)
	}
	if !reflect.DeepEqual(s.Missing, w.missing) {
		t.Errorf("missing %v, want %v", s.Missing, w.missing)
	}
	if !w.complete && s.Reason == "" {
		t.Errorf("incomplete series without a reason")
	}
	cover := ""
	if s.Cover != nil {
		cover = s.Cover.MessageID
	}
	if cover != w.cover {
		t.Errorf("cover %q, want %q", cover, w.cover)
	}
	var ids []string
	var files [][]string
	for _, p := range s.Patches {
		ids = append(ids, p.MessageID)
		files = append(files, p.Files)
		var trs []string
		for _, tr := range p.Trailers {
			trs = append(trs, tr.String())
		}
		if !reflect.DeepEqual(trs, w.trailers[p.Index]) {
			t.Errorf("patch %d trailers %q, want %q", p.Index, trs, w.trailers[p.Index])
		}
		if len(p.Raw) == 0 || !bytes.Contains(p.Raw, []byte(p.Diff)) {
			t.Errorf("patch %d: Raw does not carry the diff", p.Index)
		}
	}
	if !reflect.DeepEqual(ids, w.patches) {
		t.Errorf("patches %v, want %v", ids, w.patches)
	}
	if !reflect.DeepEqual(files, w.files) {
		t.Errorf("files %v, want %v", files, w.files)
	}
}

func TestAssembleCoverTrailersAndDuplicates(t *testing.T) {
	msgs := readFixture(t, "../testdata/mailbox/reroll.mbox")
	// The fixture holds v2 2/3 twice; feed everything twice more.
	got := Assemble(append(msgs, msgs...))
	if len(got) != 1 {
		t.Fatalf("got %d series, want 1", len(got))
	}
	s := got[0]
	if len(s.CoverTrailers) != 0 || s.Cover == nil || s.Cover.MessageID != "v2-0@demo.example" {
		t.Errorf("cover %v, cover trailers %v (b4 gives the v2 cover, and none)", s.Cover, s.CoverTrailers)
	}
	if s.Base != "3838c42bde8eae0dfc4e5bb3d628955b34ee985a" {
		t.Errorf("base %q", s.Base)
	}
	// A trailer naming someone else than the sender is not taken.
	for _, p := range s.Patches {
		for _, tr := range p.Trailers {
			if strings.Contains(tr.Value, "else@example.org") {
				t.Errorf("patch %d took a pasted trailer %v", p.Index, tr)
			}
		}
	}
}

func TestAssembleSeparateThreads(t *testing.T) {
	var msgs []*Message
	for _, f := range []string{"squashfs-thundering-herd.mbox", "fuse-waitq-rfc.mbox", "squashfs-readahead-off.mbox"} {
		msgs = append(msgs, readFixture(t, "../testdata/mbox/"+f)...)
	}
	got := Assemble(msgs)
	var titles []string
	for _, s := range got {
		titles = append(titles, s.Title)
	}
	want := []string{"squashfs: avoid thundering-herd cache wakeups", "RFC fuse waitq latency", "squashfs: disable readahead to measure its effect"}
	if !reflect.DeepEqual(titles, want) {
		t.Errorf("series %q, want %q", titles, want)
	}
	// The RFC and its v2 (a reply to it) are one thread: v2 wins.
	got = Assemble(append(readFixture(t, "../testdata/mbox/fuse-waitq-rfc.mbox"), readFixture(t, "../testdata/mbox/fuse-waitq-v2.mbox")...))
	if len(got) != 1 || got[0].Version != 2 {
		t.Errorf("RFC + v2: got %d series, first v%d; want one v2", len(got), got[0].Version)
	}
}

func TestAssembleUnthreaded(t *testing.T) {
	// git send-email --no-thread: no References, numbered 1/2 and 2/2.
	mk := func(i int) *Message {
		raw := fmt.Sprintf("From: Ada <ada@example.org>\nSubject: [PATCH v4 %d/2] x: part %d\nMessage-ID: <u%d@x>\n\n---\ndiff --git a/f%d b/f%d\n--- a/f%d\n+++ b/f%d\n@@ -1 +1 @@\n-a\n+b\n", i, i, i, i, i, i, i)
		m, err := ParseBytes([]byte(raw))
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	got := Assemble([]*Message{mk(2), mk(1)})
	if len(got) != 1 || !got[0].Complete || got[0].Version != 4 || len(got[0].Patches) != 2 || got[0].Patches[0].MessageID != "u1@x" {
		t.Fatalf("unthreaded series: %+v", got)
	}
}

func TestParseSubject(t *testing.T) {
	tests := []struct {
		in   string
		want Subject
	}{
		{"[PATCH] squashfs: foo", Subject{Patch: true, Version: 1, Title: "squashfs: foo"}},
		{"[PATCH v3 2/5] mm: bar", Subject{Patch: true, Version: 3, Versioned: true, Index: 2, Total: 5, Title: "mm: bar"}},
		{"[RFC PATCH] fuse: x", Subject{Patch: true, RFC: true, Version: 1, Title: "fuse: x"}},
		{"[PATCH net-next v3 2/5] net: y", Subject{Patch: true, Version: 3, Versioned: true, Index: 2, Total: 5, Prefixes: []string{"net-next"}, Title: "net: y"}},
		{"Re: [PATCH 0/4] locks: z", Subject{Reply: true, Patch: true, Version: 1, Index: 0, Total: 4, Title: "locks: z"}},
		{"RE: AW: [PATCHv2 01/12] a", Subject{Reply: true, Patch: true, Version: 2, Versioned: true, Index: 1, Total: 12, Title: "a"}},
		{"[PATCH RESEND] [v2] b", Subject{Patch: true, Resend: true, Version: 2, Versioned: true, Title: "b"}},
		{"[RFCv2 PATCH 1/1] c", Subject{Patch: true, RFC: true, Version: 1, Index: 1, Total: 1, Title: "c"}},
		{"[PATCH v1] d", Subject{Patch: true, Version: 1, Versioned: true, Title: "d"}},
		{"RFC fuse waitq latency", Subject{Version: 1, Title: "RFC fuse waitq latency"}},
		{"[PATCH 3/2] bogus counter", Subject{Patch: true, Version: 1, Prefixes: []string{"3/2"}, Title: "bogus counter"}},
		{"", Subject{Version: 1}},
	}
	for _, tt := range tests {
		if got := ParseSubject(tt.in); !reflect.DeepEqual(got, tt.want) {
			t.Errorf("ParseSubject(%q) = %+v, want %+v", tt.in, got, tt.want)
		}
	}
}

// TestWriteMboxGitAm applies assembled series with git am -3 on the tree
// the demo fixtures were made from, and checks the result.
func TestWriteMboxGitAm(t *testing.T) {
	testenv.Tools(t, "git")
	tests := []struct {
		fixture string
		a3      string // line 3 of fs/demo/a.c afterwards
		author  string
		trailer string // expected in the log
	}{
		{"reroll.mbox", "demo line 3 changed again", "Ada Dev <ada@example.org>", "Tested-by: Carol Tester <carol@example.org>"},
		{"partial-reroll.mbox", "demo line 3 changed", "Ada Dev <ada@example.org>", ""},
		{"attachment.mbox", "demo line 3 changed", "René Dev <rene@example.org>", ""},
	}
	for _, tt := range tests {
		t.Run(tt.fixture, func(t *testing.T) {
			dir := demoRepo(t)
			series := Assemble(readFixture(t, "../testdata/mailbox/"+tt.fixture))
			if len(series) != 1 {
				t.Fatalf("got %d series", len(series))
			}
			var mbox bytes.Buffer
			if err := series[0].WriteMbox(&mbox); err != nil {
				t.Fatal(err)
			}
			cmd := exec.Command("git", "am", "-3")
			cmd.Dir = dir
			cmd.Stdin = &mbox
			cmd.Env = gitEnv()
			if out, err := cmd.CombinedOutput(); err != nil {
				t.Fatalf("git am -3: %v\n%s\nmbox:\n%s", err, out, mbox.String())
			}
			a, _ := os.ReadFile(filepath.Join(dir, "fs/demo/a.c"))
			if line := strings.Split(string(a), "\n")[2]; line != tt.a3 {
				t.Errorf("line 3 is %q, want %q", line, tt.a3)
			}
			log := git(t, dir, "log", "--format=%an <%ae>%n%B", "-n", fmt.Sprint(len(series[0].Patches)))
			if !strings.Contains(log, tt.author) {
				t.Errorf("author %q not in log:\n%s", tt.author, log)
			}
			if tt.trailer != "" && !strings.Contains(log, tt.trailer) {
				t.Errorf("trailer %q not in log:\n%s", tt.trailer, log)
			}
		})
	}
}

func gitEnv() []string {
	return append(os.Environ(), "GIT_CONFIG_GLOBAL=/dev/null", "GIT_CONFIG_SYSTEM=/dev/null",
		"GIT_AUTHOR_NAME=Test", "GIT_AUTHOR_EMAIL=test@example.org",
		"GIT_COMMITTER_NAME=Test", "GIT_COMMITTER_EMAIL=test@example.org")
}

func git(t *testing.T, dir string, args ...string) string {
	t.Helper()
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	cmd.Env = gitEnv()
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("git %v: %v\n%s", args, err, out)
	}
	return string(out)
}

// demoRepo recreates the tree testdata/mailbox's demo series apply to.
func demoRepo(t *testing.T) string {
	dir := t.TempDir()
	git(t, dir, "init", "-q")
	lines := func(prefix string) []byte {
		var b strings.Builder
		for i := 1; i <= 20; i++ {
			fmt.Fprintf(&b, "%s line %d\n", prefix, i)
		}
		return []byte(b.String())
	}
	os.MkdirAll(filepath.Join(dir, "fs/demo"), 0o755)
	os.MkdirAll(filepath.Join(dir, "mm"), 0o755)
	os.WriteFile(filepath.Join(dir, "fs/demo/a.c"), lines("demo"), 0o644)
	os.WriteFile(filepath.Join(dir, "mm/readahead.c"), lines("mm"), 0o644)
	git(t, dir, "add", ".")
	git(t, dir, "commit", "-q", "-m", "base")
	return dir
}

// TestB4Agrees runs b4 (Debian package b4) on every fixture and checks that
// it picks the same patches in the same order as Assemble.
func TestB4Agrees(t *testing.T) {
	b4 := testenv.Tool(t, "b4")
	var files []string
	for _, pat := range []string{"../testdata/mbox/*.mbox", "../testdata/mailbox/*.mbox", "../testdata/seeds/003_*.txt"} {
		m, _ := filepath.Glob(pat)
		files = append(files, m...)
	}
	if len(files) < 9 {
		t.Fatalf("found only %d fixtures", len(files))
	}
	home := t.TempDir()
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			t.Parallel() // each b4 is a process of its own
			var ours []string
			for _, s := range Assemble(readFixture(t, f)) {
				for _, p := range s.Patches {
					ours = append(ours, p.MessageID)
				}
			}
			theirs := b4Patches(t, b4, home, f)
			if !reflect.DeepEqual(ours, theirs) {
				t.Errorf("Assemble picked %q, b4 am picked %q", ours, theirs)
			}
		})
	}
}

// b4Patches runs "b4 am" offline on an mbox and returns the Message-IDs of
// the patches it writes, in order.
func b4Patches(t testing.TB, b4, home, file string) []string {
	t.Helper()
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.HasPrefix(data, []byte("From ")) {
		// A bare mail: b4 wants an mbox.
		data = append([]byte("From mboxrd@z Thu Jan  1 00:00:00 1970\n"), data...)
	}
	in := filepath.Join(t.TempDir(), "in.mbox")
	if err := os.WriteFile(in, data, 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(b4, "-n", "--offline-mode", "am", "-m", in, "-o", "-")
	cmd.Dir = home
	// b4 needs a git identity, and must not read the machine's config.
	cmd.Env = append(os.Environ(), "HOME="+home, "XDG_CONFIG_HOME="+home, "XDG_CACHE_HOME="+home,
		"GIT_CONFIG_GLOBAL=/dev/null", "GIT_CONFIG_COUNT=2",
		"GIT_CONFIG_KEY_0=user.name", "GIT_CONFIG_VALUE_0=Test",
		"GIT_CONFIG_KEY_1=user.email", "GIT_CONFIG_VALUE_1=test@example.org")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil && stdout.Len() > 0 {
		t.Fatalf("b4 am: %v\n%s", err, stderr.String())
	}
	var ids []string
	err = ReadMbox(&stdout, func(raw []byte, _ int64) error {
		m, err := ParseBytes(raw)
		if err != nil {
			return err
		}
		ids = append(ids, m.MessageID)
		return nil
	})
	if err != nil {
		t.Fatalf("reading b4's output: %v", err)
	}
	return ids
}
