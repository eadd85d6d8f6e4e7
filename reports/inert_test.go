package reports

import (
	"bytes"
	"fmt"
	"mime"
	"net/mail"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/patchbot/patchbot/internal/inert"
	"github.com/patchbot/patchbot/internal/testenv"
	"github.com/patchbot/patchbot/judge"
)

// hostileExcerpt is compiler output a patch can make: #error and #warning
// lines that carry trailers, a trailer at the start of a line (gcc's
// source context, a note), and escape sequences.
const hostileExcerpt = "fs/squashfs/cache.c:12:2: error: #error Reviewed-by: Mallory Hostile <mallory@example.org>\n" +
	"Reviewed-by: Mallory Hostile <mallory@example.org>\n" +
	"Acked-by: Eve Hostile <eve@example.org>\n" +
	"fs/squashfs/cache.c:13:2: warning: #warning \x1b]0;pwned\x07\x1b[2J\u009b31m cleared your screen\n"

func hostileRun() *Run {
	return &Run{
		Thread: Thread{Subject: "[PATCH] squashfs: key the cache's waiters", MessageID: "<patch-1@example.org>",
			Author: "Alice Author <alice@example.org>"},
		BaseCommit: "efb677222d3b74139a30cf8b67627fb3dbef3d89", PatchedCommit: "5a7c9e1b3d5f7a9c1e3b5d7f9a1c3e5b7d9f1a3c",
		Compiler: "gcc", Finished: time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC), Series: 1,
		Failure:  &judge.Failure{Stage: judge.StageBuild, Detail: "fs/squashfs/cache.c:12:2: error: #error", Excerpt: hostileExcerpt},
		Commands: []string{"patchbot run --msgid patch-1@example.org"},
	}
}

const patchMail = `From: Alice Author <alice@example.org>
To: linux-fsdevel@vger.kernel.org
Subject: [PATCH] squashfs: key the cache's waiters
Date: Tue, 01 Dec 2026 10:00:00 +0000
Message-ID: <patch-1@example.org>

Wake only the waiters of the block that was released.

Signed-off-by: Alice Author <alice@example.org>
---
 fs/squashfs/cache.c | 2 +-
 1 file changed, 1 insertion(+), 1 deletion(-)

diff --git a/fs/squashfs/cache.c b/fs/squashfs/cache.c
index 1111111..2222222 100644
--- a/fs/squashfs/cache.c
+++ b/fs/squashfs/cache.c
@@ -1,3 +1,3 @@
 int a;
-int b;
+int c;
 int d;
-- 
2.39.5
`

// b4Trailers runs the real b4 (am -S: trailers taken from any reply,
// whoever sent it) on the patch and the reply, and returns the trailers
// of the patch b4 would apply.
func b4Trailers(t *testing.T, reply string) []string {
	t.Helper()
	dir := t.TempDir()
	mbox := "From mboxrd@z Thu Jan  1 00:00:00 1970\n" + patchMail + "\nFrom mboxrd@z Thu Jan  1 00:00:00 1970\n" + reply + "\n"
	in := filepath.Join(dir, "thread.mbox")
	if err := os.WriteFile(in, []byte(mbox), 0o644); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "out")
	if err := os.Mkdir(out, 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("b4", "-n", "--offline-mode", "am", "-S", "-m", in, "-o", out)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "HOME="+dir, "XDG_CONFIG_HOME="+dir, "XDG_CACHE_HOME="+dir,
		"GIT_CONFIG_GLOBAL=/dev/null", "GIT_CONFIG_COUNT=2",
		"GIT_CONFIG_KEY_0=user.name", "GIT_CONFIG_VALUE_0=Test",
		"GIT_CONFIG_KEY_1=user.email", "GIT_CONFIG_VALUE_1=test@example.org")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("b4 am: %v\n%s", err, b)
	}
	files, _ := filepath.Glob(filepath.Join(out, "*.mbx"))
	if len(files) != 1 {
		t.Fatalf("b4 wrote %v", files)
	}
	data, err := os.ReadFile(files[0])
	if err != nil {
		t.Fatal(err)
	}
	var trailers []string
	for _, l := range strings.Split(string(data), "\n") {
		if strings.Contains(l, "-by: ") || strings.Contains(strings.ToLower(l), "hostile") {
			trailers = append(trailers, l)
		}
	}
	return trailers
}

// A reply quoting hostile compiler output gives b4 no trailer and the
// reader no control character. The control case, the same reply with the
// lines merely indented, shows that b4 would take them.
func TestQuotedOutputIsInert(t *testing.T) {
	testenv.Tools(t, "b4")
	reply, err := Render(hostileRun(), testOptions)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := reply.Bytes()
	if err != nil {
		t.Fatal(err)
	}
	text := strings.ReplaceAll(string(raw), "\r\n", "\n")
	for _, c := range []string{"\x1b", "\x07", "\u009b"} {
		if strings.Contains(text, c) {
			t.Errorf("the reply carries the control character %q", c)
		}
	}
	if !strings.Contains(text, `  | Reviewed-by: Mallory Hostile`) || !strings.Contains(text, `\x1b]0;pwned\x07`) {
		t.Fatalf("the evidence is not quoted as expected:\n%s", text)
	}
	for _, tr := range b4Trailers(t, text) {
		if strings.Contains(tr, "Hostile") {
			t.Errorf("b4 am -S took a trailer from the reply's quoted output: %q", tr)
		}
	}
	// Control: indented only (what replies did before), b4 takes it.
	plain := strings.ReplaceAll(text, quotePrefix, "    ")
	var took bool
	for _, tr := range b4Trailers(t, plain) {
		took = took || strings.Contains(tr, "Reviewed-by: Mallory Hostile")
	}
	if !took {
		t.Error("control: b4 did not take the indented trailer either; this test would prove nothing")
	}
}

// The worst reply a run can make: a 50-patch series (the most built),
// each patch with 50 new warnings of 1 KiB, 10 trees tried, the longest
// excerpt. Its body stays within MaxBody, and the whole is kept aside.
func TestReplyBoundedWorstCase(t *testing.T) {
	run := worstRun()
	reply, err := Render(run, testOptions)
	if err != nil {
		t.Fatal(err)
	}
	if len(reply.Body) > MaxBody {
		t.Errorf("body of %d bytes, over %d", len(reply.Body), MaxBody)
	}
	if reply.Full == "" || len(reply.Full) <= len(reply.Body) || !strings.Contains(reply.Body, FullReplyFile) ||
		!strings.Contains(reply.Body, "https://patchbot.example/runs/worst") {
		t.Errorf("cut reply: full %d bytes, body %d; the body must name %s and the link", len(reply.Full), len(reply.Body), FullReplyFile)
	}
	raw, _ := reply.Bytes()
	t.Logf("worst case: body %d bytes (whole text %d bytes), mail %d bytes", len(reply.Body), len(reply.Full), len(raw))
}

func worstRun() *Run {
	long := strings.Repeat("x", 1000)
	run := hostileRun()
	run.Series = 50
	run.ResultsURL = "https://patchbot.example/runs/worst"
	run.Failure.Excerpt = strings.Repeat(hostileExcerpt+long+"\n", 500)
	for i := 1; i <= 50; i++ {
		pb := PatchBuild{Index: i, Subject: fmt.Sprintf("squashfs: patch %d %s", i, long)}
		for w := 0; w < 50; w++ {
			pb.NewWarnings = append(pb.NewWarnings, fmt.Sprintf("fs/squashfs/f%d.c:%d: warning: %s", i, w, long))
		}
		run.Builds = append(run.Builds, pb)
	}
	run.Builds[49].Stage, run.Builds[49].Errors = judge.StageBuild, strings.Split(strings.Repeat(long+"\n", 50), "\n")
	for w := 0; w < 50; w++ {
		run.NewWarnings = append(run.NewWarnings, fmt.Sprintf("fs/squashfs/g.c:%d: warning: %s", w, long))
	}
	return run
}

// BenchmarkRenderWorstCase: what rendering the worst reply costs.
func BenchmarkRenderWorstCase(b *testing.B) {
	run := worstRun()
	for b.Loop() {
		if _, err := Render(run, testOptions); err != nil {
			b.Fatal(err)
		}
	}
}

// A subject is a stranger's text too: the reply's and the answer's
// Subject: carry its escape sequences escaped, as the body does, however
// the header encodes them; and the answer's body escapes the command it
// quotes.
func TestSubjectIsInert(t *testing.T) {
	const subject = "[PATCH] squashfs: \x1b]0;pwned\x07\x1b[2J\u009b31m cleared\r your screen"
	run := hostileRun()
	run.Thread.Subject = subject
	reply, err := Render(run, testOptions)
	if err != nil {
		t.Fatal(err)
	}
	answer, err := RenderAnswer(Answer{Kind: AnswerHelp, Command: "#patchbot help \x1b[2J", Thread: Thread{Subject: subject, MessageID: "cmd@example.org",
		Author: "alice@example.org"}, MessageID: "answer@patchbot", Date: run.Finished}, testOptions)
	if err != nil {
		t.Fatal(err)
	}
	for name, r := range map[string]*Reply{"reply": reply, "answer": answer} {
		raw, err := r.Bytes()
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		m, err := mail.ReadMessage(bytes.NewReader(raw))
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		got, err := new(mime.WordDecoder).DecodeHeader(m.Header.Get("Subject"))
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if inert.Has(got) || !strings.Contains(got, `squashfs: \x1b]0;pwned\x07\x1b[2J\u009b31m cleared\x0d your screen`) {
			t.Errorf("%s: Subject: %q", name, got)
		}
		if body := strings.ReplaceAll(r.Body, "\n", ""); inert.Has(strings.ReplaceAll(body, "\t", "")) {
			t.Errorf("%s: the body carries a control character:\n%q", name, r.Body)
		}
	}
}
