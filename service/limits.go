package service

import (
	"context"
	"fmt"
	"net/mail"
	"strings"
	"time"

	"github.com/patchbot/patchbot/mailbox"
	"github.com/patchbot/patchbot/mailbox/outbox"
	"github.com/patchbot/patchbot/reports"
	"github.com/patchbot/patchbot/store"
)

// LimitsConfig bounds the mail patchbot sends, whoever asks: the
// `limits:` part of patchbot.yaml.
type LimitsConfig struct {
	// MaxRecipients caps To and Cc of every mail. A job's reply keeps its
	// author, then the lists, then the other people Cc'd, up to the cap;
	// the outbox refuses anything above it.
	MaxRecipients int `yaml:"max_recipients"`
	// PerThreadPerDay is how many mails patchbot writes into one thread in
	// 24 hours (answers and replies). Past it, answers are dropped and
	// test commands ignored.
	PerThreadPerDay int `yaml:"per_thread_per_day"`
	// PerHour is how many mails patchbot writes in an hour in all. Past
	// it, answers are dropped and test commands ignored; the replies of
	// jobs already accepted still go out.
	PerHour int `yaml:"per_hour"`
	// OptOut are addresses never mailed, as if each had sent
	// "#patchbot stop".
	OptOut []string `yaml:"opt_out"`

	// Answers to unverified senders (no aligned DKIM signature, no trusted
	// source) come from a budget of their own, which never reduces the
	// quotas above: a stranger in anyone's name can neither silence
	// patchbot for verified senders nor use it to mail many addresses
	// that never wrote. UnverifiedPerSenderPerDay bounds the answers to
	// one address, UnverifiedPerHour those to all of them.
	UnverifiedPerSenderPerDay int `yaml:"unverified_per_sender_per_day"`
	UnverifiedPerHour         int `yaml:"unverified_per_hour"`
}

// DefaultLimits: the seed series' reply (the author and 12 Cc's) fits
// under the recipient cap; an unverified sender gets one answer a day.
func DefaultLimits() LimitsConfig {
	return LimitsConfig{MaxRecipients: outbox.DefaultMaxRecipients, PerThreadPerDay: 10, PerHour: 30,
		UnverifiedPerSenderPerDay: 1, UnverifiedPerHour: 10}
}

func (l LimitsConfig) validate() []string {
	var errs []string
	if l.MaxRecipients < 1 || l.MaxRecipients > 100 {
		errs = append(errs, fmt.Sprintf("limits.max_recipients %d: want 1..100", l.MaxRecipients))
	}
	if l.PerThreadPerDay < 1 {
		errs = append(errs, "limits.per_thread_per_day: want at least 1")
	}
	if l.PerHour < 1 {
		errs = append(errs, "limits.per_hour: want at least 1")
	}
	if l.UnverifiedPerSenderPerDay < 0 || l.UnverifiedPerHour < 0 {
		errs = append(errs, "limits.unverified_per_sender_per_day, limits.unverified_per_hour: want 0 (never answer) or more")
	}
	for _, a := range l.OptOut {
		if _, err := mail.ParseAddress(a); err != nil {
			errs = append(errs, fmt.Sprintf("limits.opt_out %q: %v", a, err))
		}
	}
	return errs
}

// optedOut says whether the config lists the address.
func (l LimitsConfig) optedOut(addr string) bool {
	for _, a := range l.OptOut {
		if mailbox.AddrOf(a) == addr {
			return true
		}
	}
	return false
}

// optOutAddrs are the config's opt-outs as bare addresses, for the
// outbox's last filter.
func optOutAddrs(l LimitsConfig) []string {
	var out []string
	for _, a := range l.OptOut {
		out = append(out, mailbox.AddrOf(a))
	}
	return out
}

// oneAddress re-formats s ("Name <addr>") as exactly one address, its
// name quoted or encoded as needed, or says it is not one: text that reads
// as several addresses is never put in a header patchbot writes.
func oneAddress(s string) (string, bool) {
	a, err := mail.ParseAddress(s)
	if err != nil || !strings.Contains(a.Address, "@") {
		return "", false
	}
	return (&mail.Address{Name: a.Name, Address: strings.ToLower(a.Address)}).String(), true
}

// boundThread makes a reply's recipients safe before it is composed: the
// author as one address, and, when cc is set, the series' To and Cc as
// single addresses, lists first, cut so that To and Cc (with the
// configured extra Cc) stay within the cap: the lists are kept before
// any person. Without cc (a series sent to
// patchbot alone, not through a list) the reply goes to the author only.
func (d *Daemon) boundThread(t *reports.Thread, lists map[string]bool, cc bool) {
	if a, ok := oneAddress(t.Author); ok {
		t.Author = a
	} else {
		t.Author = "" // nobody to answer: the caller does not queue the job
	}
	var all []string
	if cc {
		all = append(append(all, t.Lists...), t.Cc...)
	}
	listCc, people := capCc(mailbox.AddrOf(t.Author), all, lists, d.Config.Limits.MaxRecipients-1-len(d.Config.Reply.ExtraCc))
	// All in Lists, as NewRequest has them: reply.no_list_cc leaves the
	// whole Cc off, and the header names the lists first.
	t.Lists, t.Cc = append(listCc, people...), nil
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
	if n < 0 {
		n = 0
	}
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

// mayMail says whether one more automatic mail fits the quotas: per
// thread per day, and in all per hour; for an answer to an unverified
// sender (stranger), the unverified budget's hour instead, which is
// counted apart and never uses up the others.
func (d *Daemon) mayMail(ctx context.Context, tx *store.Tx, thread string, stranger bool, now time.Time) (bool, string, error) {
	l := d.Config.Limits
	if stranger {
		n, err := tx.OutboxSince(ctx, "", store.BudgetUnverified, now.Add(-time.Hour))
		if err != nil || n < l.UnverifiedPerHour {
			return err == nil, "", err
		}
		return false, fmt.Sprintf("patchbot answered %d unverified senders in the last hour (limit %d)", n, l.UnverifiedPerHour), nil
	}
	n, err := tx.OutboxSince(ctx, thread, "", now.Add(-24*time.Hour))
	if err != nil {
		return false, "", err
	}
	if n >= l.PerThreadPerDay {
		return false, fmt.Sprintf("the thread had %d mails from patchbot in a day (limit %d)", n, l.PerThreadPerDay), nil
	}
	if n, err = tx.OutboxSince(ctx, "", "", now.Add(-time.Hour)); err != nil {
		return false, "", err
	}
	if n >= l.PerHour {
		return false, fmt.Sprintf("patchbot wrote %d mails in the last hour (limit %d)", n, l.PerHour), nil
	}
	return true, "", nil
}
