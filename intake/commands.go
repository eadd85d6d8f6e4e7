package intake

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/patchbot/patchbot/internal/inert"
	"github.com/patchbot/patchbot/mailbox"
	"github.com/patchbot/patchbot/reports"
	"github.com/patchbot/patchbot/store"
	"github.com/patchbot/patchbot/suites"
)

// Asker is who gives an email command, as far as patchbot can tell.
type Asker struct {
	// Address is the one bare address of the mail's From:.
	Address string
	// Authenticated: the mail carries a valid DKIM signature aligned with
	// Address's domain (checked by patchbot, or vouched for by a trusted
	// server when the key is gone), or came from a source trusted as a
	// whole. An unauthenticated asker draws from the unverified budget.
	Authenticated bool
	// Why says what a valid signature aligned with Address left out when
	// it did not authenticate the asker (mailbox.Identity.Why).
	Why string
}

// Authorize decides whether asker may have a series written by author
// tested. It returns the reason when the answer is no; the reason is
// told to the asker when the config says refusals are answered. The
// per-sender limit is not its business: every command counts against
// that, allowed or not.
func Authorize(cfg CommandsConfig, asker Asker, author string) (bool, string) {
	s := asker.Address
	allowed := cfg.AllowAuthor && s != "" && s == mailbox.AddrOf(author)
	for _, a := range cfg.Allow {
		if a = mailbox.AddrOf(a); a != "" && (a == s || (strings.HasPrefix(a, "@") && strings.HasSuffix(s, a))) {
			allowed = true
		}
	}
	if !allowed {
		return false, fmt.Sprintf("%s is neither the series' author nor on this instance's allow-list", s)
	}
	if !asker.Authenticated {
		if asker.Why != "" {
			return false, fmt.Sprintf("this mail does not prove that it comes from %s in this thread: %s", s, asker.Why)
		}
		return false, fmt.Sprintf("this mail does not prove that it comes from %s: it carries no valid DKIM signature "+
			"aligned with %s", s, mailbox.Domain(s))
	}
	return true, ""
}

// command is one email command being weighed.
type command struct {
	mailbox.Command
	n     int // its place among the mail's commands
	asker Asker
	// target is the series it applies to, nil when there is none;
	// noTarget says why the series it named cannot be tested (series=ID
	// that no complete series holds).
	target   *mailbox.Series
	noTarget string
	// answer is the short answer to give, already addressed to the asker
	// alone and threaded under the command's mail.
	answer reports.Answer
}

// verdict is what to do with a command: answer it (Answer set), queue a
// job (Request set), or neither; Outcome is logged either way.
type verdict struct {
	Outcome store.CommandOutcome
	Answer  *reports.Answer
	Request *Request
	OptOut  bool   // record the asker's "stop"
	Why     string // for the log
}

// commands decides on the email commands of one mail: at most three
// distinct ones, each answered to its sender's one address alone.
func (t *turn) commands(ctx context.Context, all []mailbox.Command) error {
	m, o := t.mail, t.origin
	if o.Sender == "" {
		t.dec.count(store.CommandDropped, len(all))
		t.note(slog.LevelInfo, "commands ignored: From: is not one address, so there is nobody to answer", "err", o.SenderErr)
		return nil
	}
	if o.AutoSubmitted {
		t.note(slog.LevelInfo, "commands ignored: the mail is Auto-Submitted (a machine wrote it)", "sender", o.Sender)
		return nil
	}
	cmds, ignored := mailbox.FoldCommands(all, mailbox.MaxCommands)
	view, err := t.thread(ctx, m.MessageID, true)
	if err != nil {
		return err
	}
	id := m.Identity()
	asker := Asker{Address: o.Sender, Authenticated: id.Verified() && id.Address == o.Sender, Why: id.Why}
	owner := view.owner(m.Thread)
	for i, c := range cmds {
		cmd := &command{Command: c, n: i, asker: asker}
		// The series a command tests: the thread author's newest complete
		// version (as `patchbot run` would choose it; an incomplete one
		// cannot be applied), or the one it names by a mail of it.
		var err error
		cmd.target, _, err = mailbox.ChooseOwned(view.series, owner, c.Series)
		if err != nil && c.Series != "" {
			cmd.noTarget = err.Error()
		}
		key := commandKey(m.MessageID, i)
		cmd.answer = reports.Answer{Command: c.Line, Stranger: !asker.Authenticated, Unproven: asker.Why,
			Thread: reports.Thread{Subject: m.Subject, MessageID: m.MessageID, References: m.References, Author: o.Sender},
			// A hash, not the command's Message-ID: two Message-IDs must not
			// make one answer's, and a sender's text has no place in ours.
			MessageID: fmt.Sprintf("patchbot-answer-%s@%s", shortHash(key), domainOf(t.Reply.From)),
			Ignored:   ignored} // said in the mail's first answer only
		v, err := t.weigh(ctx, cmd, view)
		if err != nil {
			return err
		}
		if v.Answer != nil {
			sent, why, err := t.answer(ctx, *v.Answer)
			if err != nil {
				return err
			}
			if !sent {
				v.Outcome, v.Why = store.CommandDropped, why
			} else {
				ignored = 0
			}
		}
		if v.OptOut {
			t.dec.OptOuts = append(t.dec.OptOuts, OptOut{Address: o.Sender, Reason: "#patchbot stop in " + m.MessageID,
				Verified: asker.Authenticated})
			t.note(slog.LevelInfo, "opt-out recorded: patchbot will not mail this address again", "address", o.Sender)
		}
		if v.Request != nil {
			names, _ := v.Request.SuiteNames() // checked by weigh
			t.dec.Jobs = append(t.dec.Jobs, Job{Dedupe: CommandDedupe(m.MessageID, i), Trigger: "command", Source: m.Source,
				Sender: o.Sender, Title: v.Request.Series.Subject, Test: v.Request, Suites: names})
		}
		t.dec.Commands = append(t.dec.Commands, store.Command{Key: key, Sender: o.Sender, ThreadID: m.Thread,
			At: m.At, Outcome: v.Outcome, Unverified: !asker.Authenticated})
		t.dec.count(v.Outcome, 1)
		series := ""
		if cmd.target != nil {
			series = fmt.Sprintf("%s v%d from %s", cmd.target.Title, cmd.target.Version, cmd.target.Identity)
		}
		t.note(slog.LevelInfo, "command", "command", inert.Clip(c.Line, mailbox.MaxEcho), "authenticated", asker.Authenticated,
			"series", series, "outcome", v.Outcome, "why", v.Why)
	}
	return nil
}

// weigh decides on one command: the per-sender limit first (help,
// refusals and malformed commands count), then what it asks. An
// unverified asker's commands are counted apart from the verified
// sender's of the same address, and get at most
// limits.unverified_per_sender_per_day answers a day.
func (t *turn) weigh(ctx context.Context, c *command, view *threadView) (verdict, error) {
	cfg, now := t.Commands, t.mail.At
	answer := func(kind reports.AnswerKind, reason string) verdict {
		a := c.answer
		a.Kind, a.Reason = kind, reason
		if kind == reports.AnswerHelp || kind == reports.AnswerNotUnderstood || kind == reports.AnswerInvalid {
			a.Suites, a.Profiles = suites.Names()
		}
		return verdict{Outcome: store.CommandAnswered, Answer: &a}
	}
	verified := c.asker.Authenticated
	counts, err := t.commandCounts(ctx, c.asker.Address, verified, now.Add(-time.Hour))
	if err != nil {
		return verdict{}, err
	}
	spent := false // an unverified asker had its answers of the day
	if !verified {
		day, err := t.commandCounts(ctx, c.asker.Address, false, now.Add(-24*time.Hour))
		if err != nil {
			return verdict{}, err
		}
		spent = day.Counted >= t.Limits.UnverifiedPerSenderPerDay
	}
	refuse := func(reason string) verdict {
		if !cfg.AnswerRefused || counts.Refusals > 0 {
			return verdict{Outcome: store.CommandDropped, Why: "refused (" + reason + "); a refusal was answered this hour already"}
		}
		v := answer(reports.AnswerRefused, reason)
		v.Outcome, v.Why = store.CommandRefused, reason
		return v
	}
	// Stopping is always honoured: it can only mean less mail.
	if c.Err == "" && c.Name == "stop" {
		v := answer(reports.AnswerStopped, c.asker.Address)
		v.OptOut = true
		if spent {
			v.Answer, v.Outcome, v.Why = nil, store.CommandDropped, "opt-out recorded; an unverified sender was answered today already"
		}
		return v, nil
	}
	if spent {
		return verdict{Outcome: store.CommandDropped, Why: fmt.Sprintf("an unverified sender gets %d answer(s) a day",
			t.Limits.UnverifiedPerSenderPerDay)}, nil
	}
	if counts.Counted >= cfg.PerSenderPerHour {
		return refuse(fmt.Sprintf("%s already gave %d commands in the last hour (limit %d)",
			c.asker.Address, counts.Counted, cfg.PerSenderPerHour)), nil
	}
	switch {
	case c.Err != "":
		return answer(reports.AnswerNotUnderstood, c.Err), nil
	case c.Name == "help":
		return answer(reports.AnswerHelp, ""), nil
	case c.target == nil && c.noTarget != "":
		return answer(reports.AnswerInvalid, c.noTarget), nil
	case c.target == nil:
		return answer(reports.AnswerNoSeries, ""), nil
	}
	if ok, reason := Authorize(cfg, c.asker, c.target.Author); !ok {
		return refuse(reason), nil
	}
	// Validation first: a bad name is answered now, with the valid ones,
	// before anything is built.
	if err := suites.CheckProfile(c.Profile); err != nil {
		return answer(reports.AnswerInvalid, err.Error()), nil
	}
	m := t.mail
	req := NewRequest(c.target, t.Suites, m.MessageID)
	req.Thread.Subject = m.Subject
	req.Thread.References = append(append([]string{}, m.References...), m.MessageID)
	req.Thread.Author = t.origin.Sender
	req.Command = c.Line
	if err := t.replyThread(ctx, &req.Thread, view, ReplyTarget(c.target)); err != nil {
		return verdict{}, err
	}
	if len(c.Suites) > 0 {
		req.Suites = c.Suites
	}
	if c.Profile != "" {
		req.Profile = c.Profile
	}
	if _, err := req.SuiteNames(); err != nil {
		return answer(reports.AnswerInvalid, err.Error()), nil
	}
	if err := withOptions(req, c.Command, c.target); err != nil {
		return answer(reports.AnswerInvalid, err.Error()), nil
	}
	if ok, why, err := t.mayMail(ctx, m.Thread, false); err != nil || !ok {
		return verdict{Outcome: store.CommandDropped, Why: why}, err
	}
	return verdict{Outcome: store.CommandAccepted, Request: req}, nil
}

// commandCounts are a sender's commands since a time as the store counts
// them, with those this decision logs.
func (t *turn) commandCounts(ctx context.Context, sender string, verified bool, since time.Time) (store.CommandCounts, error) {
	c, err := t.known.CommandCounts(ctx, sender, verified, since)
	for _, d := range t.dec.Commands {
		if d.Sender != sender || d.Unverified == verified || d.At.Before(since) {
			continue
		}
		switch d.Outcome {
		case store.CommandRefused:
			c.Refusals++
			c.Counted++
		case store.CommandAccepted, store.CommandAnswered:
			c.Counted++
		}
	}
	return c, err
}

// withOptions applies a test command's base= and patches= to a request
// for series s, or says why they cannot be.
func withOptions(req *Request, c mailbox.Command, s *mailbox.Series) error {
	req.BaseOverride = c.Base
	if c.First == 0 {
		return nil
	}
	if n := len(s.Patches); c.Last > n {
		return fmt.Errorf("patches=%d-%d: the series has %d patch(es)", c.First, c.Last, n)
	}
	req.First, req.Last = c.First, c.Last
	return nil
}

// shortHash is a short hex hash of s, for Message-IDs of patchbot's own
// that must not carry a sender's text.
func shortHash(s string) string {
	h := sha256.Sum256([]byte(s))
	return hex.EncodeToString(h[:6])
}

// domainOf is the domain of a From address, for patchbot's Message-IDs.
func domainOf(from string) string {
	a := mailbox.AddrOf(from)
	if i := strings.LastIndex(a, "@"); i >= 0 {
		return a[i+1:]
	}
	return "patchbot.invalid"
}

// ReplyID is the Message-ID of a job's reply, from its id and key in the
// queue: one per job, whatever run of it, on whichever worker, produced
// the reply, so that the outbox holds it once.
func (d *Desk) ReplyID(jobID int64, dedupe string) string {
	return fmt.Sprintf("patchbot-job-%d-%s@%s", jobID, shortHash(dedupe), domainOf(d.Reply.From))
}
