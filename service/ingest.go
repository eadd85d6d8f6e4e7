package service

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/patchbot/patchbot/mailbox"
	"github.com/patchbot/patchbot/reports"
	"github.com/patchbot/patchbot/store"
)

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
	// twice, or failed on a few times, is set aside with its reason, not
	// read again at every start or poll, and its source reads on.
	tries, err := d.Store.BeginIngest(ctx, key)
	if err != nil {
		return err
	}
	if reason := d.asideReason(tries); reason != "" {
		d.Log.Error("mail set aside: acting on it did not end; it will not be read again",
			"source", source, "message_id", m.MessageID, "reason", reason)
		return d.Store.Update(ctx, func(tx *store.Tx) error {
			if err := tx.SetAside(ctx, key, reason); err != nil {
				return err
			}
			return setCursor(ctx, tx, source, cur)
		})
	}
	// Who sent it, verified before the transaction (DNS is no business
	// of a write lock), and kept with the mail.
	if m.Attestation == nil {
		m.Attestation = d.Verifier.Verify(ctx, m)
	}
	if d.sources[source].Trusted {
		m.Attestation.Source = source
	}
	attestation, err := json.Marshal(m.Attestation)
	if err != nil {
		return err
	}
	in := &ingest{d: d, m: m, origin: mailbox.OriginOf(m), source: source, now: time.Now()}
	in.log = d.Log.With("source", source, "message_id", m.MessageID, "from", m.Identity().String())
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
		if err := setCursor(ctx, tx, source, cur); err != nil {
			return err
		}
		if !fresh {
			return nil // acted on when it was first kept
		}
		if err := tx.SetAttestation(ctx, key, attestation); err != nil {
			return err
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
		if ctx.Err() == nil {
			if ferr := d.Store.FailIngest(ctx, key, err.Error()); ferr != nil {
				d.Log.Error("recording a failed ingest", "message_id", m.MessageID, "err", ferr)
			}
		}
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
	if !in.listMail(in.source) {
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
		// An opt-out stops the testing of an address's series when its
		// "stop" was verified (or the config's), or the series is not: a
		// forged "stop" in a verified author's name silences the mail to
		// the address (the outbox leaves it out), not the test.
		if out, verified, err := in.authorOptedOut(ctx, s.Author); err != nil {
			return err
		} else if out && (verified || !s.Identity.Verified()) {
			log.Info("the series' author opted out; not tested")
			continue
		} else if out {
			log.Info("the author's address opted out in an unverified mail: the verified series is tested, the author not mailed")
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
		// A series is keyed by its sender as verified and by the mail
		// that carries it (its first patch: a cover letter that comes
		// late does not make it another): two mails claiming one series
		// and version are two candidates, each queued and logged, and an
		// unverified one never takes a verified one's place.
		first := s.Patches[0].MessageID
		if first == "" {
			first = storageKey(s.Patches[0].Message)
		}
		claim := fmt.Sprintf("series:%s:%s:v%d:", mailbox.AddrOf(s.Author), s.Title, s.Version)
		dedupe := claim + s.Identity.Key() + ":" + first
		log = log.With("identity", s.Identity.String(), "candidate", first)
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
		others, err := in.tx.DedupesWithPrefix(ctx, claim)
		if err != nil {
			return err
		}
		if !slices.Contains(others, dedupe) { // a new candidate: said once, when it comes
			for _, o := range others {
				log.Warn("another mail claims this series and version: both are candidates, each tested on its own",
					"other", strings.TrimPrefix(o, claim))
			}
		}
		if err := in.enqueue(ctx, "list", dedupe, mailbox.AddrOf(s.Author), req); err != nil {
			return err
		}
	}
	return nil
}

// listMail says whether a mail came through a mailing list: its source is
// bound to a list (sources[].list) or is a list archive (lore). A List-Id
// proves nothing: anyone can write one. Mail sent to patchbot alone
// starts no test, and its replies Cc nobody.
func (in *ingest) listMail(source string) bool {
	return in.d.sources[source].ListMail()
}

// authorOptedOut says whether an author's address opted out, and whether
// by a verified "stop" (the config's opt-outs are the operator's word).
func (in *ingest) authorOptedOut(ctx context.Context, addr string) (out, verified bool, err error) {
	a := mailbox.AddrOf(addr)
	if in.d.Config.Limits.optedOut(a) {
		return true, true, nil
	}
	return in.tx.OptOutOf(ctx, a)
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
	// origins by Message-ID, whether each mail came through a list, and
	// the mails themselves (with who sent them, as verified).
	origins map[string]mailbox.Origin
	viaList map[string]bool
	msgs    map[string]*mailbox.Message
	// sourceLists are the configured list addresses of the sources the
	// thread's mail came from.
	sourceLists []string
}

// owner is who started the thread, as verified: the sender of its root
// mail when that is kept; else the first verified sender of a series in
// it; else the first series' sender.
func (v *threadView) owner(root string) mailbox.Identity {
	if m, ok := v.msgs[root]; ok {
		return m.Identity()
	}
	for _, s := range v.series {
		if s.Identity.Verified() {
			return s.Identity
		}
	}
	if len(v.series) > 0 {
		return v.series[0].Identity
	}
	return mailbox.Identity{}
}

// ccMail is the mail whose To and Cc a reply about the series answered on
// target takes: the mail that started the thread (root), or the target
// itself when it is that mail or its sender is the root's, verified (an
// author's own v2 in the thread). Never a later stranger's: when the root
// is not kept, only a target that is the root gives its Cc, else none.
func (v *threadView) ccMail(root, target string) string {
	r, haveRoot := v.msgs[root]
	t, haveTarget := v.msgs[target]
	switch {
	case haveTarget && target == root:
		return target
	case haveRoot && haveTarget && t.Identity().Verified() && t.Identity().Key() == r.Identity().Key():
		return target
	case haveRoot:
		return root
	}
	return ""
}

// threadSeries assembles the series of the mail's thread, leaving out one
// mail (the command being answered): the newest version of each, or with
// all every version (for mailbox.Choose).
func (in *ingest) threadSeries(ctx context.Context, skip string, all bool) (*threadView, error) {
	stored, err := in.tx.Thread(ctx, in.thread)
	if err != nil {
		return nil, err
	}
	v := &threadView{lists: map[string]bool{}, origins: map[string]mailbox.Origin{}, viaList: map[string]bool{},
		msgs: map[string]*mailbox.Message{}}
	var msgs []*mailbox.Message
	for _, sm := range stored {
		parsed, err := in.d.parsed.get(sm.MessageID, sm.Raw)
		if err != nil {
			continue // it was parsed once already; a stored mail that no longer parses is skipped
		}
		// A copy: the parsed mail is shared, the attestation is the
		// store's word for this mail.
		m := *parsed
		m.Attestation = nil
		if len(sm.Attestation) > 0 {
			var a mailbox.Attestation
			if json.Unmarshal(sm.Attestation, &a) == nil {
				m.Attestation = &a
			}
		}
		v.msgs[sm.MessageID] = &m
		via := in.listMail(sm.Source)
		o := mailbox.OriginOf(&m)
		if via {
			// A list's own headers count only on the list's mail.
			listAddrs(o, v.lists)
			if l := in.d.sources[sm.Source].List; l != "" {
				v.lists[strings.ToLower(l)] = true
				if !slices.Contains(v.sourceLists, strings.ToLower(l)) {
					v.sourceLists = append(v.sourceLists, strings.ToLower(l))
				}
			}
		}
		v.origins[sm.MessageID], v.viaList[sm.MessageID] = o, via
		if skip != "" && m.MessageID == skip {
			continue
		}
		msgs = append(msgs, &m)
	}
	if all {
		v.series = mailbox.AssembleVersions(msgs)
	} else {
		v.series = mailbox.Assemble(msgs)
	}
	return v, nil
}

// boundThread makes a reply's recipients safe before it is composed (see
// Daemon.boundThread): the Cc is that of the mail that started the thread
// (or the thread owner's own mail the series is answered on: see
// threadView.ccMail), read again from its raw header so that a name
// cannot smuggle in addresses; opted-out addresses are left out.
func (in *ingest) boundThread(ctx context.Context, t *reports.Thread, v *threadView, target string) error {
	if o, ok := v.origins[v.ccMail(in.thread, target)]; ok {
		t.Lists = o.Recipients
	} else {
		t.Lists = append([]string(nil), v.sourceLists...) // no mail whose Cc patchbot may take: the lists alone
	}
	t.Cc = nil
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
		Thread: reports.Thread{Subject: subject, MessageID: replyTo, References: refs, Author: s.Author},
		Incomplete: &IncompleteCheck{ThreadID: in.thread, Author: mailbox.AddrOf(s.Author), Title: s.Title, Version: s.Version,
			Identity: s.Identity.Key(), Unverified: !s.Identity.Verified()}}
	in.d.boundThread(&req.Thread, nil, false)
	if req.Thread.Author == "" {
		return nil // nobody to tell
	}
	data, err := json.Marshal(req)
	if err != nil {
		return err
	}
	_, _, err = in.tx.AddJob(ctx, store.Job{Dedupe: fmt.Sprintf("incomplete:%s:%s:v%d:%s", mailbox.AddrOf(s.Author), s.Title, s.Version, s.Identity.Key()),
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

// maxIngestFailures is how many tries of a mail may end in an error before
// it is set aside: a few, so that a database that went away for a moment
// sets nothing aside, and one mail that fails every time cannot hold its
// source for longer than a few polls.
const maxIngestFailures = 3

// asideReason says why a mail is set aside instead of acted on again, or
// "": the daemon died while acting on it MaxCrashes times, or acting on
// it failed maxIngestFailures times.
func (d *Daemon) asideReason(tries store.Ingest) string {
	maxDeaths := d.MaxCrashes
	if maxDeaths <= 0 {
		maxDeaths = 2
	}
	switch {
	case tries.Deaths() >= maxDeaths:
		return fmt.Sprintf("the daemon died %d times while acting on this mail", tries.Deaths())
	case tries.Failures >= maxIngestFailures:
		return fmt.Sprintf("acting on this mail failed %d times; the last error: %s", tries.Failures, tries.LastError)
	}
	return ""
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
