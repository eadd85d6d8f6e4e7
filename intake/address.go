package intake

import (
	"context"
	"fmt"
	"log/slog"
	"mime"
	"net/mail"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/patchbot/patchbot/internal/inert"
	"github.com/patchbot/patchbot/mailbox"
	"github.com/patchbot/patchbot/reports"
	"github.com/patchbot/patchbot/store"
)

// The addressing rule: whom patchbot may mail, within which limits and
// budgets. Only a thread's own sender and lists are ever mailed, a bounded
// number of times; an answer goes to its asker alone; an address no
// signature verified draws from a budget of its own and is told nothing
// a stranger wrote; a list hears a finished run's findings, not silence.

// threadView is a kept thread as the decision sees it.
type threadView struct {
	series []*mailbox.Series
	lists  map[string]bool // the list addresses its mail came through
	// origins by kept name, whether each mail came through a list, and
	// the mails themselves (with who sent them, as verified).
	origins map[string]mailbox.Origin
	viaList map[string]bool
	msgs    map[string]*mailbox.Message
	// sourceLists are the configured list addresses of the sources the
	// thread's mail came from.
	sourceLists []string
}

// thread assembles the series of a kept thread (the mail's, or another's
// for a check), leaving out one mail (the command being answered): the
// newest version of each, or with all every version (for mailbox.Choose).
func (t *turn) thread(ctx context.Context, skip string, all bool) (*threadView, error) {
	kept, err := t.known.KeptMail(ctx, t.mail.Thread)
	if err != nil {
		return nil, err
	}
	v := &threadView{lists: map[string]bool{}, origins: map[string]mailbox.Origin{}, viaList: map[string]bool{},
		msgs: map[string]*mailbox.Message{}}
	var msgs []*mailbox.Message
	for _, k := range kept {
		m := k.Message
		v.msgs[k.ID] = m
		src := t.Sources[k.Source]
		via := src.ListMail()
		o := mailbox.OriginOf(m)
		if via {
			// A list's own headers count only on the list's mail.
			listAddrs(o, v.lists)
			if l := strings.ToLower(src.List); l != "" {
				v.lists[l] = true
				if !slices.Contains(v.sourceLists, l) {
					v.sourceLists = append(v.sourceLists, l)
				}
			}
		}
		v.origins[k.ID], v.viaList[k.ID] = o, via
		if skip != "" && m.MessageID == skip {
			continue
		}
		msgs = append(msgs, m)
	}
	if all {
		v.series = mailbox.AssembleVersions(msgs)
	} else {
		v.series = mailbox.Assemble(msgs)
	}
	return v, nil
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
	tm, haveTarget := v.msgs[target]
	switch {
	case haveTarget && target == root:
		return target
	case haveRoot && haveTarget && tm.Identity().Verified() && tm.Identity().Key() == r.Identity().Key():
		return target
	case haveRoot:
		return root
	}
	return ""
}

// replyThread makes a test's reply's recipients safe before the job is
// queued: the Cc is that of the mail that started the thread (or the
// thread owner's own mail the series is answered on: see
// threadView.ccMail), read again from its raw header so that a name
// cannot smuggle in addresses; opted-out addresses are left out; then
// bound.
func (t *turn) replyThread(ctx context.Context, th *reports.Thread, v *threadView, target string) error {
	if o, ok := v.origins[v.ccMail(t.mail.Thread, target)]; ok {
		th.Lists = o.Recipients
	} else {
		th.Lists = append([]string(nil), v.sourceLists...) // no mail whose Cc patchbot may take: the lists alone
	}
	th.Cc = nil
	var keep []string
	for _, a := range th.Lists {
		out, err := t.optedOut(ctx, a)
		if err != nil {
			return err
		}
		if !out {
			keep = append(keep, a)
		}
	}
	th.Lists = keep
	t.bound(th, v.lists, v.viaList[target])
	return nil
}

// bound makes a reply's recipients safe before it is composed: the author
// as one address, and, when cc is set, the series' To and Cc as single
// addresses, lists first, cut so that To and Cc (with the configured
// extra Cc) stay within the cap: the lists are kept before any person.
// Without cc (a series sent to patchbot alone, not through a list) the
// reply goes to the author only.
func (d *Desk) bound(th *reports.Thread, lists map[string]bool, cc bool) {
	if a, ok := oneAddress(th.Author); ok {
		th.Author = a
	} else {
		th.Author = "" // nobody to answer: the job is not queued
	}
	var all []string
	if cc {
		all = append(append(all, th.Lists...), th.Cc...)
	}
	listCc, people := capCc(mailbox.AddrOf(th.Author), all, lists, d.Limits.MaxRecipients-1-len(d.Reply.ExtraCc))
	// All in Lists, as NewRequest has them: reply.no_list_cc leaves the
	// whole Cc off, and the header names the lists first.
	th.Lists, th.Cc = append(listCc, people...), nil
}

// oneAddress re-formats s ("Name <addr>") as exactly one address, its
// name quoted or encoded as needed, or says it is not one: text that reads
// as several addresses is never put in a header patchbot writes. A name
// is a stranger's text: its control characters (raw, quoted, or in an
// encoded word) come out escaped (internal/inert), so that no escape
// sequence reaches a mail reader and no name makes a reply that cannot be
// encoded, nor costs the sender the answer.
func oneAddress(s string) (string, bool) {
	a, err := mail.ParseAddress(s)
	if err != nil {
		if q, ok := quotedName(s); ok {
			a, err = mail.ParseAddress(q)
		}
	}
	if err != nil || !strings.Contains(a.Address, "@") {
		return "", false
	}
	return (&mail.Address{Name: inert.Line(a.Name), Address: strings.ToLower(a.Address)}).String(), true
}

// quotedName is "Name <addr>" whose name, as it reads decoded, holds
// control characters, with them escaped and the name quoted, for reading
// again: the angle address is left as it is, and must parse on its own.
// It says false for any other text, which stays refused as it is: a
// name that decodes to more addresses, or names one, is not one address.
func quotedName(s string) (string, bool) {
	i := strings.LastIndexByte(s, '<')
	if i < 0 {
		return "", false
	}
	name := strings.TrimSpace(s[:i])
	if dec, err := new(mime.WordDecoder).DecodeHeader(name); err == nil {
		name = dec
	}
	if !inert.Has(name) || strings.Contains(name, "@") {
		return "", false
	}
	name = inert.Line(strings.Trim(name, `"`))
	return `"` + strings.NewReplacer(`\`, `\\`, `"`, `\"`).Replace(name) + `" ` + s[i:], true
}

// capCc keeps at most n addresses of cc, each parsed as one address and
// given once (never the To address): the lists first, as they carry the
// thread to everyone on them, then people in the order they were named.
// It returns them as lists and people.
func capCc(to string, cc []string, lists map[string]bool, n int) (listCc, people []string) {
	seen := map[string]bool{to: true}
	for _, c := range cc {
		a, ok := oneAddress(c)
		bare := mailbox.AddrOf(a)
		if !ok || seen[bare] {
			continue
		}
		seen[bare] = true
		if isList(bare, lists) {
			listCc = append(listCc, a)
		} else {
			people = append(people, a)
		}
	}
	n = max(n, 0)
	if len(listCc) > n {
		listCc = listCc[:n]
	}
	if len(listCc)+len(people) > n {
		people = people[:n-len(listCc)]
	}
	return listCc, people
}

// isList says whether a bare address is a mailing list: one the thread's
// mail came through (List-Post, List-Id), or one at a list host.
func isList(addr string, lists map[string]bool) bool {
	if lists[addr] {
		return true
	}
	d := mailbox.Domain(addr)
	return d == "vger.kernel.org" || d == "lists.linux.dev" || strings.HasPrefix(d, "lists.")
}

// listAddrs adds the list addresses one mail's origin names: List-Post's,
// and List-Id's identifier with its first dot made an @
// (linux-fsdevel.vger.kernel.org is linux-fsdevel@vger.kernel.org).
func listAddrs(o mailbox.Origin, into map[string]bool) {
	if o.ListPost != "" {
		into[strings.ToLower(o.ListPost)] = true
	}
	if local, host, ok := strings.Cut(o.ListID, "."); ok && local != "" && host != "" {
		into[local+"@"+host] = true
	}
}

// optedOut says whether an address asked never to be mailed: in the
// config, in the store, or in this decision.
func (t *turn) optedOut(ctx context.Context, addr string) (bool, error) {
	out, _, err := t.authorOptedOut(ctx, addr)
	return out, err
}

// authorOptedOut says whether an address opted out, and whether by a
// verified "stop" (the config's opt-outs are the operator's word).
func (t *turn) authorOptedOut(ctx context.Context, addr string) (out, verified bool, err error) {
	a := mailbox.AddrOf(addr)
	if t.Limits.optedOut(a) {
		return true, true, nil
	}
	for _, o := range t.dec.OptOuts {
		if strings.EqualFold(o.Address, a) {
			out, verified = true, verified || o.Verified
		}
	}
	if known, kv, err := t.known.OptOutOf(ctx, a); err != nil || known {
		return true, verified || kv, err
	}
	return out, verified, nil
}

// mayMail says whether one more automatic mail fits the quotas: per
// thread per day, and in all per hour; for an answer to an unverified
// sender (stranger), the unverified budget's hour instead, which is
// counted apart and never uses up the others. The answers this decision
// holds count with the outbox's.
func (t *turn) mayMail(ctx context.Context, thread string, stranger bool) (bool, string, error) {
	l, now := t.Limits, t.mail.At
	pending := func(thread, budget string) int {
		n := 0
		for _, a := range t.dec.Answers {
			if a.Budget == budget && (thread == "" || a.Thread == thread) {
				n++
			}
		}
		return n
	}
	if stranger {
		n, err := t.known.OutboxSince(ctx, "", store.BudgetUnverified, now.Add(-time.Hour))
		if n += pending("", store.BudgetUnverified); err != nil || n < l.UnverifiedPerHour {
			return err == nil, "", err
		}
		return false, fmt.Sprintf("patchbot answered %d unverified senders in the last hour (limit %d)", n, l.UnverifiedPerHour), nil
	}
	n, err := t.known.OutboxSince(ctx, thread, "", now.Add(-24*time.Hour))
	if err != nil {
		return false, "", err
	}
	if n += pending(thread, ""); n >= l.PerThreadPerDay {
		return false, fmt.Sprintf("the thread had %d mails from patchbot in a day (limit %d)", n, l.PerThreadPerDay), nil
	}
	if n, err = t.known.OutboxSince(ctx, "", "", now.Add(-time.Hour)); err != nil {
		return false, "", err
	}
	if n += pending("", ""); n >= l.PerHour {
		return false, fmt.Sprintf("patchbot wrote %d mails in the last hour (limit %d)", n, l.PerHour), nil
	}
	return true, "", nil
}

// answer decides to send a short answer to its one recipient, in the
// mail's thread, if the quotas allow one more mail and the recipient has
// not opted out; it says whether it did, and why not. An answer to an
// address no signature verified says nothing a stranger wrote (Stranger).
func (t *turn) answer(ctx context.Context, a reports.Answer) (bool, string, error) {
	if ok, why, err := t.mayMail(ctx, t.mail.Thread, a.Stranger); err != nil || !ok {
		if err == nil {
			t.dec.drop("quota")
		}
		return false, why, err
	}
	if out, err := t.optedOut(ctx, a.Thread.Author); err != nil || out {
		return false, "the asker opted out", err
	}
	if a.Stranger {
		a = Stranger(a)
	}
	a.Date = t.mail.At
	r, err := reports.RenderAnswer(a, t.Reply)
	if err != nil {
		t.note(slog.LevelError, "answer not sent: it does not render", "kind", a.Kind, "err", err)
		t.dec.drop("render")
		return false, "the answer does not render", nil
	}
	budget := ""
	if a.Stranger {
		budget = store.BudgetUnverified
	}
	t.dec.Answers = append(t.dec.Answers, Answer{Reply: r, Thread: t.mail.Thread, Budget: budget})
	return true, "", nil
}

// Stranger is an answer to an address no signature verified, as it may
// be sent: nothing in it that the mail's sender wrote (the mail may be
// forged, and the answer go to someone who never wrote), and little of
// ours. It keeps the kind, the bare address (the one it goes to), the missing
// parts' numbers of an incomplete series, and nothing else: no command
// quoted, no reason (a reason may quote the mail), no subject or
// Message-ID of the mail to thread under, no help text and no list of
// suites. A stop is confirmed, a refusal says the mail was not verified.
func Stranger(a reports.Answer) reports.Answer {
	out := reports.Answer{Kind: a.Kind, Stranger: true, MessageID: a.MessageID, Date: a.Date,
		Thread: reports.Thread{Author: mailbox.AddrOf(a.Thread.Author)}, Unproven: a.Unproven}
	switch a.Kind {
	case reports.AnswerStopped:
		out.Reason = mailbox.AddrOf(a.Thread.Author)
	case reports.AnswerIncomplete:
		out.Missing, out.Waited = a.Missing, a.Waited
	default:
		out.Kind = reports.AnswerUnverified
	}
	return out
}

// Audience is whom a finished run's reply may go to, as bare lower-case
// addresses.
type Audience struct {
	// Named are the addresses its job's thread names: its author, its Cc
	// and its lists (unless reply.no_list_cc), and the configured extra
	// Cc. A reply to anyone else is not one patchbot addressed.
	Named map[string]bool
	// Hear are those of them the reply goes to for what the run found.
	Hear map[string]bool
}

// Audience is whom the reply to a test job goes to. A list hears findings,
// not silence: a reply that tells a finding (an improvement, a
// regression, a mixed result, kernel trouble), why the series was not
// tested, or that too few rounds were run to judge, goes to the whole
// thread; a "No change" goes only to whoever asked for the run (the
// command's sender; nobody for a series seen on a list: the run is on the
// dashboard), unless the job's source lets its list hear everything
// (sources[].list_hears). trigger and source are the job's.
func (d *Desk) Audience(req *Request, trigger, source string, f reports.Finding) Audience {
	a := Audience{Named: map[string]bool{}, Hear: map[string]bool{}}
	add := func(to map[string]bool, list ...string) {
		for _, s := range list {
			if addrs, err := mail.ParseAddressList(s); err == nil {
				for _, addr := range addrs {
					to[strings.ToLower(addr.Address)] = true
				}
			}
		}
	}
	add(a.Named, req.Thread.Author)
	add(a.Named, req.Thread.Cc...)
	if !d.Reply.NoListCc {
		add(a.Named, req.Thread.Lists...)
	}
	add(a.Named, d.Reply.ExtraCc...)
	switch {
	case f != reports.FindingNoChange || d.Sources[source].ListHears == mailbox.ListHearsEverything:
		for k := range a.Named {
			a.Hear[k] = true
		}
	case trigger == "command":
		add(a.Hear, req.Thread.Author) // the asker
	}
	return a
}

// Narrow keeps in a reply's To and Cc only the addresses that hear it, so
// that the mail names no one it is not sent to, and returns the bare
// addresses it left out.
func (a Audience) Narrow(h *reports.Header) (quiet []string) {
	keep := func(list []string) []string {
		var out []string
		for _, s := range list {
			if a.Hear[strings.ToLower(mailbox.AddrOf(s))] {
				out = append(out, s)
			} else {
				quiet = append(quiet, strings.ToLower(mailbox.AddrOf(s)))
			}
		}
		return out
	}
	h.To, h.Cc = keep(h.To), keep(h.Cc)
	return quiet
}

// JobReply renders the reply to a finished test of req from its run in
// dir, as the coordinator says it, whatever the run says of itself: the
// facts are the request's (Describe), the reproduce commands run on
// host's VM shape and tree (with the base the run was tested on only when
// that is a commit), the results' link is link's (given the run's own),
// and the mail goes to whom its finding goes (Audience, Narrow; trigger
// and source are the job's). The reply is kept in dir as the thread's. It
// returns the reply as mailed and the addresses that do not hear it.
func (d *Desk) JobReply(req *Request, trigger, source, dir string, host reports.Repro,
	link func(string) string) (*reports.Reply, []string, error) {
	run, err := reports.LoadRun(dir)
	if err != nil {
		return nil, nil, err
	}
	repro, err := req.Describe(run, host)
	if err != nil {
		return nil, nil, err
	}
	run.ResultsURL = link(run.ResultsURL)
	if repro.Base == "" && run.BaseChoice != nil && run.BaseChoice.How != reports.ByDefault && commitHash.MatchString(run.BaseCommit) {
		repro.Base = run.BaseCommit
	}
	run.Commands = repro.Commands()
	reply, _, err := reports.WriteReply(dir, run, d.Reply)
	if err != nil {
		return nil, nil, err
	}
	quiet := d.Audience(req, trigger, source, reply.Finding).Narrow(&reply.Header)
	return reply, quiet, nil
}

var commitHash = regexp.MustCompile(`^[0-9a-f]{7,64}$`)
