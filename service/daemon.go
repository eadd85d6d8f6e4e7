package service

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/patchbot/patchbot/blame"
	"github.com/patchbot/patchbot/mailbox"
	"github.com/patchbot/patchbot/mailbox/outbox"
	"github.com/patchbot/patchbot/reports"
	"github.com/patchbot/patchbot/store"
	"github.com/patchbot/patchbot/suites"
)

// Daemon watches sources, queues jobs, runs them one at a time, and puts
// the replies in the outbox. All of its state is in the store, so a
// restart (or kill -9) resumes where it was.
type Daemon struct {
	Config   Config
	Store    *store.Store
	Pipeline *Pipeline
	// Sources by name; the name keys the stored cursor.
	Sources map[string]mailbox.Source
	// Outbox holds the replies; it sends them when it has a Sender.
	Outbox  *outbox.Outbox
	Log     *slog.Logger
	Metrics *Metrics
	// Poll is how often sources without a push mechanism are read and the
	// queue is looked at; default 30 s.
	Poll time.Duration
	// Backoff is the wait before an infrastructure failure is retried, per
	// attempt; MaxAttempts gives up.
	Backoff     time.Duration
	MaxAttempts int

	wake chan struct{}
}

// Run works until ctx ends: on SIGTERM the caller cancels ctx; the running
// job's stage is abandoned and the job put back in the queue (builds are
// cached, so the retry costs only the stage that was running).
func (d *Daemon) Run(ctx context.Context) error {
	d.defaults()
	n, err := d.Store.RequeueInterrupted(ctx)
	if err != nil {
		return err
	}
	if n > 0 {
		d.Log.Info("requeued jobs interrupted by a restart", "jobs", n)
	}
	var wg sync.WaitGroup
	// The outbox is flushed at start (a reply a crash or an SMTP outage
	// left queued) and every minute, not only when a new reply is queued.
	wg.Add(1)
	go func() {
		defer wg.Done()
		d.Outbox.Run(ctx, time.Minute)
	}()
	if d.Pipeline != nil {
		wg.Add(1)
		go func() {
			defer wg.Done()
			d.fetchTrees(ctx)
		}()
	}
	for name, src := range d.Sources {
		wg.Add(1)
		go func() {
			defer wg.Done()
			d.watch(ctx, name, src)
		}()
	}
	d.work(ctx)
	wg.Wait()
	d.Log.Info("stopped")
	return nil
}

func (d *Daemon) defaults() {
	if d.Log == nil {
		d.Log = slog.Default()
	}
	if d.Poll == 0 {
		d.Poll = 30 * time.Second
	}
	if d.Backoff == 0 {
		d.Backoff = time.Minute
	}
	if d.MaxAttempts == 0 {
		d.MaxAttempts = 5
	}
	if d.Metrics == nil {
		d.Metrics = NewMetrics()
	}
	if d.Outbox == nil {
		d.Outbox = &outbox.Outbox{Store: d.Store, Log: d.Log}
	}
	if d.Outbox.OnUncertain == nil {
		d.Outbox.OnUncertain = func(store.OutboxMessage) { d.Metrics.Uncertain.Inc() }
	}
	d.wake = make(chan struct{}, 1)
}

// watch reads one source until ctx ends, logging and retrying failures.
func (d *Daemon) watch(ctx context.Context, name string, src mailbox.Source) {
	log := d.Log.With("source", name)
	fn := func(m *mailbox.Message, cur string) error { return d.Ingest(ctx, name, m, cur) }
	for ctx.Err() == nil {
		cur, err := d.Store.Cursor(ctx, name)
		if err != nil {
			log.Error("reading cursor", "err", err)
		} else if w, ok := src.(mailbox.Watcher); ok {
			err = w.Watch(ctx, cur, fn)
		} else {
			_, err = src.Poll(ctx, cur, fn)
		}
		if err != nil && ctx.Err() == nil {
			d.Metrics.SourceErrors.WithLabelValues(name).Inc()
			log.Warn("source failed; retrying", "err", err)
		}
		select {
		case <-ctx.Done():
		case <-time.After(d.Poll):
		}
	}
}

// Ingest keeps one mail and acts on it: a complete series that touches the
// watched paths becomes a job, an email command is answered. The mail and
// the source's cursor are stored together first, so a crash after this
// point does not lose the mail and a restart does not read it again.
func (d *Daemon) Ingest(ctx context.Context, source string, m *mailbox.Message, cur string) error {
	if d.wake == nil {
		d.defaults()
	}
	d.Metrics.Messages.Inc()
	thread := threadOf(m)
	if err := d.Store.SaveMessage(ctx, source, cur, m.MessageID, thread, m.Raw); err != nil {
		return err
	}
	if cmds := mailbox.ParseCommands(m); len(cmds) > 0 {
		return d.commands(ctx, m, thread, cmds)
	}
	if m.Diff == "" {
		return nil
	}
	series, err := d.thread(ctx, thread, "")
	if err != nil {
		return err
	}
	for _, s := range series {
		log := d.Log.With("series", s.Subject, "version", s.Version)
		if !s.Complete {
			log.Info("series incomplete; waiting for the rest", "missing", s.Missing, "reason", s.Reason,
				"answer_after", d.Config.IncompleteAfter)
			if err := d.waitForParts(ctx, thread, s); err != nil {
				return err
			}
			continue
		}
		if !touches(s.Files(), d.Config.Paths) {
			log.Info("series touches no watched path; not tested", "files", s.Files())
			continue
		}
		req := NewRequest(s, d.Config.Suites, ReplyTarget(s))
		if err := d.enqueue(ctx, "list", fmt.Sprintf("series:%s:%s:v%d", mailbox.AddrOf(s.Author), s.Title, s.Version), req); err != nil {
			return err
		}
	}
	return nil
}

// waitForParts queues a job that looks at an incomplete series again once
// IncompleteAfter has passed: if the parts are still missing, the author is
// told which, and why the series was not tested.
func (d *Daemon) waitForParts(ctx context.Context, thread string, s *mailbox.Series) error {
	if len(s.Patches) == 0 && s.Cover == nil {
		return nil
	}
	replyTo, subject, refs := "", s.Subject, []string(nil)
	if s.Cover != nil {
		replyTo, refs = s.Cover.MessageID, s.Cover.References
	} else {
		replyTo, subject, refs = s.Patches[0].MessageID, s.Patches[0].Subject, s.Patches[0].Message.References
	}
	req := &Request{Title: s.Subject,
		Thread:     reports.Thread{Subject: subject, MessageID: replyTo, References: refs, Author: s.Author},
		Incomplete: &IncompleteCheck{ThreadID: thread, Author: mailbox.AddrOf(s.Author), Title: s.Title, Version: s.Version}}
	data, err := json.Marshal(req)
	if err != nil {
		return err
	}
	_, _, err = d.Store.AddJob(ctx, store.Job{Dedupe: fmt.Sprintf("incomplete:%s:%s:v%d", mailbox.AddrOf(s.Author), s.Title, s.Version),
		Trigger: "incomplete", Title: s.Subject, Request: data, NotBefore: time.Now().Add(d.Config.IncompleteAfter)})
	return err
}

// checkIncomplete runs an incomplete-series job: nothing to say when the
// series was completed meanwhile (its own job tests it), else the answer.
func (d *Daemon) checkIncomplete(ctx context.Context, j *store.Job, req *Request) error {
	c := req.Incomplete
	series, err := d.thread(ctx, c.ThreadID, "")
	if err != nil {
		return err
	}
	for _, s := range series {
		if s.Title != c.Title || s.Version != c.Version || mailbox.AddrOf(s.Author) != c.Author {
			continue
		}
		if s.Complete {
			d.Log.Info("series completed while waiting; its own job tests it", "series", s.Subject)
			return nil
		}
		missing := make([]string, len(s.Missing))
		for i, m := range s.Missing {
			missing[i] = fmt.Sprintf("%d/%d", m, s.Total)
		}
		return d.answer(ctx, reports.Answer{Kind: reports.AnswerIncomplete, Thread: req.Thread,
			MessageID: d.jobReplyID(j), Missing: missing, Waited: humanDuration(d.Config.IncompleteAfter), Reason: s.Reason})
	}
	return nil
}

// humanDuration writes 6h0m0s as "6 hours" and 90m as "1h30m0s".
func humanDuration(d time.Duration) string {
	switch {
	case d%time.Hour == 0 && d > time.Hour:
		return fmt.Sprintf("%d hours", d/time.Hour)
	case d == time.Hour:
		return "an hour"
	case d%time.Minute == 0 && d < time.Hour:
		return fmt.Sprintf("%d minutes", d/time.Minute)
	}
	return d.String()
}

// thread assembles the series of a stored thread, leaving out one mail
// (the command being answered).
func (d *Daemon) thread(ctx context.Context, thread, skip string) ([]*mailbox.Series, error) {
	raws, err := d.Store.ThreadMessages(ctx, thread)
	if err != nil {
		return nil, err
	}
	var msgs []*mailbox.Message
	for _, raw := range raws {
		m, err := mailbox.ParseBytes(raw)
		if err != nil || m.MessageID == skip {
			continue // it was parsed once already; a stored mail that no longer parses is skipped
		}
		msgs = append(msgs, m)
	}
	return mailbox.Assemble(msgs), nil
}

func (d *Daemon) enqueue(ctx context.Context, trigger, dedupe string, req *Request) error {
	data, err := json.Marshal(req)
	if err != nil {
		return err
	}
	id, added, err := d.Store.AddJob(ctx, store.Job{Dedupe: dedupe, Trigger: trigger, Title: req.Title, Request: data})
	if err != nil {
		return err
	}
	if added {
		d.Log.Info("job queued", "job", id, "trigger", trigger, "title", req.Title)
		select {
		case d.wake <- struct{}{}:
		default:
		}
	}
	return nil
}

// commands answers the email commands of one mail.
func (d *Daemon) commands(ctx context.Context, m *mailbox.Message, thread string, cmds []mailbox.Command) error {
	series, err := d.thread(ctx, thread, m.MessageID)
	if err != nil {
		return err
	}
	var target *mailbox.Series
	for _, s := range series {
		if len(s.Patches) > 0 && (target == nil || s.Version > target.Version) {
			target = s
		}
	}
	for i, c := range cmds {
		key := fmt.Sprintf("%s#%d", m.MessageID, i)
		log := d.Log.With("command", c.Line, "from", m.From)
		a := reports.Answer{Command: c.Line, Thread: reports.Thread{Subject: m.Subject, MessageID: m.MessageID,
			References: m.References, Author: m.From}, MessageID: fmt.Sprintf("patchbot-answer-%s@patchbot", sanitize(key))}
		switch {
		case c.Err != "":
			a.Kind, a.Reason = reports.AnswerNotUnderstood, c.Err
			a.Suites, a.Profiles = suiteNames()
		case c.Name == "help":
			a.Kind = reports.AnswerHelp
			a.Suites, a.Profiles = suiteNames()
		case target == nil:
			a.Kind = reports.AnswerNoSeries
		default:
			ok, reason, err := Authorize(d.Config.Commands, d.Store, time.Now(), m.From, target.Author)
			if err != nil {
				return err
			}
			if _, err := d.Store.LogCommand(ctx, key, mailbox.AddrOf(m.From), time.Now(), ok); err != nil {
				return err
			}
			if !ok {
				d.Metrics.Commands.WithLabelValues("refused").Inc()
				log.Info("command refused", "reason", reason)
				if !d.Config.Commands.AnswerRefused {
					continue
				}
				a.Kind, a.Reason = reports.AnswerRefused, reason
				break
			}
			d.Metrics.Commands.WithLabelValues("accepted").Inc()
			req := NewRequest(target, d.Config.Suites, m.MessageID)
			req.Thread.Subject = m.Subject
			req.Thread.References = append(append([]string{}, m.References...), m.MessageID)
			req.Thread.Author = m.From
			req.Command = c.Line
			if len(c.Suites) > 0 {
				req.Suites = c.Suites
			}
			if c.Profile != "" {
				req.Profile = c.Profile
			}
			if err := withOptions(req, c, target); err != nil {
				a.Kind, a.Reason = reports.AnswerNotUnderstood, err.Error()
				break
			}
			if err := d.enqueue(ctx, "command", "command:"+key, req); err != nil {
				return err
			}
			continue
		}
		if err := d.answer(ctx, a); err != nil {
			return err
		}
	}
	return nil
}

// suiteNames lists the valid suites and profiles, for help and errors.
func suiteNames() (names, profiles []string) {
	all, _ := suites.All()
	seen := map[string]bool{}
	for _, s := range all {
		names = append(names, s.Name)
		for _, p := range s.ProfileNames() {
			if !seen[p] {
				seen[p] = true
				profiles = append(profiles, p)
			}
		}
	}
	return names, profiles
}

// answer renders a short answer and puts it in the outbox.
func (d *Daemon) answer(ctx context.Context, a reports.Answer) error {
	a.Date = time.Now()
	r, err := reports.RenderAnswer(a, d.Config.Reply)
	if err != nil {
		return err
	}
	return d.queueReply(ctx, r)
}

func (d *Daemon) queueReply(ctx context.Context, r *reports.Reply) error {
	raw, err := r.Bytes()
	if err != nil {
		return err
	}
	rcpt, err := r.Recipients()
	if err != nil {
		return err
	}
	added, err := d.Outbox.Put(ctx, outbox.Message{MessageID: r.Header.MessageID,
		From: mailbox.AddrOf(d.Config.Reply.From), To: rcpt, Raw: raw})
	if err != nil {
		return fmt.Errorf("writing the reply to the outbox: %w", err)
	}
	if added {
		d.Metrics.Replies.Inc()
		d.Log.Info("reply in the outbox", "message_id", r.Header.MessageID, "to", rcpt)
	}
	if _, err := d.Outbox.Flush(ctx); err != nil {
		d.Log.Warn("sending the outbox", "err", err)
	}
	return nil
}

// work runs queued jobs until ctx ends.
func (d *Daemon) work(ctx context.Context) {
	for ctx.Err() == nil {
		ran, err := d.RunOnce(ctx)
		if err != nil {
			d.Log.Error("claiming a job", "err", err)
		}
		if !ran {
			d.updateGauges(ctx)
			select {
			case <-ctx.Done():
			case <-d.wake:
			case <-time.After(d.Poll):
			}
		}
	}
}

// RunOnce runs the next job that is due, if any, and says whether it ran
// one.
func (d *Daemon) RunOnce(ctx context.Context) (bool, error) {
	if d.wake == nil {
		d.defaults()
	}
	j, err := d.Store.ClaimJob(ctx, time.Now())
	if errors.Is(err, store.ErrNoJob) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	d.runJob(ctx, j)
	return true, nil
}

func (d *Daemon) runJob(ctx context.Context, j *store.Job) {
	log := d.Log.With("job", j.ID, "title", j.Title, "attempt", j.Attempts)
	var req Request
	if err := json.Unmarshal(j.Request, &req); err != nil {
		j.State, j.Blame, j.Error = store.JobFailed, blame.Infra, "undecodable request: "+err.Error()
		d.Store.UpdateJob(ctx, j)
		return
	}
	if req.Incomplete != nil {
		if err := d.checkIncomplete(ctx, j, &req); err != nil {
			j.State, j.Blame, j.Error = store.JobQueued, blame.Of(err), err.Error()
			j.NotBefore = time.Now().Add(d.Backoff)
		} else {
			j.State, j.Stage = store.JobDone, "done"
		}
		d.Store.UpdateJob(context.WithoutCancel(ctx), j)
		return
	}
	j.RunDir = filepath.Join(d.Config.StateDir, "runs", fmt.Sprintf("job-%d", j.ID))
	req.ReplyID = d.jobReplyID(j)
	j.Stage = "running"
	d.Store.UpdateJob(ctx, j)
	log.Info("job started")
	start := time.Now()
	out, err := d.Pipeline.Execute(ctx, &req, j.RunDir)
	d.Metrics.JobSeconds.Observe(time.Since(start).Seconds())
	bg := context.WithoutCancel(ctx)
	switch {
	case ctx.Err() != nil:
		// Shutting down: the job goes back to the queue, and the restart
		// runs it again.
		j.State, j.Stage = store.JobQueued, "interrupted"
		log.Info("job interrupted by shutdown; it will run again after restart")
	case err != nil:
		// Execute's errors are never the patch's (blame.Of is Infra): a
		// base kernel that panics is retried, not mailed.
		j.Blame, j.Error = blame.Of(err), err.Error()
		d.Metrics.Failures.WithLabelValues(string(j.Blame)).Inc()
		if j.Attempts >= d.MaxAttempts {
			j.State = store.JobFailed
			log.Error("job failed for good (infrastructure)", "err", err)
		} else {
			j.State, j.NotBefore = store.JobQueued, time.Now().Add(d.Backoff*time.Duration(1<<(j.Attempts-1)))
			log.Warn("job failed (infrastructure); retrying later", "err", err, "not_before", j.NotBefore)
		}
	default:
		if out.Run.Failure != nil {
			d.Metrics.Failures.WithLabelValues(string(blame.Patch)).Inc()
			j.Blame, j.Error = blame.Patch, string(out.Run.Failure.Stage)+": "+out.Run.Failure.Detail
		}
		if err := d.queueReply(bg, out.Reply); err != nil {
			j.State, j.Blame, j.Error = store.JobQueued, blame.Infra, err.Error()
			break
		}
		j.State, j.Stage = store.JobDone, "done"
		log.Info("job done", "failure", j.Error, "seconds", time.Since(start).Round(time.Second).Seconds())
	}
	if err := d.Store.UpdateJob(bg, j); err != nil {
		log.Error("recording the job's end", "err", err)
	}
}

func (d *Daemon) updateGauges(ctx context.Context) {
	counts, err := d.Store.JobCounts(ctx)
	if err != nil {
		return
	}
	for _, st := range []store.JobState{store.JobQueued, store.JobRunning, store.JobDone, store.JobFailed} {
		d.Metrics.Jobs.WithLabelValues(string(st)).Set(float64(counts[st]))
	}
}

// threadOf is the Message-ID that starts m's thread.
func threadOf(m *mailbox.Message) string {
	if len(m.References) > 0 {
		return m.References[0]
	}
	if m.InReplyTo != "" {
		return m.InReplyTo
	}
	return m.MessageID
}

// touches says whether any file is under one of the path prefixes (all
// files count when no prefix is configured).
func touches(files, prefixes []string) bool {
	if len(prefixes) == 0 {
		return len(files) > 0
	}
	for _, f := range files {
		for _, p := range prefixes {
			if strings.HasPrefix(f, p) {
				return true
			}
		}
	}
	return false
}

// jobReplyID is the Message-ID of a job's reply: one per job, whatever run
// of it produced the reply.
func (d *Daemon) jobReplyID(j *store.Job) string {
	return fmt.Sprintf("patchbot-job-%d-%s@%s", j.ID, shortHash(j.Dedupe), domainOf(d.Config.Reply.From))
}

func shortHash(s string) string {
	h := sha256.Sum256([]byte(s))
	return hex.EncodeToString(h[:6])
}

func domainOf(from string) string {
	a := mailbox.AddrOf(from)
	if i := strings.LastIndex(a, "@"); i >= 0 {
		return a[i+1:]
	}
	return "patchbot.invalid"
}

func sanitize(s string) string {
	var b bytes.Buffer
	for _, r := range s {
		if r < 128 && (r == '.' || r == '-' || r == '_' || r >= '0' && r <= '9' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z') {
			b.WriteRune(r)
		} else {
			b.WriteByte('_')
		}
	}
	return b.String()
}
