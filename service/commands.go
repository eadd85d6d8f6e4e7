package service

import (
	"context"
	"fmt"
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
// quoted back to the asker when the config says refusals are answered.
// The per-sender limit is not its business: every command counts against
// that, allowed or not (see Daemon.decide).
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

// command is one email command being weighed, inside the transaction of
// the mail that gave it.
type command struct {
	mailbox.Command
	key    string // "<message-id>#<n>"
	asker  Asker
	thread string // the thread's root Message-ID
	// answer is the short answer to give, already addressed to the asker
	// alone and threaded under the command's mail.
	answer reports.Answer
	// noTarget says why the series the command named cannot be tested
	// (series=ID that no complete series holds).
	noTarget string
}

// decision is what to do with a command: answer it (Answer set), queue a
// job (Request set), or neither; Outcome is logged either way.
type decision struct {
	Outcome store.CommandOutcome
	Answer  *reports.Answer
	Request *Request
	// OptOut records the asker's "stop".
	OptOut bool
	Why    string // for the log
}

// decide weighs one command: the per-sender limit first (help, refusals
// and malformed commands count), then what it asks. target is the series
// it applies to (nil when there is none); mkRequest makes its job. An
// unverified asker's commands are counted apart from the verified
// sender's of the same address, and get at most
// limits.unverified_per_sender_per_day answers a day.
func (d *Daemon) decide(ctx context.Context, tx *store.Tx, c *command, target *mailbox.Series,
	mkRequest func() (*Request, error), now time.Time) (decision, error) {
	cfg := d.Config.Commands
	answer := func(kind reports.AnswerKind, reason string) decision {
		a := c.answer
		a.Kind, a.Reason = kind, reason
		if kind == reports.AnswerHelp || kind == reports.AnswerNotUnderstood || kind == reports.AnswerInvalid {
			a.Suites, a.Profiles = suiteNames()
		}
		return decision{Outcome: store.CommandAnswered, Answer: &a}
	}
	verified := c.asker.Authenticated
	counts, err := tx.CommandCounts(ctx, c.asker.Address, verified, now.Add(-time.Hour))
	if err != nil {
		return decision{}, err
	}
	spent := false // an unverified asker had its answers of the day
	if !verified {
		day, err := tx.CommandCounts(ctx, c.asker.Address, false, now.Add(-24*time.Hour))
		if err != nil {
			return decision{}, err
		}
		spent = day.Counted >= d.Config.Limits.UnverifiedPerSenderPerDay
	}
	refuse := func(reason string) decision {
		if !cfg.AnswerRefused || counts.Refusals > 0 {
			return decision{Outcome: store.CommandDropped, Why: "refused (" + reason + "); a refusal was answered this hour already"}
		}
		dc := answer(reports.AnswerRefused, reason)
		dc.Outcome, dc.Why = store.CommandRefused, reason
		return dc
	}
	// Stopping is always honoured: it can only mean less mail.
	if c.Err == "" && c.Name == "stop" {
		dc := answer(reports.AnswerStopped, c.asker.Address)
		dc.OptOut = true
		if spent {
			dc.Answer, dc.Outcome, dc.Why = nil, store.CommandDropped, "opt-out recorded; an unverified sender was answered today already"
		}
		return dc, nil
	}
	if spent {
		return decision{Outcome: store.CommandDropped, Why: fmt.Sprintf("an unverified sender gets %d answer(s) a day",
			d.Config.Limits.UnverifiedPerSenderPerDay)}, nil
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
	case target == nil && c.noTarget != "":
		return answer(reports.AnswerInvalid, c.noTarget), nil
	case target == nil:
		return answer(reports.AnswerNoSeries, ""), nil
	}
	if ok, reason := Authorize(cfg, c.asker, target.Author); !ok {
		return refuse(reason), nil
	}
	// Validation first: a bad name is answered now, with the valid ones,
	// before anything is built.
	if err := suites.CheckProfile(c.Profile); err != nil {
		return answer(reports.AnswerInvalid, err.Error()), nil
	}
	req, err := mkRequest()
	if err != nil {
		return decision{}, err
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
	if err := withOptions(req, c.Command, target); err != nil {
		return answer(reports.AnswerInvalid, err.Error()), nil
	}
	if ok, why, err := d.mayMail(ctx, tx, c.thread, false, now); err != nil || !ok {
		return decision{Outcome: store.CommandDropped, Why: why}, err
	}
	return decision{Outcome: store.CommandAccepted, Request: req}, nil
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
	id := m.Identity()
	asker := Asker{Address: o.Sender, Authenticated: id.Verified() && id.Address == o.Sender, Why: id.Why}
	owner := view.owner(in.thread)
	for i, c := range cmds {
		cmd := &command{Command: c, key: fmt.Sprintf("%s#%d", m.MessageID, i), asker: asker, thread: in.thread}
		// The series a command tests: the thread author's newest complete
		// version (as `patchbot run` would choose it; an incomplete one
		// cannot be applied), or the one it names by a mail of it.
		target, _, err := mailbox.ChooseOwned(view.series, owner, c.Series)
		if err != nil && c.Series != "" {
			cmd.noTarget = err.Error()
		}
		cmd.answer = reports.Answer{Command: c.Line, Stranger: !asker.Authenticated,
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
			if _, err := in.tx.OptOut(ctx, o.Sender, "#patchbot stop in "+m.MessageID, asker.Authenticated); err != nil {
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
			At: in.now, Outcome: dc.Outcome, Unverified: !asker.Authenticated}); err != nil {
			return err
		}
		d.Metrics.Commands.WithLabelValues(string(dc.Outcome)).Inc()
		series := ""
		if target != nil {
			series = fmt.Sprintf("%s v%d from %s", target.Title, target.Version, target.Identity)
		}
		in.log.Info("command", "command", inert.Clip(c.Line, mailbox.MaxEcho), "from", id.String(),
			"authenticated", asker.Authenticated, "series", series, "outcome", dc.Outcome, "why", dc.Why)
	}
	return nil
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

// suiteNames lists the valid suites and profiles, for help and errors.
func suiteNames() (names, profiles []string) { return suites.Names() }
