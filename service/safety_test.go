package service

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/patchbot/patchbot/intake"
	"github.com/patchbot/patchbot/mailbox"
	"github.com/patchbot/patchbot/store"
)

const seedID = "20260724190556.1950693-1-usama.arif@linux.dev"

// reply is a mail in a thread, as a list member's mailer writes it.
type reply struct {
	id, from, inReplyTo string
	header              string // lines prepended (List-Id, Authentication-Results)
	cc                  []string
	body                string
}

func (r reply) raw() string {
	irt := r.inReplyTo
	if irt == "" {
		irt = seedID
	}
	var b strings.Builder
	b.WriteString(r.header)
	fmt.Fprintf(&b, "From: %s\nTo: linux-fsdevel@vger.kernel.org\n", r.from)
	if len(r.cc) > 0 {
		fmt.Fprintf(&b, "Cc: %s\n", strings.Join(r.cc, ",\n "))
	}
	fmt.Fprintf(&b, "Subject: Re: [PATCH] squashfs: avoid thundering-herd cache wakeups\n"+
		"Date: Mon, 3 Aug 2026 12:00:00 +0100\nMessage-ID: <%s>\nIn-Reply-To: <%s>\nReferences: <%s>\n\n%s",
		r.id, irt, irt, r.body)
	return b.String()
}

// outboxAll is every mail in the outbox, whatever its state.
func (d *testDaemon) outboxAll(t *testing.T) []store.OutboxMessage {
	t.Helper()
	ms, err := d.Store.OutboxIn(context.Background(), store.OutboxStates...)
	if err != nil {
		t.Fatal(err)
	}
	return ms
}

// outcomes are the logged outcomes of a mail's commands, in order.
func (d *testDaemon) outcomes(t *testing.T, msgid string) []string {
	t.Helper()
	rows, err := d.Store.DB().Query(`SELECT outcome FROM commands WHERE message_id LIKE ? ORDER BY message_id`, msgid+"#%")
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var o string
		rows.Scan(&o)
		out = append(out, o)
	}
	return out
}

// The experiment: 15 replies in the seed thread from 5 strangers,
// each with "#patchbot help" fifty times and "#patchbot test nosuch",
// Cc'ing 200 addresses, one with an encoded-word From: that decodes to
// three addresses. It once made patchbot queue 765 mails.
func TestHostileThreadIsBounded(t *testing.T) {
	var victims []string
	for i := 0; i < 200; i++ {
		victims = append(victims, fmt.Sprintf("victim%d@example.com", i))
	}
	body := strings.Repeat("#patchbot help\n", 50) + "#patchbot test nosuch\n"
	strangers := []string{"Stranger One <s1@example.net>", "s2@example.net", "Stranger Three <s3@example.net>",
		"s4@example.net", "=?UTF-8?Q?s5@example.net=2C_victim0@example.com=2C_victim1@example.com?="}
	hostile := func(d *testDaemon) {
		for i := 0; i < 15; i++ {
			d.ingestRaw(t, "list", reply{id: fmt.Sprintf("hostile-%02d@example.net", i), from: strangers[i%5],
				header: listID, cc: victims, body: body}.raw())
		}
	}
	for _, tc := range []struct {
		name   string
		limits func(*intake.LimitsConfig)
		want   int // answers queued
	}{
		// Four strangers who can be answered, none verified: one answer
		// each a day, from the unverified budget.
		{"defaults", func(*intake.LimitsConfig) {}, 4},
		// Without the quotas the per-sender limit alone bounds it: four
		// answers each an hour (help thrice and one refusal).
		{"per-sender limit alone", func(l *intake.LimitsConfig) {
			l.PerThreadPerDay, l.PerHour, l.UnverifiedPerSenderPerDay, l.UnverifiedPerHour = 1000, 1000, 1000, 1000
		}, 16},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			d := newTestDaemon(t, t.TempDir())
			tc.limits(&d.Config.Limits)
			d.ingestFile(t, "list", "../testdata/mbox/squashfs-thundering-herd.mbox")
			d.RunOnce(ctx)
			seedReply := d.outboxAll(t)
			if len(seedReply) != 1 {
				t.Fatalf("the seed series' reply: %d mails", len(seedReply))
			}
			hostile(d)
			all := d.outboxAll(t)[1:]
			perAddr := map[string]int{}
			for _, m := range all {
				if len(m.Recipients) != 1 {
					t.Errorf("answer %s to %d addresses: %v", m.MessageID, len(m.Recipients), m.Recipients)
				}
				for _, a := range m.Recipients {
					perAddr[a]++
				}
			}
			var addrs []string
			for a, n := range perAddr {
				addrs = append(addrs, fmt.Sprintf("%s:%d", a, n))
				if !strings.HasPrefix(a, "s") || !strings.HasSuffix(a, "@example.net") || a == "s5@example.net" {
					t.Errorf("%s was mailed %d times: it never wrote (or wrote with a forged From:)", a, n)
				}
				if n > d.Config.Commands.PerSenderPerHour {
					t.Errorf("%s got %d mails, above the per-sender limit %d", a, n, d.Config.Commands.PerSenderPerHour)
				}
			}
			sort.Strings(addrs)
			if len(all) != tc.want {
				t.Errorf("%d answers queued, want %d", len(all), tc.want)
			}
			jobs, _ := d.Store.Jobs(ctx)
			for _, j := range jobs {
				t.Logf("job %s", j.Dedupe)
			}
			if len(jobs) != 1 {
				t.Errorf("%d jobs, want only the seed's", len(jobs))
			}
			refusals := 0
			for _, m := range all {
				if strings.Contains(string(m.Raw), "did not run this command") {
					refusals++
				}
			}
			if refusals > 4 {
				t.Errorf("%d refusals, want at most one per stranger", refusals)
			}
			t.Logf("15 hostile mails (%d command lines, %d Cc addresses each): %d mails queued (%d refusals), %d recipients in all, to %s",
				51*15, len(victims), len(all), refusals, len(perAddr), strings.Join(addrs, " "))
		})
	}
}

// A command from an allow-listed address counts only when a valid DKIM
// signature aligned with From: proves it (patchbot's own check, or a
// trusted server's for a key since gone), or its source is trusted; a
// forged From:, a signature of another domain, a mail changed after
// signing or an Authentication-Results field the sender wrote do not.
func TestCommandNeedsAVerifiedSender(t *testing.T) {
	ctx := context.Background()
	d := newTestDaemon(t, t.TempDir())
	d.Config.Sources = append(d.Config.Sources, mailbox.SourceConfig{Name: "private", Maildir: "/nonexistent", Trusted: true})
	d.defaults()
	d.ingestFile(t, "list", "../testdata/mbox/squashfs-thundering-herd.mbox")
	const from = "Maintainer <maintainer@example.org>"
	const cmd = "#patchbot test cache-contention\n"
	mail := func(id, header string) []byte {
		return testKeys.sign(t, []byte(reply{id: id, from: from, header: header, body: cmd}.raw()))
	}
	forgedAR := "Authentication-Results: " + testAuthserv + "; dkim=pass header.d=example.org\n"
	tests := []struct {
		name, source string
		raw          []byte
		want         string // the command's outcome
	}{
		{"unsigned", "list", mail("auth-0@example.org", listID), "refused"},
		// Every later unverified one is dropped: one answer a day.
		{"signed by another domain", "list", mail("auth-1@example.org", listID+dkimPass("evil.example")), "dropped"},
		{"a trusted server's pass for no signature", "list", mail("auth-2@example.org", forgedAR+listID), "dropped"},
		{"changed after signing", "list", bytes.Replace(mail("auth-3@example.org", listID+dkimPass("example.org")),
			[]byte("cache-contention"), []byte("locks"), 1), "dropped"},
		{"a pass the sender wrote below From:", "list", []byte(strings.Replace(string(mail("auth-4@example.org", listID)),
			"To:", strings.TrimSuffix(forgedAR, "\n")+"\nTo:", 1)), "dropped"},
		{"signed by example.org", "list", mail("auth-5@example.org", listID+dkimPass("example.org")), "accepted"},
		{"a rotated key the trusted server vouched for", "list", vouch(t, keyGone(mail("auth-6@example.org", listID+dkimPass("example.org"))), testAuthserv), "accepted"},
		{"a rotated key an untrusted server vouched for", "list", vouch(t, keyGone(mail("auth-7@example.org", listID+dkimPass("example.org"))), "mx.evil.example"), "dropped"},
		{"a trusted source", "private", mail("auth-8@example.org", listID), "accepted"},
	}
	for _, tt := range tests {
		m, err := mailbox.ParseBytes(tt.raw)
		if err != nil {
			t.Fatal(err)
		}
		if err := d.Ingest(ctx, tt.source, m, m.MessageID); err != nil {
			t.Fatal(err)
		}
		if got := d.outcomes(t, m.MessageID); len(got) != 1 || got[0] != tt.want {
			t.Errorf("%s: outcome %v, want %s", tt.name, got, tt.want)
		}
	}
	jobs, _ := d.Store.Jobs(ctx)
	if len(jobs) != 4 {
		t.Errorf("%d jobs, want the list's and the three verified commands'", len(jobs))
	}
	// The one answer (an unverified sender's of the day) says why, in
	// patchbot's words alone.
	out := d.outboxAll(t)
	if len(out) != 1 || out[0].Budget != store.BudgetUnverified {
		t.Fatalf("%d answers, want the first unverified command's alone", len(out))
	}
	refusal := strings.Join(strings.Fields(string(out[0].Raw)), " ")
	if !strings.Contains(refusal, "no valid DKIM signature aligned with the address proves that the mail came from it") ||
		strings.Contains(refusal, "auth-0@example.org") || strings.Contains(refusal, "cache-contention") {
		t.Errorf("the unauthenticated command's refusal does not say why, or says what the mail said:\n%s", out[0].Raw)
	}
}

// keyGone makes a signed mail's key unfindable, as when a domain rotated
// it after the mail was checked: the selector points nowhere.
func keyGone(raw []byte) []byte {
	return bytes.Replace(raw, []byte("s=test;"), []byte("s=rotated;"), 1)
}

// vouch prepends a receiving server's DKIM pass for the mail's signature
// (header.d and the start of b=, as servers write them).
func vouch(t *testing.T, raw []byte, authserv string) []byte {
	t.Helper()
	i := bytes.Index(raw, []byte(" b="))
	if i < 0 {
		t.Fatal("no signature")
	}
	b := strings.Join(strings.Fields(string(raw[i+3:i+3+12])), "")[:8]
	return append([]byte("Authentication-Results: "+authserv+";\n dkim=pass header.d=example.org header.b=\""+b+"\"\n"), raw...)
}

// Fifty copies of a command are one; a mail's fourth command is not read;
// a bad suite or profile is answered at once with the valid names, and
// nothing is built for it.
func TestCommandsFoldedAndCheckedFirst(t *testing.T) {
	ctx := context.Background()
	d := newTestDaemon(t, t.TempDir())
	d.ingestFile(t, "list", "../testdata/mbox/squashfs-thundering-herd.mbox")
	d.RunOnce(ctx)
	before := len(d.outboxAll(t))
	body := strings.Repeat("#patchbot test cache-contention cache-contention\n", 50) +
		"#patchbot test nosuch\n#patchbot test cache-contention profile=nosuch\n#patchbot help\n"
	d.ingestRaw(t, "list", reply{id: "fold@example.org", from: "maintainer@example.org",
		header: listID + dkimPass("example.org"), body: body}.raw())
	if got := strings.Join(d.outcomes(t, "fold@example.org"), " "); got != "accepted answered answered" {
		t.Errorf("outcomes %q, want the test accepted and the two bad ones answered (help is the fourth: not read)", got)
	}
	answers := d.outboxAll(t)[before:]
	if len(answers) != 2 {
		t.Fatalf("%d answers, want 2", len(answers))
	}
	for i, want := range []string{`no suite "nosuch"`, `no suite has a profile "nosuch"`} {
		body := string(answers[i].Raw)
		if !strings.Contains(body, want) || !strings.Contains(body, "Suites: cache-contention") {
			t.Errorf("answer %d lacks %q or the valid suites:\n%s", i, want, body)
		}
	}
	if !strings.Contains(string(answers[0].Raw), "(50 more command line(s) in the mail were not read") {
		t.Errorf("the first answer does not say that lines were not read:\n%s", answers[0].Raw)
	}
	d.tester.tests = nil
	if ran, _ := d.RunOnce(ctx); !ran {
		t.Fatal("the command's job did not run")
	}
	if ran, _ := d.RunOnce(ctx); ran {
		t.Error("a second job ran")
	}
	if len(d.tester.tests) != 1 || d.tester.tests[0].Suite != "cache-contention" {
		t.Errorf("suites run: %+v, want cache-contention once", d.tester.tests)
	}
}

// The same command read from two sources for one list runs once, and is
// not refused the second time for the sender's limit.
func TestTwoSourcesOneCommand(t *testing.T) {
	ctx := context.Background()
	d := newTestDaemon(t, t.TempDir())
	d.Config.Commands.PerSenderPerHour = 1
	d.ingestFile(t, "imap", "../testdata/mbox/squashfs-thundering-herd.mbox")
	d.ingestFile(t, "lore", "../testdata/mbox/squashfs-thundering-herd.mbox")
	raw := reply{id: "twice@example.org", from: "maintainer@example.org", header: listID + dkimPass("example.org"),
		body: "#patchbot test\n"}.raw()
	d.ingestRaw(t, "imap", raw)
	d.ingestRaw(t, "lore", raw)
	if jobs, _ := d.Store.Jobs(ctx); len(jobs) != 2 {
		t.Errorf("%d jobs, want the series' and the command's", len(jobs))
	}
	if got := d.outcomes(t, "twice@example.org"); len(got) != 1 || got[0] != "accepted" {
		t.Errorf("outcomes %v, want one accepted", got)
	}
	if out := d.outboxAll(t); len(out) != 0 {
		t.Errorf("%d mails queued, want none (no refusal)", len(out))
	}
}

// "#patchbot stop" is honoured for all later mail, and so is the config's
// opt-out list.
func TestOptOut(t *testing.T) {
	ctx := context.Background()
	d := newTestDaemon(t, t.TempDir())
	d.Config.Limits.OptOut = []string{"Johannes Weiner <hannes@cmpxchg.org>"}
	stop := func(id string) {
		d.ingestRaw(t, "mail", reply{id: id, from: "Usama Arif <usama.arif@linux.dev>", header: listID,
			inReplyTo: "earlier@linux.dev", body: "#patchbot stop\n"}.raw())
	}
	stop("stop-1@linux.dev")
	out := d.outboxAll(t)
	if len(out) != 1 || !strings.Contains(string(out[0].Raw), "will not mail usama.arif@linux.dev again") {
		t.Fatalf("the stop was not confirmed once: %d mails", len(out))
	}
	stop("stop-2@linux.dev")
	if n := len(d.outboxAll(t)); n != 1 {
		t.Errorf("a second stop was answered: %d mails", n)
	}
	if ok, _ := d.Store.OptedOut(ctx, "usama.arif@linux.dev"); !ok {
		t.Error("the opt-out was not stored")
	}
	// The author's next series is not tested, nor anyone mailed about it.
	d.ingestFile(t, "list", "../testdata/mbox/squashfs-thundering-herd.mbox")
	if jobs, _ := d.Store.Jobs(ctx); len(jobs) != 0 {
		t.Fatalf("an opted-out author's series was queued: %d jobs", len(jobs))
	}
	// A maintainer asks for it: the maintainer gets the reply, the author
	// and the configured opt-out do not.
	d.ingestRaw(t, "mail", reply{id: "ask@example.org", from: "maintainer@example.org", header: listID + dkimPass("example.org"),
		body: "#patchbot test\n"}.raw())
	if ran, _ := d.RunOnce(ctx); !ran {
		t.Fatal("the maintainer's job did not run")
	}
	out = d.outboxAll(t)
	last := out[len(out)-1]
	rcpt := strings.Join(last.Recipients, " ")
	if !strings.Contains(rcpt, "maintainer@example.org") || strings.Contains(rcpt, "usama.arif") || strings.Contains(rcpt, "hannes@") {
		t.Errorf("reply recipients %s: want the maintainer, neither opted-out address", rcpt)
	}
}

// A series Cc'ing 500 addresses gets a reply to at most max_recipients:
// the author and the lists first.
func TestReplyRecipientsCapped(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	d := newTestDaemon(t, dir)
	seed, err := os.ReadFile("../testdata/mbox/squashfs-thundering-herd.mbox")
	if err != nil {
		t.Fatal(err)
	}
	var cc []string
	for i := 0; i < 500; i++ {
		cc = append(cc, fmt.Sprintf("person%d@example.com", i))
	}
	// The lists come last, and one name decodes to two more addresses.
	cc = append(cc, "=?UTF-8?Q?x@evil.example=2C_y@evil.example?= <z@evil.example>",
		"linux-kernel@vger.kernel.org", "linux-fsdevel@vger.kernel.org")
	oldCc := "Cc: linux-kernel@vger.kernel.org, linux-fsdevel@vger.kernel.org,\n squashfs-devel@lists.sourceforge.net, brauner@kernel.org, hannes@cmpxchg.org,\n shakeel.butt@linux.dev, jlayton@kernel.org, boris@bur.io, riel@surriel.com,\n kernel-team@meta.com\n"
	if !bytes.Contains(seed, []byte(oldCc)) {
		t.Fatal("the seed's Cc changed")
	}
	many := bytes.Replace(seed, []byte(oldCc), []byte("Cc: "+strings.Join(cc, ",\n ")+"\n"), 1)
	path := filepath.Join(dir, "many.mbox")
	os.WriteFile(path, many, 0o644)
	d.ingestAs(t, "list", path, listID+"List-Post: <mailto:linux-fsdevel@vger.kernel.org>\n")
	if ran, _ := d.RunOnce(ctx); !ran {
		t.Fatal("no job")
	}
	out := d.outboxAll(t)
	if len(out) != 1 {
		t.Fatalf("%d mails", len(out))
	}
	r := out[0].Recipients
	if len(r) != d.Config.Limits.MaxRecipients {
		t.Errorf("%d recipients, want the cap %d", len(r), d.Config.Limits.MaxRecipients)
	}
	// The author, then the lists (named last in the series' Cc), then
	// the people Cc'd first.
	if first := strings.Join(r[:5], " "); first != "usama.arif@linux.dev linux-kernel@vger.kernel.org "+
		"linux-fsdevel@vger.kernel.org phillip@squashfs.org.uk akpm@linux-foundation.org" {
		t.Errorf("the first recipients are %q", first)
	}
	if all := strings.Join(r, " "); strings.Contains(all, "person499") || strings.Contains(all, "evil.example") {
		t.Errorf("the cap kept the last of the Cc, or an address hidden in a name: %s", all)
	}
}

// A patch mailed to patchbot alone (no List-Id) is not tested on its own;
// an allowed sender can still ask, and then only the sender is mailed.
func TestDirectMailIsNotListMail(t *testing.T) {
	ctx := context.Background()
	d := newTestDaemon(t, t.TempDir())
	d.ingestAs(t, "inbox", "../testdata/mbox/squashfs-thundering-herd.mbox", "")
	if jobs, _ := d.Store.Jobs(ctx); len(jobs) != 0 {
		t.Fatalf("direct mail made %d jobs", len(jobs))
	}
	d.ingestRaw(t, "inbox", reply{id: "direct-ask@example.org", from: "maintainer@example.org",
		header: dkimPass("example.org"), body: "#patchbot test\n"}.raw())
	if ran, _ := d.RunOnce(ctx); !ran {
		t.Fatal("the allowed sender's command did not run")
	}
	out := d.outboxAll(t)
	if len(out) != 1 || strings.Join(out[0].Recipients, " ") != "maintainer@example.org" {
		t.Errorf("reply to a direct-mail series went to %v, want the asker alone", out[0].Recipients)
	}
}

// Mail patchbot wrote itself (read back from a list) and mail a machine
// wrote (Auto-Submitted) are never answered: two bots must not talk.
func TestOwnAndAutomaticMailNotAnswered(t *testing.T) {
	d := newTestDaemon(t, t.TempDir())
	d.ingestFile(t, "list", "../testdata/mbox/squashfs-thundering-herd.mbox")
	d.ingestRaw(t, "list", reply{id: "own@localhost", from: d.Config.Reply.From, header: listID,
		body: "patchbot understands these commands:\n\n  #patchbot test [SUITE ...] [profile=P]\n  #patchbot help\n"}.raw())
	d.ingestRaw(t, "list", reply{id: "auto@example.org", from: "bot@example.org", header: listID + "Auto-Submitted: auto-replied\n",
		body: "#patchbot help\n"}.raw())
	if out := d.outboxAll(t); len(out) != 0 {
		t.Errorf("%d answers to patchbot's own or automatic mail", len(out))
	}
}

// A Message-ID may hold a quote and a backquote; it goes all the way to
// the reply's reproduce line, which a shell must read back as exactly
// that one argument, running nothing.
func TestHostileMessageIDReachesReplyQuoted(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	d := newTestDaemon(t, dir)
	const hostile = "x'`touch${IFS}pwned`'$HOME|&{y}@evil.example"
	seed, _ := os.ReadFile("../testdata/mbox/squashfs-thundering-herd.mbox")
	seed = bytes.ReplaceAll(seed, []byte(seedID), []byte(hostile))
	path := filepath.Join(dir, "hostile.mbox")
	os.WriteFile(path, seed, 0o644)
	d.ingestFile(t, "list", path)
	if ran, _ := d.RunOnce(ctx); !ran {
		t.Fatal("no job for the series")
	}
	out := d.outboxAll(t)
	if len(out) != 1 {
		t.Fatalf("%d mails", len(out))
	}
	raw := strings.ReplaceAll(string(out[0].Raw), "\r\n", "\n")
	if !strings.Contains(raw, "In-Reply-To: <"+hostile+">") {
		t.Fatalf("the reply does not answer the hostile Message-ID:\n%s", raw)
	}
	var cmd []string
	lines := strings.Split(raw, "\n")
	for i, l := range lines {
		if strings.HasPrefix(l, "  $ patchbot run") {
			for cmd = []string{strings.TrimPrefix(l, "  $ ")}; strings.HasSuffix(lines[i], " \\"); i++ {
				cmd = append(cmd, lines[i+1])
			}
			break
		}
	}
	if cmd == nil {
		t.Fatalf("no reproduce line in the reply:\n%s", raw)
	}
	work := t.TempDir()
	sh := exec.Command("/bin/sh", "-c", "patchbot() { printf '%s\\n' \"$@\"; }\n"+strings.Join(cmd, "\n"))
	sh.Dir = work
	got, err := sh.Output()
	if err != nil {
		t.Fatalf("the reproduce line does not run in sh: %v\n%s", err, strings.Join(cmd, "\n"))
	}
	args := strings.Split(strings.TrimSuffix(string(got), "\n"), "\n")
	if len(args) < 3 || args[0] != "run" || args[1] != "--msgid" || args[2] != hostile {
		t.Errorf("sh read the reproduce line as %q, want run --msgid %q ...", args, hostile)
	}
	if _, err := os.Stat(filepath.Join(work, "pwned")); err == nil {
		t.Error("the reproduce line ran the Message-ID's command")
	}
}

// A job that was running in two deaths of the daemon is parked: it does
// not run a third time, nobody is mailed, and the start-up says so.
func TestCrashingJobIsParked(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	d := newTestDaemon(t, dir)
	var logs bytes.Buffer
	d.Log = slog.New(slog.NewTextHandler(&logs, nil))
	d.defaults()
	d.ingestFile(t, "list", "../testdata/mbox/squashfs-thundering-herd.mbox")
	for crash := 0; crash < 2; crash++ {
		// The claim, then the daemon dies mid-job (the worker never
		// returns); the next start recovers.
		if _, err := d.Store.ClaimJob(ctx, d.Worker.claim(time.Now())); err != nil {
			t.Fatal(err)
		}
		if err := d.recoverJobs(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if ran, _ := d.RunOnce(ctx); ran {
		t.Error("a parked job ran")
	}
	jobs, _ := d.Store.Jobs(ctx)
	if jobs[0].State != store.JobParked || jobs[0].Crashes != 2 {
		t.Errorf("job = %s after %d crashes, want parked", jobs[0].State, jobs[0].Crashes)
	}
	if out := d.outboxAll(t); len(out) != 0 {
		t.Errorf("%d mails about a parked job", len(out))
	}
	if !strings.Contains(logs.String(), "level=ERROR msg=\"job parked") {
		t.Errorf("no error line for the parked job:\n%s", logs.String())
	}
}

// A reply whose delivery was uncertain and that comes back on a source
// was delivered.
func TestUncertainReplySeenOnSourceIsSent(t *testing.T) {
	ctx := context.Background()
	d := newTestDaemon(t, t.TempDir())
	id, _, err := d.Store.Enqueue(ctx, store.OutboxMessage{MessageID: "patchbot-job-1-x@localhost", From: "patchbot@localhost",
		Recipients: []string{"dev@example.org"}, Raw: []byte("x")})
	if err != nil {
		t.Fatal(err)
	}
	m, _ := d.Store.ClaimOutbox(ctx, "dead", time.Millisecond, time.Now())
	d.Store.MoveOutbox(ctx, m.ID, "dead", store.Sending, store.Delivering, "", time.Time{})
	time.Sleep(2 * time.Millisecond)
	if un, _ := d.Store.MarkUncertain(ctx, time.Now()); len(un) != 1 {
		t.Fatalf("uncertain: %d", len(un))
	}
	d.ingestRaw(t, "list", reply{id: "patchbot-job-1-x@localhost", from: d.Config.Reply.From, header: listID, body: "the reply\n"}.raw())
	if got, _ := d.Store.OutboxMessageByID(ctx, id); got.State != store.Sent {
		t.Errorf("state %s, want sent", got.State)
	}
}

// A series whose author's From: reads as several addresses once decoded
// is not tested: its reply would have nobody safe to go to.
func TestSeriesFromSeveralAddressesNotTested(t *testing.T) {
	dir := t.TempDir()
	d := newTestDaemon(t, dir)
	seed, _ := os.ReadFile("../testdata/mbox/squashfs-thundering-herd.mbox")
	// "a@evil.example, b@evil.example" in base64, as a display name.
	seed = bytes.Replace(seed, []byte("From: Usama Arif <usama.arif@linux.dev>"),
		[]byte("From: =?UTF-8?B?YUBldmlsLmV4YW1wbGUsIGJAZXZpbC5leGFtcGxl?= <usama.arif@linux.dev>"), 1)
	path := filepath.Join(dir, "forged.mbox")
	os.WriteFile(path, seed, 0o644)
	d.ingestFile(t, "list", path)
	if jobs, _ := d.Store.Jobs(context.Background()); len(jobs) != 0 {
		t.Errorf("%d jobs for a series whose author is not one address", len(jobs))
	}
}

// A clean shutdown in the middle of a job gives its claim back: restarts
// do not spend the job's attempts.
func TestShutdownGivesTheAttemptBack(t *testing.T) {
	d := newTestDaemon(t, t.TempDir())
	d.ingestFile(t, "list", "../testdata/mbox/squashfs-thundering-herd.mbox")
	for i := 0; i < 2*d.MaxAttempts; i++ {
		ctx, cancel := context.WithCancel(context.Background())
		d.builder.onPatched = cancel
		d.builder.patchedErr = context.Canceled
		if ran, _ := d.RunOnce(ctx); !ran {
			t.Fatalf("round %d: the job did not run", i)
		}
	}
	jobs, _ := d.Store.Jobs(context.Background())
	if j := jobs[0]; j.State != store.JobQueued || j.Attempts != 0 || j.Stage != "interrupted" {
		t.Errorf("after %d shutdowns: job %s, stage %q, %d attempts; want queued with none spent",
			2*d.MaxAttempts, j.State, j.Stage, j.Attempts)
	}
}

// A stranger's v2 in the author's thread, Cc'ing addresses of its own
// choosing: the author's command still tests the author's series, a
// maintainer's too unless it names the v2, and no reply Cc's the
// stranger's addresses.
func TestStrangersV2InTheThread(t *testing.T) {
	ctx := context.Background()
	d := newTestDaemon(t, t.TempDir())
	d.ingestAs(t, "list", "../testdata/mbox/squashfs-thundering-herd.mbox", dkimPass("linux.dev"))
	seed, _ := os.ReadFile("../testdata/mbox/squashfs-thundering-herd.mbox")
	v2 := strings.SplitN(string(seed), "\nFrom ", 2)[0]
	var cc []string
	for i := 0; i < 20; i++ {
		cc = append(cc, fmt.Sprintf("stranger-cc%d@victims.example", i))
	}
	v2 = strings.NewReplacer("From: Usama Arif <usama.arif@linux.dev>", "From: Stranger <s@stranger.example>",
		"[PATCH] squashfs", "[PATCH v2] squashfs", "Message-ID: <"+seedID+">",
		"Message-ID: <v2@stranger.example>\nIn-Reply-To: <"+seedID+">\nReferences: <"+seedID+">\nCc: "+strings.Join(cc, ", ")).Replace(v2)
	v2 = v2[strings.Index(v2, "\n")+1:] // no mbox From line
	d.ingestRaw(t, "list", dkimPass("stranger.example")+v2)
	d.ingestRaw(t, "list", reply{id: "author-cmd@linux.dev", from: "Usama Arif <usama.arif@linux.dev>",
		header: dkimPass("linux.dev"), body: "#patchbot test\n"}.raw())
	d.ingestRaw(t, "list", reply{id: "maint-cmd@example.org", from: "Maintainer <maintainer@example.org>",
		header: dkimPass("example.org"), body: "#patchbot test\n"}.raw())
	d.ingestRaw(t, "list", reply{id: "maint-named@example.org", from: "Maintainer <maintainer@example.org>",
		header: dkimPass("example.org"), body: "#patchbot test series=v2@stranger.example\n"}.raw())
	jobs, _ := d.Store.Jobs(ctx)
	byKey := map[string]intake.Request{}
	for _, j := range jobs {
		var r intake.Request
		json.Unmarshal(j.Request, &r)
		byKey[j.Dedupe] = r
		if strings.Contains(strings.Join(r.Thread.Lists, " "), "victims.example") {
			t.Errorf("job %s Cc's the stranger's addresses: %v", j.Dedupe, r.Thread.Lists)
		}
	}
	for key, want := range map[string]string{
		"command:author-cmd@linux.dev#0":     "usama.arif@linux.dev",
		"command:maint-cmd@example.org#0":    "usama.arif@linux.dev",
		"command:maint-named@example.org#0":  "s@stranger.example",
		"series:s@stranger.example:squashfs": "", // the v2 itself, as list mail
	} {
		found := false
		for k, r := range byKey {
			if strings.HasPrefix(k, key) {
				found = true
				if want != "" && r.Series.Author != want {
					t.Errorf("%s tests %s's series, want %s's", k, r.Series.Author, want)
				}
			}
		}
		if !found {
			t.Errorf("no job %s (jobs %v)", key, jobs)
		}
	}
}

// A forged v2 in the author's name, sent first in a thread of its own,
// and then the author's signed v2: both are candidates, each queued.
func TestSquattingV2(t *testing.T) {
	ctx := context.Background()
	d := newTestDaemon(t, t.TempDir())
	seed, _ := os.ReadFile("../testdata/mbox/squashfs-thundering-herd.mbox")
	patch := strings.SplitN(string(seed), "\nFrom ", 2)[0]
	patch = strings.Replace(patch[strings.Index(patch, "\n")+1:], "[PATCH] squashfs", "[PATCH v2] squashfs", 1)
	d.ingestRaw(t, "list", strings.Replace(patch, seedID, "squat@evil.example", 1))
	d.ingestRaw(t, "list", dkimPass("linux.dev")+strings.Replace(patch, seedID, "real-v2@linux.dev", 1))
	jobs, _ := d.Store.Jobs(ctx)
	var keys []string
	for _, j := range jobs {
		keys = append(keys, j.Dedupe)
	}
	if len(jobs) != 2 || !strings.HasSuffix(keys[0], ":usama.arif@linux.dev/unverified:squat@evil.example") ||
		!strings.HasSuffix(keys[1], ":usama.arif@linux.dev/verified:real-v2@linux.dev") {
		t.Errorf("jobs %q: want the forged and the real v2, each its own", keys)
	}
}

// Thirty forged senders, each in a new thread, and ten in the seed's, ask
// for help (once they blocked a maintainer everywhere for an hour, and in
// the thread for a day); the maintainer's signed test still runs, and the
// strangers get the unverified budget, one mail each, no more.
func TestStrangersCannotSilenceAMaintainer(t *testing.T) {
	ctx := context.Background()
	d := newTestDaemon(t, t.TempDir())
	d.ingestFile(t, "list", "../testdata/mbox/squashfs-thundering-herd.mbox")
	for i := 0; i < 40; i++ {
		r := reply{id: fmt.Sprintf("help-%02d@victims.example", i), from: fmt.Sprintf("victim%02d@victims.example", i), body: "#patchbot help\n"}
		if i < 30 {
			r.inReplyTo = fmt.Sprintf("nowhere-%02d@victims.example", i) // a thread of its own
		}
		d.ingestRaw(t, "list", r.raw())
	}
	// In the maintainer's own name, unsigned: counted apart from the
	// maintainer's limit.
	for i := 0; i < 5; i++ {
		d.ingestRaw(t, "list", reply{id: fmt.Sprintf("in-his-name-%d@example.org", i), from: "maintainer@example.org", body: "#patchbot help\n"}.raw())
	}
	d.ingestRaw(t, "list", reply{id: "maint@example.org", from: "maintainer@example.org", header: dkimPass("example.org"),
		body: "#patchbot test cache-contention\n"}.raw())
	if o := d.outcomes(t, "maint@example.org"); len(o) != 1 || o[0] != "accepted" {
		t.Errorf("the maintainer's test: %v", o)
	}
	out := d.outboxAll(t)
	perAddr := map[string]int{}
	for _, m := range out {
		if m.Budget != store.BudgetUnverified || len(m.Recipients) != 1 {
			t.Errorf("an answer to a stranger from budget %q to %v", m.Budget, m.Recipients)
		}
		perAddr[m.Recipients[0]]++
	}
	if len(out) != d.Config.Limits.UnverifiedPerHour {
		t.Errorf("%d answers to strangers, want the unverified budget, %d", len(out), d.Config.Limits.UnverifiedPerHour)
	}
	for a, n := range perAddr {
		if n > 1 {
			t.Errorf("%s got %d answers", a, n)
		}
	}
	// The maintainer's own verified limit is untouched.
	c, _ := d.Store.CommandCounts(ctx, "maintainer@example.org", true, time.Now().Add(-time.Hour))
	if c.Counted != 1 {
		t.Errorf("the maintainer's verified commands counted %d, want 1", c.Counted)
	}
}

// A "stop" in the author's name that no signature proves stops the mail
// to the address, not the testing of the author's signed series; the
// author's own signed "stop" stops both.
func TestForgedStopDoesNotHideAVerifiedAuthor(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name, header string
		tested       bool
	}{
		{"forged stop", "", true},
		{"the author's signed stop", dkimPass("linux.dev"), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := newTestDaemon(t, t.TempDir())
			d.ingestRaw(t, "mail", reply{id: "stop@linux.dev", from: "Usama Arif <usama.arif@linux.dev>", header: tc.header,
				inReplyTo: "earlier@linux.dev", body: "#patchbot stop\n"}.raw())
			d.ingestAs(t, "list", "../testdata/mbox/squashfs-thundering-herd.mbox", dkimPass("linux.dev"))
			jobs, _ := d.Store.Jobs(ctx)
			if (len(jobs) == 1) != tc.tested {
				t.Fatalf("%d jobs; want the signed series tested: %v", len(jobs), tc.tested)
			}
			if !tc.tested {
				return
			}
			if ran, _ := d.RunOnce(ctx); !ran {
				t.Fatal("the job did not run")
			}
			out := d.outboxAll(t)
			rcpt := strings.Join(out[len(out)-1].Recipients, " ")
			if strings.Contains(rcpt, "usama.arif@linux.dev") || !strings.Contains(rcpt, "linux-fsdevel@vger.kernel.org") {
				t.Errorf("the reply went to %s: want the lists, not the opted-out address", rcpt)
			}
		})
	}
}

// The reply says who signed each patch, as b4 am does: verified when the
// mail came, carried in the job to the worker that writes the reply.
func TestReplySaysWhoSignedEachPatch(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		header, want string
	}{
		{dkimPass("linux.dev"), "  ✓ [PATCH] squashfs: avoid thundering-herd cache wakeups\n  ---\n  ✓ Signed: DKIM/linux.dev\n"},
		{"", "  ✗ [PATCH] squashfs: avoid thundering-herd cache wakeups\n  ---\n  ✗ No signature (From: usama.arif@linux.dev)\n"},
	} {
		d := newTestDaemon(t, t.TempDir())
		d.ingestAs(t, "list", "../testdata/mbox/squashfs-thundering-herd.mbox", tc.header)
		if ran, _ := d.RunOnce(ctx); !ran {
			t.Fatal("no job ran")
		}
		out := d.outboxAll(t)
		if len(out) != 1 {
			t.Fatalf("%d mails", len(out))
		}
		if body := strings.ReplaceAll(string(out[0].Raw), "\r\n", "\n"); !strings.Contains(body, tc.want) {
			t.Errorf("the reply does not say %q:\n%s", tc.want, body)
		}
	}
}
