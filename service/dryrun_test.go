package service

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/patchbot/patchbot/config"
	"github.com/patchbot/patchbot/intake"
	"github.com/patchbot/patchbot/mailbox"
)

// The dry run's config shape builds and boots nothing, takes the times it
// is given, and says so in the reply: a rehearsal must never pass for a
// measurement.
func TestDryRunSaysSo(t *testing.T) {
	t.Setenv("PATCHBOT_CACHE", t.TempDir())
	cfg := config.Default()
	if err := config.Decode([]byte("dry_run: {build: 50ms, round: 20ms}\nsuites: {runs: 2}\n"), &cfg); err != nil {
		t.Fatal(err)
	}
	p, err := NewPipeline(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile("../testdata/mbox/squashfs-thundering-herd.mbox")
	if err != nil {
		t.Fatal(err)
	}
	var msgs []*mailbox.Message
	mailbox.ReadMbox(bytes.NewReader(raw), func(b []byte, _ int64) error {
		if m, err := mailbox.ParseBytes(b); err == nil {
			msgs = append(msgs, m)
		}
		return nil
	})
	s, _, err := mailbox.Choose(mailbox.AssembleVersions(msgs), 0)
	if err != nil {
		t.Fatal(err)
	}
	req := intake.NewRequest(s, cfg.Suites, intake.ReplyTarget(s))
	start := time.Now()
	out, err := p.Execute(context.Background(), req, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	// Two builds of 50 ms, two rounds a side of 20 ms.
	if took := time.Since(start); took < 180*time.Millisecond {
		t.Errorf("the dry run took %s, less than its builds and rounds", took)
	}
	body := out.Reply.Body
	if !strings.Contains(body, "dry run (nothing built or booted)") || out.Run.Failure != nil {
		t.Errorf("the dry run's reply does not say it is one (failure %+v):\n%s", out.Run.Failure, body)
	}
	if len(out.Reply.Folded) > 0 {
		t.Errorf("the dry run's reply has lines too wide: %v", out.Reply.Folded)
	}
	log, _ := os.ReadFile(filepath.Join(os.Getenv("PATCHBOT_CACHE"), "dry-run", "builds.log"))
	if string(log) != "base\npatched\n" {
		t.Errorf("builds.log = %q, want the base and the patched build", log)
	}
}
