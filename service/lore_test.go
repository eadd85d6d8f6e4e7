package service

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/patchbot/patchbot/mailbox"
	"github.com/patchbot/patchbot/mailbox/loretest"
	"github.com/patchbot/patchbot/store"
)

// The daemon watches a list on a real public-inbox (what lore.kernel.org
// runs): mail delivered to the list becomes a job, and read again later,
// nothing new.
func TestDaemonWatchesARealPublicInbox(t *testing.T) {
	srv := loretest.Start(t, "linux-fsdevel", "linux-fsdevel@vger.kernel.org")
	data, err := os.ReadFile("../testdata/mbox/squashfs-thundering-herd.mbox")
	if err != nil {
		t.Fatal(err)
	}
	var raws [][]byte
	if err := mailbox.ReadMbox(bytes.NewReader(data), func(raw []byte, _ int64) error {
		raws = append(raws, append([]byte(nil), raw...))
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	d := newTestDaemon(t, t.TempDir())
	// The source's own poll: is what the daemon polls at (its default is
	// 30 s, which would outlast the test).
	sc := mailbox.SourceConfig{Name: "lore-fsdevel", Lore: srv.URL(), Poll: 200 * time.Millisecond}
	d.Config.Sources = []mailbox.SourceConfig{sc}
	srcs, err := d.Config.OpenSources(nil)
	if err != nil {
		t.Fatal(err)
	}
	d.Sources = srcs
	if l, ok := srcs[sc.Name].(*mailbox.Lore); !ok || l.Mirror != filepath.Join(d.Config.StateDir, "lore", sc.Name) || l.Since != "now" {
		t.Fatalf("the daemon's lore source: %+v", srcs[sc.Name])
	}
	d.Pipeline.Tester = &fakeTester{}

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }()
	defer func() {
		cancel()
		<-done
	}()
	// Started on an empty list: the start point is stored before any mail,
	// so that a restart before the first mail reads it still.
	deadline := time.Now().Add(30 * time.Second)
	for {
		if cur, _ := d.Store.Cursor(context.Background(), sc.Name); cur == "lore2:" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no start cursor stored for the empty list")
		}
		time.Sleep(50 * time.Millisecond)
	}
	srv.Deliver(t, raws[0]) // the seed patch, as the list's MTA delivers it
	deadline = time.Now().Add(60 * time.Second)
	for {
		jobs, _ := d.Store.Jobs(context.Background())
		if len(jobs) == 1 && jobs[0].State == store.JobDone {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no job done from the public-inbox's mail after 60 s: %+v\n%s", jobs, srv.Logs())
		}
		time.Sleep(200 * time.Millisecond)
	}
	// The ping and the review come later: kept, no new job.
	srv.Deliver(t, raws[1])
	srv.Deliver(t, raws[2])
	deadline = time.Now().Add(30 * time.Second)
	for {
		if ok, _ := d.Store.HasMessage(context.Background(), "20260803123958.414dd2ed@pumpkin"); ok || time.Now().After(deadline) {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	jobs, _ := d.Store.Jobs(context.Background())
	if len(jobs) != 1 {
		t.Errorf("%d jobs after the follow-ups, want 1", len(jobs))
	}
	if out := d.outbox(t); len(out) != 1 {
		t.Errorf("%d replies, want the one to the seed patch", len(out))
	}
}
