package service

import (
	"bytes"
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/patchbot/patchbot/config"
	"github.com/patchbot/patchbot/mailbox/outbox"
	"github.com/patchbot/patchbot/store"
)

// A run's files come from a worker's run directory, where builds and
// guests wrote: the coordinator writes only plain relative paths, inside
// the run's own directory.
func TestCollectRunsWritesOnlyInsideTheRun(t *testing.T) {
	for _, tc := range []struct {
		name string
		ok   bool
	}{
		{"run.json", true},
		{"logs/build-patched.log", true},
		{"../escape", false},
		{"/etc/passwd", false},
		{"a/../../b", false},
		{".hidden", false},
		{"a//b", false},
		{"", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			state := t.TempDir()
			st, err := store.Open(filepath.Join(state, "state.db"))
			if err != nil {
				t.Fatal(err)
			}
			defer st.Close()
			st.AddJob(ctx, store.Job{Dedupe: "a", Request: []byte("{}")})
			j, err := st.ClaimJob(ctx, store.Claim{Worker: "w", Lease: time.Hour, At: time.Now()})
			if err != nil {
				t.Fatal(err)
			}
			j.State = store.JobDone
			if err := st.EndJob(ctx, j, []store.RunFile{{Name: "reply.eml", Data: []byte("mail")}, {Name: tc.name, Data: []byte("x")}}); err != nil {
				t.Fatal(err)
			}
			var logs bytes.Buffer
			n, err := CollectRuns(ctx, config.Config{StateDir: state}, st, &outbox.Outbox{Store: st}, NewMetrics(),
				slog.New(slog.NewTextHandler(&logs, nil)))
			run := filepath.Join(state, "runs", "job-1")
			// The run is written either way, with its good files.
			if err != nil || n != 1 {
				t.Fatalf("CollectRuns = %d, %v", n, err)
			}
			if b, err := os.ReadFile(filepath.Join(run, "reply.eml")); err != nil || string(b) != "mail" {
				t.Errorf("reply.eml: %q, %v", b, err)
			}
			if p, _ := st.PendingRuns(ctx, 10); len(p) != 0 {
				t.Errorf("a collected run is still pending: %v", p)
			}
			if tc.ok {
				if b, err := os.ReadFile(filepath.Join(run, filepath.FromSlash(tc.name))); err != nil || string(b) != "x" {
					t.Errorf("%s: %q, %v", tc.name, b, err)
				}
				return
			}
			if !strings.Contains(logs.String(), "files of a run left out") {
				t.Errorf("%q was not logged as left out:\n%s", tc.name, logs.String())
			}
			ents, _ := os.ReadDir(run)
			if len(ents) != 1 {
				t.Errorf("the run holds %d entries, want reply.eml alone", len(ents))
			}
			for _, p := range []string{filepath.Join(state, "escape"), filepath.Join(state, "b"), filepath.Join(state, "runs", "escape")} {
				if _, err := os.Stat(p); err == nil {
					t.Errorf("%s was written outside the run", p)
				}
			}
		})
	}
}
