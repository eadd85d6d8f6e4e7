package service

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/patchbot/patchbot/blame"
	"github.com/patchbot/patchbot/mailbox"
	"github.com/patchbot/patchbot/mailbox/outbox"
	"github.com/patchbot/patchbot/reports"
	"github.com/patchbot/patchbot/reports/web"
	"github.com/patchbot/patchbot/store"
	"github.com/patchbot/patchbot/suites"
)

// Daemon is the coordinator: it watches sources, queues jobs, runs the
// checks that look at stored mail (an incomplete series' wait), collects
// the runs that workers stored, expires the leases of workers that died,
// and sends the replies from the outbox. With a Worker (the single host's
// default, fleet.local_worker) it also runs the jobs, in this process; a
// fleet's workers run them elsewhere (patchbot worker). All of its state
// is in the store, so a restart (or kill -9) resumes where it was.
type Daemon struct {
	Config   Config
	Store    *store.Store
	Pipeline *Pipeline
	// Worker runs jobs in this process; when nil and the config's
	// fleet.local_worker is on, one is made over Pipeline.
	Worker *Worker
	// Name owns the coordinator's own claims (the checks); default
	// HOST/coordinator.
	Name string
	// Sources by name; the name keys the stored cursor.
	Sources map[string]mailbox.Source
	// Outbox holds the replies; it sends them when it has a Sender.
	Outbox  *outbox.Outbox
	Log     *slog.Logger
	Metrics *Metrics
	// Poll is how often sources without a push mechanism are read; default
	// 30 s. The queue is looked at every fleet.poll.
	Poll time.Duration
	// Retry is how failed and crashed jobs are tried again; the local
	// worker gets the same.
	Retry
	// FlushEvery is how often the outbox is flushed besides at start and
	// when a reply is committed (a retry, a dead sender's claim that ran
	// out); default one minute.
	FlushEvery time.Duration
	// OnStep is called at each step of handling a mail and running a job;
	// crash tests stop the process there. Nil in production.
	OnStep func(Step)

	wake    chan struct{} // the coordinator's loop: a run was stored, a check may be due
	sources map[string]mailbox.SourceConfig

	parsed *parsedMail // stored mail, parsed once
}

// progressOf is the dashboard's view of a running job's progress, when
// this process runs it.
func (d *Daemon) progressOf(jobID int64) (web.Progress, bool) {
	if d.Worker == nil {
		return web.Progress{}, false
	}
	return d.Worker.progressOf(jobID)
}

// Wake tells the workers in this process, and the coordinator's loop, that
// a job is waiting.
func (d *Daemon) Wake() {
	if d.Worker != nil {
		d.Worker.Wake()
	}
	d.kick()
}

// kick wakes the coordinator's loop.
func (d *Daemon) kick() {
	if d.wake == nil {
		return
	}
	select {
	case d.wake <- struct{}{}:
	default:
	}
}

// Step is a point in the daemon's work where a crash test kills it.
type Step string

const (
	StepIngestRead      Step = "ingest-read"      // a mail read from a source; nothing stored
	StepIngestWritten   Step = "ingest-written"   // the mail, cursor, commands, jobs and answers written, not committed
	StepIngestCommitted Step = "ingest-committed" // all of it committed; the answers not sent
	StepJobClaimed      Step = "job-claimed"      // a job is running
	StepJobExecuted     Step = "job-executed"     // its reply rendered, not in the outbox
	StepJobReplied      Step = "job-replied"      // its reply in the outbox, the job not marked done
	StepJobDone         Step = "job-done"         // the job marked done
)

func (d *Daemon) step(s Step) {
	if d.OnStep != nil {
		d.OnStep(s)
	}
}

// Run works until ctx ends: on SIGTERM the caller cancels ctx; the running
// job's stage is abandoned and the job put back in the queue (builds are
// cached, so the retry costs only the stage that was running).
func (d *Daemon) Run(ctx context.Context) error {
	d.defaults()
	if err := d.recoverJobs(ctx); err != nil {
		return err
	}
	if un, err := d.Outbox.Uncertain(ctx); err == nil && len(un) > 0 {
		ids := make([]string, len(un))
		for i, m := range un {
			ids[i] = m.MessageID
		}
		d.Log.Error("replies whose delivery is uncertain wait for a person", "count", len(un), "message_ids", ids)
	}
	var wg sync.WaitGroup
	// The outbox is flushed at start (a reply a crash or an SMTP outage
	// left queued), when a reply is committed, and every minute.
	wg.Add(1)
	go func() {
		defer wg.Done()
		d.Outbox.Run(ctx, d.FlushEvery)
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
	if d.Worker != nil {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := d.Worker.Run(ctx); err != nil {
				d.Log.Error("the worker stopped", "err", err)
			}
		}()
	}
	d.coordinate(ctx)
	wg.Wait()
	d.Log.Info("stopped")
	return nil
}

// recoverJobs runs once at start: a job left running under the
// coordinator's name or its worker's was running when the daemon died,
// and one whose lease ran out meanwhile lost its worker. Each is queued
// again, or parked after MaxCrashes deaths.
func (d *Daemon) recoverJobs(ctx context.Context) error {
	requeued, parked, err := d.Store.RecoverJobs(ctx, d.Name, d.MaxCrashes)
	if err != nil {
		return err
	}
	logLost(d.Log, d.Metrics, requeued, parked, "the daemon died while running it")
	if d.Worker != nil {
		if err := d.Worker.Recover(ctx); err != nil {
			return err
		}
	}
	return d.expire(ctx)
}

// expire applies the crash rule to jobs whose worker's lease ran out.
func (d *Daemon) expire(ctx context.Context) error {
	requeued, parked, err := d.Store.ExpireJobs(ctx, time.Now(), d.MaxCrashes)
	if err != nil {
		return err
	}
	logLost(d.Log, d.Metrics, requeued, parked, "its worker's lease ran out (the worker died, or lost the database)")
	return nil
}

// coordinate is the coordinator's loop: due checks, leases that ran out,
// runs to collect, gauges; every fleet.poll, and when woken.
func (d *Daemon) coordinate(ctx context.Context) {
	for ctx.Err() == nil {
		for {
			ran, err := d.checkOnce(ctx)
			if err != nil && ctx.Err() == nil {
				d.Log.Error("claiming a check", "err", err)
			}
			if !ran {
				break
			}
		}
		if err := d.expire(ctx); err != nil && ctx.Err() == nil {
			d.Log.Error("expiring leases", "err", err)
		}
		d.collect(ctx)
		d.updateGauges(ctx)
		select {
		case <-ctx.Done():
		case <-d.wake:
		case <-time.After(d.Config.Fleet.Poll):
		}
	}
}

// collect writes the runs workers stored into the runs directory; their
// replies were stored with them, so the outbox is told.
func (d *Daemon) collect(ctx context.Context) {
	n, err := CollectRuns(ctx, d.Config, d.Store, d.Log)
	if err != nil && ctx.Err() == nil {
		d.Log.Error("collecting runs", "err", err)
	}
	if n > 0 {
		d.Outbox.Wake()
	}
}

func (d *Daemon) defaults() {
	if d.Log == nil {
		d.Log = slog.Default()
	}
	if d.Poll == 0 {
		d.Poll = 30 * time.Second
	}
	d.Retry.defaults()
	if d.FlushEvery == 0 {
		d.FlushEvery = time.Minute
	}
	if d.Config.Fleet.Poll == 0 {
		d.Config.Fleet.Poll = 5 * time.Second
	}
	if d.Config.Fleet.Lease == 0 {
		d.Config.Fleet.Lease = 2 * time.Minute
	}
	if d.Metrics == nil {
		d.Metrics = NewMetrics()
	}
	if d.Outbox == nil {
		d.Outbox = &outbox.Outbox{Store: d.Store, Log: d.Log}
	}
	if d.Outbox.MaxRecipients == 0 {
		d.Outbox.MaxRecipients = d.Config.Limits.MaxRecipients
	}
	if d.Outbox.OptOut == nil {
		d.Outbox.OptOut = optOutAddrs(d.Config.Limits)
	}
	if d.Outbox.OnUncertain == nil {
		d.Outbox.OnUncertain = func(store.OutboxMessage) { d.Metrics.Uncertain.Inc() }
	}
	host, _ := os.Hostname()
	if d.Name == "" {
		d.Name = host + "/coordinator"
	}
	if d.Worker == nil && d.Config.Fleet.LocalWorker {
		d.Worker = &Worker{Config: d.Config, Store: d.Store, Pipeline: d.Pipeline, Name: host + "/watch", Host: host,
			Log: d.Log, Metrics: d.Metrics, Retry: d.Retry,
			OnStep: d.OnStep}
	}
	if d.Worker != nil && d.Worker.OnDone == nil {
		// The run is in the store: collect it now, not at the next poll.
		d.Worker.OnDone = func(*store.Job) { d.kick() }
	}
	d.sources = map[string]mailbox.SourceConfig{}
	for i, s := range d.Config.Sources {
		d.sources[SourceName(i, s)] = s
	}
	d.wake = make(chan struct{}, 1)
	if d.parsed == nil {
		d.parsed = newParsedMail(64 << 20)
	}
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
// watched paths becomes a job, an email command is answered. The mail, the
// source's cursor, the commands and the jobs and answers they make are
// stored in one transaction: after a kill -9 anywhere, either all of it is
// there or none, and the source reads the mail again. A mail already kept
// (a second source for the same list) only moves this source's cursor.
//
// Only the store's errors are returned (the source then reads the mail
// again later); a mail that patchbot cannot act on is logged and passed,
// so that one bad mail cannot stop a source.
func (d *Daemon) Ingest(ctx context.Context, source string, m *mailbox.Message, cur string) error {
	if d.wake == nil {
		d.defaults()
	}
	d.step(StepIngestRead)
	d.Metrics.Messages.Inc()
	key := storageKey(m)
	// Counted before acting and forgotten after: a mail the daemon died on
	// twice is set aside with its reason, not read again at every start.
	n, err := d.Store.BeginIngest(ctx, key)
	if err != nil {
		return err
	}
	if n > d.maxIngests() {
		reason := fmt.Sprintf("the daemon died %d times while acting on this mail", n-1)
		d.Log.Error("mail set aside: it was being acted on when the daemon died; it will not be read again",
			"source", source, "message_id", m.MessageID, "reason", reason)
		return d.Store.Update(ctx, func(tx *store.Tx) error {
			if err := tx.SetAside(ctx, key, reason); err != nil {
				return err
			}
			return tx.SetCursor(ctx, source, cur)
		})
	}
	in := &ingest{d: d, m: m, origin: mailbox.OriginOf(m), source: source, now: time.Now()}
	in.log = d.Log.With("source", source, "message_id", m.MessageID)
	err = d.Store.Update(ctx, func(tx *store.Tx) error {
		in.tx, in.jobs, in.answers = tx, 0, 0
		// The thread of the mail it answers, when that is kept (a reply
		// whose References list its parent first stays in the thread);
		// else the first of its References.
		th, err := tx.ThreadOf(ctx, append([]string{m.InReplyTo}, m.References...))
		if err != nil {
			return err
		}
		if th == "" {
			th = threadOf(m)
		}
		if th == "" {
			th = key // a mail without a Message-ID or references is a thread of its own
		}
		in.thread = th
		fresh, err := tx.SaveMessage(ctx, source, key, in.thread, m.Raw)
		if err != nil {
			return err
		}
		if err := tx.SetCursor(ctx, source, cur); err != nil {
			return err
		}
		if !fresh {
			return nil // acted on when it was first kept
		}
		// Replies that came before this mail were kept under its ID.
		if err := tx.Rehome(ctx, key, in.thread); err != nil {
			return err
		}
		if err := in.act(ctx); err != nil {
			return err
		}
		d.step(StepIngestWritten)
		return nil
	})
	if err != nil {
		return err
	}
	if err := d.Store.EndIngest(ctx, key); err != nil {
		return err
	}
	d.step(StepIngestCommitted)
	if in.jobs > 0 {
		d.Wake()
	}
	if in.answers > 0 {
		d.Outbox.Wake()
	}
	return nil
}

// ingest is one mail being acted on, inside its transaction.
type ingest struct {
	d      *Daemon
	tx     *store.Tx
	m      *mailbox.Message
	origin mailbox.Origin
	source string
	thread string
	now    time.Time
	log    *slog.Logger

	jobs, answers int // queued
}

func (in *ingest) act(ctx context.Context) error {
	d, m := in.d, in.m
	if ok, err := in.tx.SeenOutbox(ctx, m.MessageID); err != nil {
		return err
	} else if ok {
		in.log.Info("an uncertain reply came back on a source: it was delivered")
	}
	if in.origin.Sender != "" && in.origin.Sender == mailbox.AddrOf(d.Config.Reply.From) {
		return nil // patchbot's own mail, read back from a list
	}
	if cmds := mailbox.ParseCommands(m); len(cmds) > 0 {
		return in.commands(ctx, cmds)
	}
	if m.Diff == "" {
		return nil
	}
	if !in.listMail(in.source, in.origin) {
		in.log.Info("a patch sent to patchbot directly, not through a list, is not tested on its own; "+
			"an allowed sender can ask with #patchbot test in its thread", "from", in.origin.Sender)
		return nil
	}
	view, err := in.threadSeries(ctx, "", false)
	if err != nil {
		return err
	}
	for _, s := range view.series {
		log := in.log.With("series", s.Subject, "version", s.Version)
		if !touches(s.Files(), d.Config.Paths) {
			log.Info("series touches no watched path; not tested", "files", s.Files(), "complete", s.Complete)
			continue
		}
		if out, err := in.optedOut(ctx, s.Author); err != nil {
			return err
		} else if out {
			log.Info("the series' author opted out; not tested")
			continue
		}
		if !s.Complete {
			log.Info("series incomplete; waiting for the rest", "missing", s.Missing, "reason", s.Reason,
				"answer_after", d.Config.IncompleteAfter)
			if err := in.waitForParts(ctx, s); err != nil {
				return err
			}
			continue
		}
		target := ReplyTarget(s)
		if target == "" {
			// A patch without a Message-ID: its reply answers the name
			// it is kept under, and starts a thread of its own.
			target = storageKey(s.Patches[0].Message)
		}
		req := NewRequest(s, d.Config.Suites, target)
		if err := in.boundThread(ctx, &req.Thread, view, target); err != nil {
			return err
		}
		if req.Thread.Author == "" {
			log.Info("the series' author is not one address; not tested", "author", s.Author)
			continue
		}
		if _, err := req.SuiteNames(); err != nil {
			log.Info("no suite to run for this series; not tested", "err", err)
			continue
		}
		if err := in.enqueue(ctx, "list", fmt.Sprintf("series:%s:%s:v%d", mailbox.AddrOf(s.Author), s.Title, s.Version),
			mailbox.AddrOf(s.Author), req); err != nil {
			return err
		}
	}
	return nil
}

// listMail says whether a mail came through a mailing list: it has a
// List-Id, or its source is a list archive (lore) or trusted as a whole.
// Mail sent to patchbot alone starts no test, and its replies Cc nobody.
func (in *ingest) listMail(source string, o mailbox.Origin) bool {
	sc := in.d.sources[source]
	return o.ListID != "" || sc.Lore != "" || sc.Trusted
}

func (in *ingest) optedOut(ctx context.Context, addr string) (bool, error) {
	a := mailbox.AddrOf(addr)
	if in.d.Config.Limits.optedOut(a) {
		return true, nil
	}
	return in.tx.OptedOut(ctx, a)
}

// threadView is a stored thread as the transaction sees it.
type threadView struct {
	series []*mailbox.Series
	lists  map[string]bool // the list addresses its mail came through
	// origins by Message-ID, and whether each mail came through a list.
	origins map[string]mailbox.Origin
	viaList map[string]bool
}

// threadSeries assembles the series of the mail's thread, leaving out one
// mail (the command being answered): the newest version of each, or with
// all every version (for mailbox.Choose).
func (in *ingest) threadSeries(ctx context.Context, skip string, all bool) (*threadView, error) {
	stored, err := in.tx.Thread(ctx, in.thread)
	if err != nil {
		return nil, err
	}
	v := &threadView{lists: map[string]bool{}, origins: map[string]mailbox.Origin{}, viaList: map[string]bool{}}
	var msgs []*mailbox.Message
	for _, sm := range stored {
		m, err := in.d.parsed.get(sm.MessageID, sm.Raw)
		if err != nil || (skip != "" && m.MessageID == skip) {
			continue // it was parsed once already; a stored mail that no longer parses is skipped
		}
		o := mailbox.OriginOf(m)
		listAddrs(o, v.lists)
		v.origins[m.MessageID], v.viaList[m.MessageID] = o, in.listMail(sm.Source, o)
		msgs = append(msgs, m)
	}
	if all {
		v.series = mailbox.AssembleVersions(msgs)
	} else {
		v.series = mailbox.Assemble(msgs)
	}
	return v, nil
}

// boundThread makes a reply's recipients safe before it is composed (see
// Daemon.boundThread): the Cc is read again from the raw header of the
// mail the series is answered on (target), so that a name cannot smuggle
// in addresses, and opted-out addresses are left out.
func (in *ingest) boundThread(ctx context.Context, t *reports.Thread, v *threadView, target string) error {
	o, ok := v.origins[target]
	if ok {
		t.Lists, t.Cc = o.Recipients, nil
	}
	var keep []string
	for _, a := range t.Lists {
		out, err := in.optedOut(ctx, a)
		if err != nil {
			return err
		}
		if !out {
			keep = append(keep, a)
		}
	}
	t.Lists = keep
	in.d.boundThread(t, v.lists, v.viaList[target])
	return nil
}

// waitForParts queues a job that looks at an incomplete series again once
// IncompleteAfter has passed: if the parts are still missing, the author is
// told which, and why the series was not tested.
func (in *ingest) waitForParts(ctx context.Context, s *mailbox.Series) error {
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
		Incomplete: &IncompleteCheck{ThreadID: in.thread, Author: mailbox.AddrOf(s.Author), Title: s.Title, Version: s.Version}}
	in.d.boundThread(&req.Thread, nil, false)
	if req.Thread.Author == "" {
		return nil // nobody to tell
	}
	data, err := json.Marshal(req)
	if err != nil {
		return err
	}
	_, _, err = in.tx.AddJob(ctx, store.Job{Dedupe: fmt.Sprintf("incomplete:%s:%s:v%d", mailbox.AddrOf(s.Author), s.Title, s.Version),
		Kind: store.KindCheck, Trigger: "incomplete", Title: s.Subject, Request: data, Source: in.source,
		Sender: mailbox.AddrOf(s.Author), NotBefore: in.now.Add(in.d.Config.IncompleteAfter)})
	return err
}

// enqueue queues a test for sender (the series' author, or the command's
// sender), from the mail's source: the claim's fairness is by both.
func (in *ingest) enqueue(ctx context.Context, trigger, dedupe, sender string, req *Request) error {
	data, err := json.Marshal(req)
	if err != nil {
		return err
	}
	names, err := req.SuiteNames()
	if err != nil {
		return err
	}
	id, added, err := in.tx.AddJob(ctx, store.Job{Dedupe: dedupe, Trigger: trigger, Title: req.Title, Request: data,
		Source: in.source, Sender: sender, Needs: needsOf(in.d.Config, names)})
	if err != nil {
		return err
	}
	if added {
		in.jobs++
		in.log.Info("job queued", "job", id, "trigger", trigger, "title", req.Title)
	}
	return nil
}

// commands acts on the email commands of one mail: at most three
// distinct ones, each answered to its sender's one address alone.
func (in *ingest) commands(ctx context.Context, all []mailbox.Command) error {
	d, m, o := in.d, in.m, in.origin
	if o.Sender == "" {
		d.Metrics.Commands.WithLabelValues("dropped").Add(float64(len(all)))
		in.log.Info("commands ignored: From: is not one address, so there is nobody to answer", "err", o.SenderErr)
		return nil
	}
	if o.AutoSubmitted {
		in.log.Info("commands ignored: the mail is Auto-Submitted (a machine wrote it)", "from", o.Sender)
		return nil
	}
	cmds, ignored := mailbox.FoldCommands(all, mailbox.MaxCommands)
	view, err := in.threadSeries(ctx, m.MessageID, true)
	if err != nil {
		return err
	}
	// The series a command tests is the one `patchbot run` would: the
	// newest complete version (an incomplete one cannot be applied).
	target, _, _ := mailbox.Choose(view.series, 0)
	asker := Asker{Address: o.Sender, Authenticated: d.sources[in.source].Trusted || o.DKIMPass(d.Config.Commands.AuthservIDs)}
	for i, c := range cmds {
		cmd := &command{Command: c, key: fmt.Sprintf("%s#%d", m.MessageID, i), asker: asker, thread: in.thread}
		cmd.answer = reports.Answer{Command: c.Line,
			Thread: reports.Thread{Subject: m.Subject, MessageID: m.MessageID, References: m.References, Author: o.Sender},
			// A hash, not the command's Message-ID: two Message-IDs must not
			// make one answer's, and a sender's text has no place in ours.
			MessageID: fmt.Sprintf("patchbot-answer-%s@%s", shortHash(cmd.key), domainOf(d.Config.Reply.From))}
		cmd.answer.Ignored = ignored // said in the mail's first answer only
		mkRequest := func() (*Request, error) {
			req := NewRequest(target, d.Config.Suites, m.MessageID)
			req.Thread.Subject = m.Subject
			req.Thread.References = append(append([]string{}, m.References...), m.MessageID)
			req.Thread.Author = o.Sender
			req.Command = c.Line
			return req, in.boundThread(ctx, &req.Thread, view, ReplyTarget(target))
		}
		dc, err := d.decide(ctx, in.tx, cmd, target, mkRequest, in.now)
		if err != nil {
			return err
		}
		if dc.Answer != nil {
			sent, why, err := in.answer(ctx, *dc.Answer)
			if err != nil {
				return err
			}
			if !sent {
				dc.Outcome, dc.Why = store.CommandDropped, why
			} else {
				ignored = 0
			}
		}
		if dc.OptOut {
			if _, err := in.tx.OptOut(ctx, o.Sender, "#patchbot stop in "+m.MessageID); err != nil {
				return err
			}
			in.log.Info("opt-out recorded: patchbot will not mail this address again", "address", o.Sender)
		}
		if dc.Request != nil {
			if err := in.enqueue(ctx, "command", "command:"+cmd.key, o.Sender, dc.Request); err != nil {
				return err
			}
		}
		if _, err := in.tx.LogCommand(ctx, store.Command{Key: cmd.key, Sender: o.Sender, ThreadID: in.thread,
			At: in.now, Outcome: dc.Outcome}); err != nil {
			return err
		}
		d.Metrics.Commands.WithLabelValues(string(dc.Outcome)).Inc()
		in.log.Info("command", "command", c.Line, "from", o.Sender, "authenticated", asker.Authenticated,
			"outcome", dc.Outcome, "why", dc.Why)
	}
	return nil
}

// answer puts a short answer in the outbox, inside the mail's
// transaction, if the quotas allow one more mail and its one recipient
// has not opted out. It says whether it did, and why not.
func (in *ingest) answer(ctx context.Context, a reports.Answer) (bool, string, error) {
	d := in.d
	if ok, why, err := d.mayMail(ctx, in.tx, in.thread, in.now); err != nil || !ok {
		if err == nil {
			d.Metrics.Dropped.WithLabelValues("quota").Inc()
		}
		return false, why, err
	}
	if out, err := in.optedOut(ctx, a.Thread.Author); err != nil || out {
		return false, "the asker opted out", err
	}
	ok, why, err := d.putAnswer(ctx, in.tx, a, in.thread)
	if ok {
		in.answers++
	}
	return ok, why, err
}

// putAnswer renders an answer and puts it in the outbox within tx. A mail
// that cannot be rendered or addressed is dropped (logged), not an error:
// it would be the same on every retry.
func (d *Daemon) putAnswer(ctx context.Context, tx *store.Tx, a reports.Answer, thread string) (bool, string, error) {
	a.Date = time.Now()
	r, err := reports.RenderAnswer(a, d.Config.Reply)
	if err != nil {
		d.Log.Error("answer not sent: it does not render", "kind", a.Kind, "err", err)
		d.Metrics.Dropped.WithLabelValues("render").Inc()
		return false, "the answer does not render", nil
	}
	return d.putReply(ctx, tx, r, thread)
}

// putReply puts a rendered mail in the outbox within tx.
func (d *Daemon) putReply(ctx context.Context, tx *store.Tx, r *reports.Reply, thread string) (bool, string, error) {
	return putReply(ctx, tx, d.Outbox, d.Config, d.Metrics, d.Log, r, thread)
}

// putReply puts a rendered mail in ob's outbox within tx, from the
// config's sender. A mail that cannot be addressed (or whose recipients
// all opted out) is dropped and logged: it would be the same on every
// retry.
func putReply(ctx context.Context, tx *store.Tx, ob *outbox.Outbox, cfg Config, m *Metrics, log *slog.Logger,
	r *reports.Reply, thread string) (bool, string, error) {
	raw, err := r.Bytes()
	var rcpt []string
	if err == nil {
		rcpt, err = r.Recipients()
	}
	if err != nil {
		log.Error("mail not sent: it cannot be encoded or addressed", "message_id", r.Header.MessageID, "err", err)
		m.Dropped.WithLabelValues("unaddressable").Inc()
		return false, err.Error(), nil
	}
	added, err := ob.PutTx(ctx, tx, outbox.Message{MessageID: r.Header.MessageID,
		From: mailbox.AddrOf(cfg.Reply.From), To: rcpt, Raw: raw, ThreadID: thread})
	switch {
	case errors.Is(err, outbox.ErrNoRecipients):
		log.Info("mail not sent: every recipient opted out", "message_id", r.Header.MessageID)
		m.Dropped.WithLabelValues("opted-out").Inc()
		return false, "every recipient opted out", nil
	case errors.Is(err, outbox.ErrTooManyRecipients):
		log.Error("mail not sent: too many recipients", "message_id", r.Header.MessageID, "err", err)
		m.Dropped.WithLabelValues("unaddressable").Inc()
		return false, err.Error(), nil
	case err != nil:
		return false, "", fmt.Errorf("writing the reply to the outbox: %w", err)
	}
	if added {
		m.Replies.Inc()
		log.Info("reply in the outbox", "message_id", r.Header.MessageID, "to", rcpt)
	}
	return true, "", nil
}

// checkIncomplete runs an incomplete-series job: nothing to say when the
// series was completed meanwhile (its own job tests it), else the answer,
// to the author alone, within the quotas.
func (d *Daemon) checkIncomplete(ctx context.Context, j *store.Job, req *Request) error {
	c := req.Incomplete
	return d.Store.Update(ctx, func(tx *store.Tx) error {
		in := &ingest{d: d, tx: tx, thread: c.ThreadID, now: time.Now(), log: d.Log.With("job", j.ID)}
		view, err := in.threadSeries(ctx, "", false)
		if err != nil {
			return err
		}
		for _, s := range view.series {
			if s.Title != c.Title || s.Version != c.Version || mailbox.AddrOf(s.Author) != c.Author {
				continue
			}
			if s.Complete {
				in.log.Info("series completed while waiting; its own job tests it", "series", s.Subject)
				return nil
			}
			missing := make([]string, len(s.Missing))
			for i, m := range s.Missing {
				missing[i] = fmt.Sprintf("%d/%d", m, s.Total)
			}
			sent, why, err := in.answer(ctx, reports.Answer{Kind: reports.AnswerIncomplete, Thread: req.Thread,
				MessageID: jobReplyID(d.Config, j), Missing: missing, Waited: humanDuration(d.Config.IncompleteAfter), Reason: s.Reason})
			if err == nil && !sent {
				in.log.Info("incomplete-series answer not sent", "why", why)
			}
			return err
		}
		return nil
	})
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

// suiteNames lists the valid suites and profiles, for help and errors.
func suiteNames() (names, profiles []string) { return suites.Names() }

// RunOnce runs the next check that is due, or else, with a worker in this
// process, the next test job that is due and collects its run; it says
// whether it ran one.
func (d *Daemon) RunOnce(ctx context.Context) (bool, error) {
	if d.wake == nil {
		d.defaults()
	}
	if ran, err := d.checkOnce(ctx); ran || err != nil {
		return ran, err
	}
	if d.Worker == nil {
		return false, nil
	}
	ran, err := d.Worker.RunOnce(ctx)
	if ran {
		d.collect(ctx)
	}
	return ran, err
}

// checkOnce runs the coordinator's next due check (an incomplete series'
// wait is over), if any.
func (d *Daemon) checkOnce(ctx context.Context) (bool, error) {
	j, err := d.Store.ClaimJob(ctx, store.Claim{Worker: d.Name, Lease: d.Config.Fleet.Lease, At: time.Now(),
		Kind: store.KindCheck, MaxAttempts: d.MaxAttempts})
	if errors.Is(err, store.ErrNoJob) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	d.step(StepJobClaimed)
	d.runCheck(ctx, j)
	return true, nil
}

func (d *Daemon) runCheck(ctx context.Context, j *store.Job) {
	log := d.Log.With("job", j.ID, "title", j.Title, "attempt", j.Attempts)
	bg := context.WithoutCancel(ctx)
	var req Request
	err := json.Unmarshal(j.Request, &req)
	switch {
	case err != nil || req.Incomplete == nil:
		j.State, j.Blame, j.Error = store.JobFailed, blame.Infra, fmt.Sprintf("not a check: %v", err)
	case ctx.Err() != nil:
		j.State, j.Attempts = store.JobQueued, j.Attempts-1
	default:
		if err := d.checkIncomplete(ctx, j, &req); err != nil {
			d.retry(j, err, log)
		} else {
			j.State, j.Stage = store.JobDone, "done"
			d.Outbox.Wake()
		}
	}
	if err := d.Store.FinishJob(bg, j); err != nil {
		log.Error("recording the check's end", "err", err)
	}
}

// retry queues a check again after a failure of the store, with a growing
// backoff, or fails it for good after MaxAttempts.
func (d *Daemon) retry(j *store.Job, err error, log *slog.Logger) {
	if d.Retry.again(j, err) {
		log.Error("check failed for good", "err", err)
		return
	}
	log.Warn("check failed; retrying later", "err", err, "not_before", j.NotBefore)
}

func (d *Daemon) updateGauges(ctx context.Context) {
	if counts, err := d.Store.JobCounts(ctx); err == nil {
		for _, st := range store.JobStates {
			d.Metrics.Jobs.WithLabelValues(string(st)).Set(float64(counts[st]))
		}
	}
	if counts, err := d.Store.OutboxCounts(ctx); err == nil {
		for _, st := range store.OutboxStates {
			d.Metrics.Outbox.WithLabelValues(string(st)).Set(float64(counts[st]))
		}
	}
}

// threadRoot is the Message-ID that starts a reply's thread: the first of
// its References, else the mail it answers.
func threadRoot(t reports.Thread) string {
	if len(t.References) > 0 {
		return strings.Trim(t.References[0], "<> ")
	}
	return strings.Trim(t.MessageID, "<> ")
}

// storageKey is what a mail is kept under: its Message-ID, or for a mail
// without one a name made from its bytes, so that such a mail is kept, and
// its series assembled, like any other.
func storageKey(m *mailbox.Message) string {
	if m.MessageID != "" {
		return m.MessageID
	}
	h := sha256.Sum256(m.Raw)
	return "no-message-id-" + hex.EncodeToString(h[:12]) + "@patchbot.invalid"
}

func (d *Daemon) maxIngests() int {
	if d.MaxCrashes > 0 {
		return d.MaxCrashes
	}
	return 2
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
// of it, on whichever worker, produced the reply.
func jobReplyID(cfg Config, j *store.Job) string {
	return fmt.Sprintf("patchbot-job-%d-%s@%s", j.ID, shortHash(j.Dedupe), domainOf(cfg.Reply.From))
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
