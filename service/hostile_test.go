package service

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/patchbot/patchbot/images"
	"github.com/patchbot/patchbot/judge"
	"github.com/patchbot/patchbot/mailbox"
	"github.com/patchbot/patchbot/reports"
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
	req := NewRequest(s, SuitesConfig{Profile: "quick", Runs: 3}, ReplyTarget(s))
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
