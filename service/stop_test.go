package service

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/patchbot/patchbot/mailbox"
)

// A stop is not an error, nor a death: a daemon stopped while it acts on
// a mail (read and nothing stored; written and not committed; committed
// and its cursor not yet saved) logs no error, and the mail it was on is
// read again at the next start, however often that happens, and never set
// aside as a mail the daemon died on.
func TestStopDuringIngestIsQuiet(t *testing.T) {
	for _, at := range []Step{StepIngestRead, StepIngestWritten, StepIngestCommitted} {
		t.Run(string(at), func(t *testing.T) {
			d := newTestDaemon(t, t.TempDir())
			d.Config.Sources = []mailbox.SourceConfig{{Name: "list", Mbox: "../testdata/mbox/squashfs-thundering-herd.mbox",
				List: "linux-fsdevel@vger.kernel.org", Poll: 20 * time.Millisecond}}
			srcs, err := d.Config.OpenSources(nil)
			if err != nil {
				t.Fatal(err)
			}
			d.Sources = srcs
			var logs syncBuffer
			d.Log = slog.New(slog.NewJSONHandler(&logs, nil))
			// Stopped three times at the same step of the same mail, more
			// than the deaths that set a mail aside.
			for stop := 0; stop < 3; stop++ {
				ctx, cancel := context.WithCancel(context.Background())
				var once sync.Once
				d.OnStep = func(s Step) {
					if s == at {
						once.Do(cancel)
					}
				}
				done := make(chan error, 1)
				go func() { done <- d.Run(ctx) }()
				select {
				case err := <-done:
					if err != nil {
						t.Fatalf("stop %d: Run = %v", stop, err)
					}
				case <-time.After(30 * time.Second):
					cancel()
					t.Fatalf("stop %d: the daemon did not reach %s", stop, at)
				}
				cancel()
			}
			if l := logs.String(); strings.Contains(l, `"level":"ERROR"`) || strings.Contains(l, `"level":"WARN"`) {
				t.Errorf("a stop was logged as a failure:\n%s", l)
			}
			// Started again and left to run, it reads every mail.
			d.OnStep = nil
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() { done <- d.Run(ctx) }()
			defer func() { cancel(); <-done }()
			deadline := time.Now().Add(30 * time.Second)
			for {
				if ok, _ := d.Store.HasMessage(ctx, "20260803123958.414dd2ed@pumpkin"); ok {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("the mbox's last mail was not kept:\n%s", logs.String())
				}
				time.Sleep(20 * time.Millisecond)
			}
			if aside, err := d.Store.SetAsideMail(ctx); err != nil || len(aside) != 0 {
				t.Errorf("set aside after stops: %+v, %v", aside, err)
			}
			if jobs, _ := d.Store.Jobs(ctx); len(jobs) != 1 || jobs[0].Trigger != "list" {
				t.Errorf("jobs %+v, want the seed's", jobs)
			}
		})
	}
}

// syncBuffer is a log's buffer written from the daemon's goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
