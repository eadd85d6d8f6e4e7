package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/patchbot/patchbot/intake"
	"github.com/patchbot/patchbot/internal/testenv"
	"github.com/patchbot/patchbot/mailbox"
	"github.com/patchbot/patchbot/mailbox/dkimtest"
	"github.com/patchbot/patchbot/mailbox/dnstest"
	"github.com/patchbot/patchbot/mailbox/sender/smtptest"
	"github.com/patchbot/patchbot/store"
)

// authWorld is a list as patchbot watches it in production, each part
// real: senders sign with their domains' keys (python3-dkim), the keys
// are in a DNS server on loopback, the list's receiving server is Postfix
// with Debian's opendkim milter (which checks the signatures with that DNS
// and adds its Authentication-Results), and it delivers into the mbox
// that `patchbot watch` reads as the list's source. A second mbox is mail
// sent to patchbot directly, written by the test as a local delivery
// would.
type authWorld struct {
	dns   *dnstest.Server
	keys  map[string]*dkimtest.Key
	pf    *smtptest.Postfix
	inbox string
	state string
	d     *daemon
	st    *store.Store
	seed  []byte // the seed patch mail, as its author wrote it
}

const (
	listAddr = "linux-fsdevel@vger.kernel.org"
	author   = "Usama Arif <usama.arif@linux.dev>"
	maint    = "Maintainer <maintainer@example.org>"
	stranger = "Stranger <s@stranger.example>"
	title    = "squashfs: avoid thundering-herd cache wakeups"
)

func newAuthWorld(t *testing.T) *authWorld {
	t.Helper()
	w := &authWorld{dns: dnstest.Start(t)}
	w.keys = dkimtest.NewKeys(t, "key1", "linux.dev", "example.org", "stranger.example")
	for _, k := range w.keys {
		k.Publish(w.dns)
	}
	od := smtptest.StartOpenDKIM(t, authserv, w.dns.Addr)
	dir := t.TempDir()
	w.pf = smtptest.StartPostfixWith(t, filepath.Join(dir, "Maildir"), smtptest.Options{Mbox: filepath.Join(dir, "mail", "fsdevel.mbox"), Milter: od.Milter})
	w.inbox = filepath.Join(dir, "inbox.mbox")
	writeFile(t, w.inbox, "")
	w.state = filepath.Join(dir, "state")
	cfg := filepath.Join(dir, "patchbot.yaml")
	// The coordinator alone: jobs are queued, not run (what is tested is
	// who gets a job and an answer, not a kernel). Nothing is sent: the
	// outbox is read from the store.
	writeFile(t, cfg, fmt.Sprintf(`state_dir: %s
fleet: {local_worker: false}
sources:
  - {name: fsdevel, mbox: %s, list: %s, poll: 200ms}
  - {name: inbox, mbox: %s, poll: 200ms}
dkim: {dns: %q}
reply: {from: "patchbot <%s>"}
commands:
  allow: [maintainer@example.org]
  authserv_ids: [%s, smtp.subspace.kernel.org]
  per_sender_per_hour: 10
`, w.state, w.pf.Mbox, listAddr, w.inbox, w.dns.Addr, botAddr, authserv))
	w.d = startDaemon(t, buildPatchbot(t), cfg, filepath.Join(dir, "daemon.log"))
	deadline := time.Now().Add(time.Minute)
	for {
		if _, err := os.Stat(filepath.Join(w.state, "state.db")); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the daemon made no state:\n%s", w.d.logTail())
		}
		time.Sleep(100 * time.Millisecond)
	}
	st, err := store.Open(filepath.Join(w.state, "state.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	w.st = st
	f, err := os.Open("../testdata/mbox/squashfs-thundering-herd.mbox")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	mailbox.ReadMbox(f, func(raw []byte, _ int64) error {
		if w.seed == nil {
			w.seed = bytes.ReplaceAll(raw, []byte("\r\n"), []byte("\n"))
		}
		return nil
	})
	return w
}

// msg is one mail of the test: a reply, or with patch set a patch whose
// diff is the seed's.
type msg struct {
	id, from, subject, inReplyTo string
	cc                           []string
	header                       string // fields above From:, as the sender wrote them
	body                         string
	patch                        bool
}

func (w *authWorld) raw(m msg) []byte {
	var b strings.Builder
	b.WriteString(m.header)
	fmt.Fprintf(&b, "From: %s\nTo: %s\n", m.from, listAddr)
	if len(m.cc) > 0 {
		fmt.Fprintf(&b, "Cc: %s\n", strings.Join(m.cc, ",\n "))
	}
	fmt.Fprintf(&b, "Subject: %s\nDate: %s\nMessage-ID: <%s>\n", m.subject, time.Now().Format(time.RFC1123Z), m.id)
	if m.inReplyTo != "" {
		fmt.Fprintf(&b, "In-Reply-To: <%s>\nReferences: <%s>\n", m.inReplyTo, m.inReplyTo)
	}
	b.WriteString("MIME-Version: 1.0\nContent-Type: text/plain; charset=UTF-8\nContent-Transfer-Encoding: 8bit\n\n")
	if m.patch {
		_, body, _ := bytes.Cut(w.seed, []byte("\n\n"))
		b.Write(body)
	} else {
		b.WriteString(m.body)
	}
	return []byte(strings.ReplaceAll(b.String(), "\n", "\r\n"))
}

// signedBy is the mail signed with domain's key, as its server signs.
func (w *authWorld) signedBy(t *testing.T, domain string, raw []byte) []byte {
	return w.keys[domain].Sign(t, raw)
}

// toList sends a mail to the list's receiving server.
func (w *authWorld) toList(t *testing.T, raw []byte) {
	t.Helper()
	w.pf.Send(t, "sender@example.net", []string{listAddr}, raw)
}

// toBot appends a mail to the mbox of mail sent to patchbot directly.
func (w *authWorld) toBot(t *testing.T, raw []byte) {
	t.Helper()
	f, err := os.OpenFile(w.inbox, os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var body bytes.Buffer
	if err := mailbox.WriteMboxEntry(&body, bytes.ReplaceAll(raw, []byte("\r\n"), []byte("\n"))); err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write(body.Bytes()); err != nil {
		t.Fatal(err)
	}
}

// wait waits until the daemon has acted on every mail named (kept it, in
// the one transaction that also records its commands and jobs).
func (w *authWorld) wait(t *testing.T, ids ...string) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for _, id := range ids {
		for {
			ok, err := w.st.HasMessage(context.Background(), id)
			if err != nil {
				t.Fatal(err)
			}
			if ok {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("the daemon has not read %s:\n%s\nPostfix:\n%s", id, w.d.logTail(), w.pf.Log())
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
}

func (w *authWorld) outcomes(t *testing.T, id string) []string {
	t.Helper()
	rows, err := w.st.DB().Query(`SELECT outcome FROM commands WHERE message_id LIKE ? ORDER BY message_id`, id+"#%")
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

type queued struct {
	dedupe string
	req    intake.Request
}

func (w *authWorld) jobs(t *testing.T) []queued {
	t.Helper()
	js, err := w.st.Jobs(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var out []queued
	for _, j := range js {
		q := queued{dedupe: j.Dedupe}
		json.Unmarshal(j.Request, &q.req)
		out = append(out, q)
	}
	return out
}

// job is the job a dedupe key part names, or nil.
func (w *authWorld) job(t *testing.T, part string) *queued {
	for _, j := range w.jobs(t) {
		if strings.Contains(j.dedupe, part) {
			return &j
		}
	}
	return nil
}

func (w *authWorld) outbox(t *testing.T) []store.OutboxMessage {
	t.Helper()
	ms, err := w.st.OutboxIn(context.Background(), store.OutboxStates...)
	if err != nil {
		t.Fatal(err)
	}
	return ms
}

// attack is one line of the table: an attack of the issue and the honest
// mail beside it that must still be served.
type attack struct {
	name, mirror      string
	succeeded, served bool
	detail            string
}

// The attacks on who sent a mail, each beside the honest mail that
// must still work, through `patchbot watch` on mbox sources as the issue's
// trial ran them: a forged Authentication-Results, a squatting v2, a
// stranger's v2 in a thread, 30 forged help senders, a forged List-Id and a
// 200 KB unknown command. It logs the table docs/service.md keeps.
func TestMailAuthAttacks(t *testing.T) {
	testenv.Long(t)
	testenv.Tools(t, "postfix", "opendkim")
	testenv.Root(t) // Postfix starts only as root
	start := time.Now()
	w := newAuthWorld(t)
	setup := time.Since(start)
	var table []attack
	contains := func(list []string, part string) bool {
		for _, a := range list {
			if strings.Contains(a, part) {
				return true
			}
		}
		return false
	}

	// The author's series, signed by linux.dev, on the list.
	w.toList(t, w.signedBy(t, "linux.dev", w.raw(msg{id: seedID, from: author, subject: "[PATCH] " + title,
		cc: []string{"Phillip Lougher <phillip@squashfs.org.uk>", "linux-kernel@vger.kernel.org"}, patch: true})))
	w.wait(t, seedID)
	if j := w.job(t, ":usama.arif@linux.dev/verified:"+seedID); j == nil {
		t.Fatalf("the author's signed series was not queued: %v\n%s", w.jobs(t), w.d.logTail())
	}

	// 1. A forged Authentication-Results. Through the list's server: the
	// field claiming its name is stripped, the one claiming kernel.org's
	// is left below the server's own verdict. Straight into the mbox (no
	// server at all): a forged field on top, over a replayed signature of
	// the maintainer's with the command changed.
	cmd := func(id, from, line string) msg {
		return msg{id: id, from: from, subject: "Re: [PATCH] " + title, inReplyTo: seedID, body: "Please measure it.\n\n" + line + "\n"}
	}
	honest := w.signedBy(t, "example.org", w.raw(cmd("honest-cmd-1@example.org", maint, "#patchbot test cache-contention")))
	w.toList(t, honest)
	forgedAR := "Authentication-Results: " + authserv + "; dkim=pass header.d=example.org\n" +
		"Authentication-Results: smtp.subspace.kernel.org; dkim=pass (2048-bit key) header.d=example.org header.i=@example.org\n"
	forged1 := cmd("forged-ar-1@example.org", maint, "#patchbot test cache-contention")
	forged1.header = forgedAR
	w.toList(t, w.raw(forged1))
	forged2 := cmd("forged-ar-2@example.org", maint, "#patchbot test cache-contention")
	forged2.header = forgedAR
	w.toList(t, w.signedBy(t, "stranger.example", w.raw(forged2)))
	b := regexp.MustCompile(`\bb=([A-Za-z0-9+/]{8})`).FindSubmatch(honest)[1]
	replay := bytes.Replace(bytes.Replace(honest, []byte("cache-contention"), []byte("locks"), 1),
		[]byte("honest-cmd-1@"), []byte("forged-ar-3@"), 1)
	w.toBot(t, append([]byte("Authentication-Results: "+authserv+"; dkim=pass header.d=example.org header.b="+string(b)+"\r\n"), replay...))
	w.wait(t, "honest-cmd-1@example.org", "forged-ar-1@example.org", "forged-ar-2@example.org", "forged-ar-3@example.org")
	a := attack{name: "a forged Authentication-Results (the server's name, kernel.org's below it, one on top of a replayed signature)",
		mirror: "the maintainer's signed `#patchbot test`"}
	for _, id := range []string{"forged-ar-1@example.org", "forged-ar-2@example.org", "forged-ar-3@example.org"} {
		if o := w.outcomes(t, id); contains(o, "accepted") || w.job(t, "command:"+id) != nil {
			a.succeeded = true
			a.detail += id + " ran; "
		}
	}
	a.served = strings.Join(w.outcomes(t, "honest-cmd-1@example.org"), " ") == "accepted" && w.job(t, "command:honest-cmd-1@example.org") != nil
	table = append(table, a)

	// 6. A 200 KB unknown command with a URL, under a spam subject, from an
	// unverified sender straight into the mbox; beside it a verified
	// maintainer's typo.
	word := "BUY-NOW-http://spam.example/" + strings.Repeat("x", 200<<10)
	w.toBot(t, w.raw(msg{id: "spam@spam.example", from: "spam@spam.example", subject: "CHEAP PILLS http://spam.example/buy",
		body: "#patchbot " + word + "\n"}))
	w.toList(t, w.signedBy(t, "example.org", w.raw(cmd("typo@example.org", maint, "#patchbot tset"))))
	w.wait(t, "spam@spam.example", "typo@example.org")
	a = attack{name: "a 200 KB unknown command with a URL, under a spam subject, from a forged sender (a fixed answer, nothing of the mail)",
		mirror: "a verified maintainer's unknown command is answered with the reason"}
	var spamAnswers, typoAnswer []string
	for _, m := range w.outbox(t) {
		switch {
		case contains(m.Recipients, "spam@spam.example"):
			spamAnswers = append(spamAnswers, string(m.Raw))
		case strings.Contains(string(m.Raw), "In-Reply-To: <typo@example.org>"):
			typoAnswer = append(typoAnswer, string(m.Raw))
		}
	}
	// The forged sender gets at most a fixed answer: nothing of the mail
	// (the word, the URL, the subject, its Message-ID), under 1 KB.
	for _, s := range spamAnswers {
		if strings.Contains(s, "xxxx") || strings.Contains(s, "spam.example/") || strings.Contains(s, "PILLS") ||
			strings.Contains(s, "<spam@spam.example>\r\nReferences") || strings.Contains(s, "In-Reply-To") || len(s) > 1<<10 {
			a.succeeded = true
			a.detail = fmt.Sprintf("an answer of %d bytes echoes the mail", len(s))
		}
	}
	if len(spamAnswers) > 1 {
		a.succeeded, a.detail = true, fmt.Sprintf("%d answers", len(spamAnswers))
	}
	if line := longestLine(w.d.logText()); len(line) > 2048 {
		a.succeeded, a.detail = true, fmt.Sprintf("a log line of %d bytes", len(line))
	}
	a.served = len(typoAnswer) == 1 && strings.Contains(typoAnswer[0], `unknown command "tset"`)
	table = append(table, a)

	// 5. A patch mailed straight to patchbot with a List-Id of its own and
	// 24 addresses to Cc; beside it the same patch through the list.
	var cc24 []string
	for i := 0; i < 24; i++ {
		cc24 = append(cc24, fmt.Sprintf("listid-victim%d@victims.example", i))
	}
	direct := msg{id: "direct-listid@stranger.example", from: stranger, subject: "[PATCH] squashfs: a patch mailed to the bot",
		cc: cc24, header: "List-Id: <linux-fsdevel.vger.kernel.org>\nList-Post: <mailto:" + listAddr + ">\n", patch: true}
	w.toBot(t, w.signedBy(t, "stranger.example", w.raw(direct)))
	viaList := direct
	viaList.id, viaList.header, viaList.subject = "listid-mirror@stranger.example", "", "[PATCH] squashfs: the same patch on the list"
	w.toList(t, w.signedBy(t, "stranger.example", w.raw(viaList)))
	w.wait(t, "direct-listid@stranger.example", "listid-mirror@stranger.example")
	a = attack{name: "a forged List-Id on a patch mailed to patchbot, 24 Cc", mirror: "the same patch through the list is tested"}
	if w.job(t, "direct-listid@stranger.example") != nil {
		a.succeeded = true
	}
	if j := w.job(t, "listid-mirror@stranger.example"); j != nil {
		a.served = len(j.req.Thread.Lists) <= 24
	}
	table = append(table, a)

	// 2. Squatting: a forged v2 in the author's name, in a thread of its
	// own, sent first; then the author's signed v2.
	w.toList(t, w.raw(msg{id: "squat-v2@evil.example", from: author, subject: "[PATCH v2] " + title, patch: true}))
	w.wait(t, "squat-v2@evil.example")
	w.toList(t, w.signedBy(t, "linux.dev", w.raw(msg{id: "real-v2@linux.dev", from: author, subject: "[PATCH v2] " + title, patch: true})))
	w.wait(t, "real-v2@linux.dev")
	a = attack{name: "a squatting v2 in the author's name, sent before the real one", mirror: "the author's signed v2 is queued, verified"}
	realV2 := w.job(t, ":usama.arif@linux.dev/verified:real-v2@linux.dev")
	squat := w.job(t, ":usama.arif@linux.dev/unverified:squat-v2@evil.example")
	logged := strings.Contains(w.d.logText(), "another mail claims this series and version")
	a.succeeded = realV2 == nil || (squat != nil && !logged)
	a.served = realV2 != nil && realV2.req.Series.Identity == "usama.arif@linux.dev/verified"
	a.detail = fmt.Sprintf("both queued: %v, the second claim logged: %v", realV2 != nil && squat != nil, logged)
	table = append(table, a)

	// 3. A stranger's v2 in the author's thread, Cc'ing 20 addresses;
	// then the author's command, a maintainer's, and a maintainer's that
	// names the stranger's v2.
	var cc20 []string
	for i := 0; i < 20; i++ {
		cc20 = append(cc20, fmt.Sprintf("hijack-victim%d@victims.example", i))
	}
	w.toList(t, w.signedBy(t, "stranger.example", w.raw(msg{id: "hijack-v2@stranger.example", from: stranger,
		subject: "[PATCH v2] " + title, inReplyTo: seedID, cc: cc20, patch: true})))
	w.wait(t, "hijack-v2@stranger.example")
	w.toList(t, w.signedBy(t, "linux.dev", w.raw(cmd("author-cmd@linux.dev", author, "#patchbot test cache-contention"))))
	w.toList(t, w.signedBy(t, "example.org", w.raw(cmd("maint-cmd-2@example.org", maint, "#patchbot test cache-contention"))))
	w.toList(t, w.signedBy(t, "example.org", w.raw(cmd("maint-cmd-3@example.org", maint,
		"#patchbot test cache-contention series=<hijack-v2@stranger.example>"))))
	w.wait(t, "author-cmd@linux.dev", "maint-cmd-2@example.org", "maint-cmd-3@example.org")
	a = attack{name: "a stranger's v2 in the author's thread, 20 Cc, then the author's and a maintainer's `test`",
		mirror: "both test the author's v1; a maintainer who names the v2 by Message-ID tests it"}
	authorJob, maintJob, namedJob := w.job(t, "command:author-cmd@linux.dev"), w.job(t, "command:maint-cmd-2@example.org"),
		w.job(t, "command:maint-cmd-3@example.org")
	switch {
	case authorJob == nil:
		a.succeeded, a.detail = true, "the author's command was not run: "+strings.Join(w.outcomes(t, "author-cmd@linux.dev"), " ")
	case authorJob.req.Series.Author != "usama.arif@linux.dev" || authorJob.req.Series.Version != 1:
		a.succeeded, a.detail = true, fmt.Sprintf("the author's command tests %+v", authorJob.req.Series)
	case maintJob == nil || maintJob.req.Series.Author != "usama.arif@linux.dev":
		a.succeeded, a.detail = true, "the maintainer's command tests the stranger's series"
	}
	for _, j := range w.jobs(t) {
		if contains(j.req.Thread.Lists, "hijack-victim") || contains(j.req.Thread.Cc, "hijack-victim") {
			a.succeeded, a.detail = true, fmt.Sprintf("job %s Cc's the stranger's addresses", j.dedupe)
		}
	}
	a.served = authorJob != nil && maintJob != nil && namedJob != nil && namedJob.req.Series.Author == "s@stranger.example"
	table = append(table, a)

	// 7 (before 4, whose strangers use up the unverified answers of the
	// hour). A signature that does not cover the thread. The author's server
	// signs without In-Reply-To and References (as a large provider does);
	// a copy of the author's command is moved under the stranger's v2. Another signs without Message-ID, 20 days ago, and is
	// replayed under a new one; another signs with l= and its key is gone
	// by the time patchbot reads it, the list's server having vouched for
	// it. Beside them the maintainer's command signed whole, today.
	noThread := dkimtest.Options{Headers: []string{"From", "To", "Subject", "Date", "Message-ID"}}
	movedCmd := cmd("moved-cmd@linux.dev", author, "#patchbot test cache-contention")
	movedCmd.inReplyTo = "hijack-v2@stranger.example"
	w.toList(t, w.keys["linux.dev"].SignWith(t, w.raw(movedCmd), noThread))
	old := w.keys["example.org"].SignWith(t, w.raw(cmd("old-cmd@example.org", maint, "#patchbot test cache-contention")),
		dkimtest.Options{Headers: []string{"From", "To", "Subject", "Date", "In-Reply-To", "References"},
			Time: time.Now().Add(-20 * 24 * time.Hour)})
	w.toList(t, bytes.Replace(old, []byte("<old-cmd@example.org>"), []byte("<replayed-cmd@example.org>"), 1))
	rot := *w.keys["example.org"]
	rot.Selector = "rotating"
	rot.Publish(w.dns)
	w.toList(t, rot.SignWith(t, w.raw(cmd("partial-cmd@example.org", maint, "#patchbot test cache-contention")),
		dkimtest.Options{BodyLength: true}))
	w.dns.SetTXT(rot.Name()) // rotated away once the list's server checked it
	w.toList(t, w.signedBy(t, "example.org", w.raw(cmd("maint-cmd-5@example.org", maint, "#patchbot test cache-contention"))))
	w.wait(t, "moved-cmd@linux.dev", "replayed-cmd@example.org", "partial-cmd@example.org", "maint-cmd-5@example.org")
	a = attack{name: "a signature not covering the thread: In-Reply-To/References left out and the copy moved, Message-ID left out and replayed 20 days later, l= vouched for by the list's server",
		mirror: "the maintainer's command signed whole, today, is queued"}
	for _, id := range []string{"moved-cmd@linux.dev", "replayed-cmd@example.org", "partial-cmd@example.org"} {
		if o := w.outcomes(t, id); contains(o, "accepted") || w.job(t, "command:"+id) != nil {
			a.succeeded = true
			a.detail += id + " ran; "
		}
	}
	// The author (not yet answered today as unverified) is told why, in
	// the fixed answer to an unverified address (found by its recipient:
	// it threads under nothing the mail said).
	said := false
	for _, m := range w.outbox(t) {
		if contains(m.Recipients, "usama.arif@linux.dev") &&
			strings.Contains(strings.Join(strings.Fields(string(m.Raw)), " "), "signature does not cover In-Reply-To, References") {
			said = true
		}
	}
	a.served = said && w.job(t, "command:maint-cmd-5@example.org") != nil
	a.detail += fmt.Sprintf("the answer names the fields left out: %v", said)
	table = append(table, a)

	// 4. Thirty forged senders ask for help, each in a new thread; then a
	// maintainer's signed test.
	var helpIDs []string
	for i := 0; i < 30; i++ {
		id := fmt.Sprintf("help-%02d@victims.example", i)
		helpIDs = append(helpIDs, id)
		w.toList(t, w.raw(msg{id: id, from: fmt.Sprintf("victim%02d@victims.example", i), subject: "patchbot?", body: "#patchbot help\n"}))
	}
	w.wait(t, helpIDs...)
	w.toList(t, w.signedBy(t, "example.org", w.raw(cmd("maint-cmd-4@example.org", maint, "#patchbot test cache-contention"))))
	w.wait(t, "maint-cmd-4@example.org")
	a = attack{name: "30 forged senders ask for `help`, each in a new thread, then a maintainer's `test`",
		mirror: "the maintainer's `test` is queued; forged senders get at most the unverified budget"}
	helpAnswers, unverified := 0, 0
	for _, m := range w.outbox(t) {
		if contains(m.Recipients, "@victims.example") {
			helpAnswers++
		}
		if m.Budget == store.BudgetUnverified {
			unverified++
		}
		if len(m.Recipients) != 1 {
			a.succeeded, a.detail = true, fmt.Sprintf("an answer to %d addresses", len(m.Recipients))
		}
	}
	if unverified > intake.DefaultLimits().UnverifiedPerHour {
		a.succeeded, a.detail = true, fmt.Sprintf("%d answers to unverified senders in an hour", unverified)
	}
	a.served = w.job(t, "command:maint-cmd-4@example.org") != nil && helpAnswers > 0
	a.detail += fmt.Sprintf("%d of the 30 answered (%d answers to unverified senders in all)", helpAnswers, unverified)
	table = append(table, a)

	var rows []string
	for _, a := range table {
		rows = append(rows, fmt.Sprintf("| %s | %v | %s | %v | %s |", a.name, a.succeeded, a.mirror, a.served, a.detail))
		if a.succeeded {
			t.Errorf("attack succeeded: %s (%s)", a.name, a.detail)
		}
		if !a.served {
			t.Errorf("honest mail not served: %s (%s)", a.mirror, a.detail)
		}
	}
	t.Logf("setup %s, all %s:\n| attack | succeeded | honest mirror | served | detail |\n|---|---|---|---|---|\n%s",
		setup.Round(time.Millisecond), time.Since(start).Round(time.Millisecond), strings.Join(rows, "\n"))
	if t.Failed() {
		t.Logf("daemon log:\n%s", w.d.logTail())
	}
}

func longestLine(s string) string {
	long := ""
	for _, l := range strings.Split(s, "\n") {
		if len(l) > len(long) {
			long = l
		}
	}
	return long
}
