package service

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/patchbot/patchbot/images"
	"github.com/patchbot/patchbot/intake"
	"github.com/patchbot/patchbot/judge"
	"github.com/patchbot/patchbot/mailbox"
	"github.com/patchbot/patchbot/reports"
	"github.com/patchbot/patchbot/store"
)

// A series of 60 patches (testdata/hostile/long-series.mbox, a real
// git am-able series) gets one clear answer and no build: the real
// images.Kernels refuses it before it opens a tree, in a cache of the
// test's own that stays empty.
func TestLongSeriesOneAnswerNoBuild(t *testing.T) {
	ctx := context.Background()
	src, err := mailbox.Open(mailbox.SourceConfig{Mbox: "../testdata/hostile/long-series.mbox"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	msgs, err := mailbox.Collect(ctx, src)
	if err != nil {
		t.Fatal(err)
	}
	s, _, err := mailbox.Choose(mailbox.Assemble(msgs), 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(s.Patches) != 60 || !s.Complete {
		t.Fatalf("assembled %d patches (complete %v), want the 60", len(s.Patches), s.Complete)
	}
	cache := t.TempDir()
	k := &images.Kernels{Builder: &images.Builder{Cache: cache}}
	p := &Pipeline{Builder: k, Tester: &effectTester{effect: single(1)}, Reply: reports.ReplyOptions{From: "patchbot <patchbot@example.org>"}}
	req := intake.NewRequest(s, intake.SuitesConfig{Profile: "quick", Runs: 3}, intake.ReplyTarget(s))
	start := time.Now()
	out, err := p.Execute(ctx, req, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if f := out.Run.Failure; f == nil || f.Stage != judge.StageSeries {
		t.Fatalf("failure %+v, want the series refused", out.Run.Failure)
	}
	for _, want := range []string{"The series was not tested", "60 patches", "at most 50"} {
		if !says(out.Reply.Body, want) {
			t.Errorf("the reply does not say %q:\n%s", want, out.Reply.Body)
		}
	}
	if entries, _ := os.ReadDir(filepath.Join(cache, "kernels")); len(entries) > 0 {
		t.Errorf("%d build directories in the cache, want none", len(entries))
	}
	if _, err := os.Stat(filepath.Join(cache, "trees")); err == nil {
		t.Error("a tree was opened or imported for a series refused at once")
	}
	t.Logf("answered in %s, reply %d bytes", time.Since(start).Round(time.Millisecond), len(out.Reply.Body))
}

// A command with a 200 KB word and a URL, under a spam subject, from a
// forged From: (no signature): the address gets one short answer of
// patchbot's own words, with nothing of the mail in it (it once got
// 1.6 KB echoing the word's first bytes and the URL), through the daemon
// into the outbox as it would be sent.
func TestForgedCommandIsNotEchoed(t *testing.T) {
	d := newTestDaemon(t, t.TempDir())
	d.ingestRaw(t, "inbox", "From: Buy Now <spam@spam.example>\nTo: patchbot@localhost\n"+
		"Subject: CHEAP PILLS http://spam.example/buy\nDate: Sat, 5 Dec 2026 12:00:00 +0000\nMessage-ID: <spam@spam.example>\n\n"+
		"#patchbot BUY-NOW-http://spam.example/"+strings.Repeat("x", 200<<10)+"\n")
	out := d.outboxAll(t)
	if len(out) != 1 {
		t.Fatalf("%d mails, want one answer", len(out))
	}
	raw := string(out[0].Raw)
	if len(raw) > 1024 || strings.Contains(raw, "spam.example/") || strings.Contains(raw, "PILLS") ||
		strings.Contains(raw, "xxxx") || strings.Contains(raw, "Buy Now") || strings.Contains(raw, "In-Reply-To") {
		t.Errorf("an answer of %d bytes repeats what the forged mail said:\n%s", len(raw), raw)
	}
	if strings.Join(out[0].Recipients, " ") != "spam@spam.example" || out[0].Budget != store.BudgetUnverified {
		t.Errorf("answer to %v from budget %q", out[0].Recipients, out[0].Budget)
	}
	t.Logf("the answer, %d bytes:\n%s", len(raw), raw)
}
