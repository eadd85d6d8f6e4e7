package intake

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/patchbot/patchbot/mailbox"
	"github.com/patchbot/patchbot/reports"
	"github.com/patchbot/patchbot/store"
)

var testNow = time.Date(2026, 12, 5, 12, 0, 0, 0, time.UTC)

const seedID = "20260724190556.1950693-1-usama.arif@linux.dev"

// testDesk is the desk of a daemon watching linux-fsdevel on "list" and
// reading mail sent to patchbot on "inbox", with one allowed maintainer.
func testDesk() *Desk {
	cfg := DefaultConfig()
	cfg.Commands.Allow = []string{"maintainer@example.org"}
	return &Desk{Config: cfg, Reply: reports.ReplyOptions{From: "patchbot <patchbot@example.org>"},
		Sources: map[string]mailbox.SourceConfig{
			"list":  {Name: "list", Mbox: "/nonexistent/list", List: "linux-fsdevel@vger.kernel.org"},
			"inbox": {Name: "inbox", Mbox: "/nonexistent/inbox"},
		}}
}

// mails are the mails of an mbox in testdata.
func mails(t *testing.T, path string) []string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, m := range strings.Split(string(data), "\nFrom ") {
		out = append(out, m[strings.Index(m, "\n")+1:]) // no mbox From line
	}
	return out
}

func firstMail(t *testing.T, path string) string { return mails(t, path)[0] }

// reply is a list member's reply in the seed's thread.
func reply(id, from, body string, header ...string) string {
	return fmt.Sprintf("%sFrom: %s\nTo: linux-fsdevel@vger.kernel.org\n"+
		"Subject: Re: [PATCH] squashfs: avoid thundering-herd cache wakeups\nDate: Sat, 5 Dec 2026 12:00:00 +0000\n"+
		"Message-ID: <%s>\nIn-Reply-To: <%s>\nReferences: <%s>\n\n%s", strings.Join(header, ""), from, id, seedID, seedID, body)
}

// in is one mail read: from which source, signed by its From: domain or
// not.
type in struct {
	source, raw string
	signed      bool
}

// decide files each mail as the daemon does and decides on it, applying
// every decision but the last, which it returns.
func decide(t *testing.T, d *Desk, f *fakeKnown, mails ...in) *Decision {
	t.Helper()
	var dec *Decision
	for i, m := range mails {
		var err error
		if dec, err = d.Decide(context.Background(), f, f.keep(t, m.source, m.raw, m.signed)); err != nil {
			t.Fatal(err)
		}
		if i < len(mails)-1 {
			f.apply(dec)
		}
	}
	return dec
}

func outcomes(dec *Decision) string {
	var out []string
	for _, c := range dec.Commands {
		out = append(out, string(c.Outcome))
	}
	return strings.Join(out, " ")
}

func notes(dec *Decision) string {
	var out []string
	for _, n := range dec.Notes {
		out = append(out, n.Msg)
	}
	return strings.Join(out, "\n")
}

func raw(t *testing.T, a Answer) string {
	t.Helper()
	b, err := a.Reply.Bytes()
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// Mail in, decision out: which mail becomes a job, which command is
// obeyed, who gets an answer, with what the store already knows.
func TestDecide(t *testing.T) {
	seed := firstMail(t, "../testdata/mbox/squashfs-thundering-herd.mbox")
	var missing []in
	for _, p := range mails(t, "../testdata/mailbox/missing-part.mbox") {
		missing = append(missing, in{"list", p, false})
	}
	maint := func(id, body string, signed bool) in {
		return in{"list", reply(id, "Maintainer <maintainer@example.org>", body), signed}
	}
	tests := []struct {
		name  string
		setup func(*Desk, *fakeKnown)
		mails []in
		check func(*testing.T, *Decision)
	}{
		{name: "a signed series on a list is queued, its reply to the author and the lists first",
			mails: []in{{"list", seed, true}},
			check: func(t *testing.T, dec *Decision) {
				if len(dec.Jobs) != 1 {
					t.Fatalf("jobs %+v, want the series'", dec.Jobs)
				}
				j := dec.Jobs[0]
				want := "series:usama.arif@linux.dev:squashfs: avoid thundering-herd cache wakeups:v1:usama.arif@linux.dev/verified:" + seedID
				if string(j.Dedupe) != want || j.Trigger != "list" || j.Sender != "usama.arif@linux.dev" || j.Source != "list" {
					t.Errorf("job %q %s from %s on %s", j.Dedupe, j.Trigger, j.Sender, j.Source)
				}
				r := j.Test
				if r.Thread.Author != `"Usama Arif" <usama.arif@linux.dev>` || r.Thread.MessageID != seedID ||
					mailbox.AddrOf(r.Thread.Lists[0]) != "linux-kernel@vger.kernel.org" ||
					mailbox.AddrOf(r.Thread.Lists[1]) != "linux-fsdevel@vger.kernel.org" || len(r.Thread.Lists) > 24 {
					t.Errorf("thread %+v", r.Thread)
				}
				if len(r.Series.Patches) != 1 || r.Series.Patches[0].Title != "squashfs: avoid thundering-herd cache wakeups" ||
					strings.Join(j.Suites, " ") != "cache-contention" || r.Series.Identity != "usama.arif@linux.dev/verified" {
					t.Errorf("series %+v, suites %v", r.Series.SeriesKey, j.Suites)
				}
				if len(dec.Answers)+len(dec.Commands) != 0 {
					t.Errorf("%d answers, %d commands for a patch", len(dec.Answers), len(dec.Commands))
				}
			}},
		{name: "a patch mailed to patchbot alone is not tested",
			mails: []in{{"inbox", seed, true}},
			check: func(t *testing.T, dec *Decision) {
				if len(dec.Jobs) != 0 || !strings.Contains(notes(dec), "not tested on its own") {
					t.Errorf("jobs %d, notes %q", len(dec.Jobs), notes(dec))
				}
			}},
		{name: "a series outside the watched paths is not tested",
			setup: func(d *Desk, _ *fakeKnown) { d.Paths = []string{"fs/fuse/"} },
			mails: []in{{"list", seed, true}},
			check: func(t *testing.T, dec *Decision) {
				if len(dec.Jobs) != 0 || !strings.Contains(notes(dec), "touches no watched path") {
					t.Errorf("jobs %d, notes %q", len(dec.Jobs), notes(dec))
				}
			}},
		{name: "an incomplete series waits for its parts",
			setup: func(d *Desk, _ *fakeKnown) { d.Paths = []string{"fs/demo/"} },
			mails: missing,
			check: func(t *testing.T, dec *Decision) {
				if len(dec.Jobs) != 1 || dec.Jobs[0].Check == nil {
					t.Fatalf("jobs %+v, want a check", dec.Jobs)
				}
				j := dec.Jobs[0]
				if !j.NotBefore.Equal(testNow.Add(6*time.Hour)) || j.Trigger != "incomplete" || !j.Check.Series.Unverified ||
					j.Check.Thread.MessageID != "v1-0@demo.example" || !strings.HasPrefix(string(j.Dedupe), "incomplete:ada@example.org:") {
					t.Errorf("check %+v, not before %s", j, j.NotBefore)
				}
			}},
		{name: "an author's verified stop: the series is not tested",
			setup: func(_ *Desk, f *fakeKnown) { f.optOuts["usama.arif@linux.dev"] = true },
			mails: []in{{"list", seed, true}},
			check: func(t *testing.T, dec *Decision) {
				if len(dec.Jobs) != 0 || !strings.Contains(notes(dec), "opted out; not tested") {
					t.Errorf("jobs %d, notes %q", len(dec.Jobs), notes(dec))
				}
			}},
		{name: "a forged stop in a verified author's name stops the mail, not the test",
			setup: func(_ *Desk, f *fakeKnown) { f.optOuts["usama.arif@linux.dev"] = false },
			mails: []in{{"list", seed, true}},
			check: func(t *testing.T, dec *Decision) {
				if len(dec.Jobs) != 1 || !strings.Contains(notes(dec), "the author not mailed") {
					t.Errorf("jobs %d, notes %q", len(dec.Jobs), notes(dec))
				}
			}},
		{name: "patchbot's own mail read back from a list is not answered",
			mails: []in{{"list", reply("own@example.org", "patchbot <patchbot@example.org>", "#patchbot help\n"), true}},
			check: func(t *testing.T, dec *Decision) {
				if len(dec.Jobs)+len(dec.Commands)+len(dec.Answers)+len(dec.Notes) != 0 {
					t.Errorf("decision %+v", dec)
				}
			}},
		{name: "a machine's mail is not answered",
			mails: []in{{"list", reply("auto@example.org", "bot@example.org", "#patchbot help\n", "Auto-Submitted: auto-replied\n"), true}},
			check: func(t *testing.T, dec *Decision) {
				if len(dec.Commands)+len(dec.Answers) != 0 || !strings.Contains(notes(dec), "Auto-Submitted") {
					t.Errorf("%d commands, %d answers, notes %q", len(dec.Commands), len(dec.Answers), notes(dec))
				}
			}},
		{name: "a From: that decodes to several addresses: nobody to answer",
			mails: []in{{"list", reply("two@example.org", "=?UTF-8?Q?a@x.example=2C_b@y.example?= <a@x.example>", "#patchbot help\n#patchbot test\n"), false}},
			check: func(t *testing.T, dec *Decision) {
				if len(dec.Commands)+len(dec.Answers) != 0 || dec.Tally.Commands[store.CommandDropped] != 2 {
					t.Errorf("%d commands, %d answers, tally %v", len(dec.Commands), len(dec.Answers), dec.Tally)
				}
			}},
		{name: "a signed maintainer's test is queued, answering the command",
			mails: []in{{"list", seed, true}, maint("cmd@example.org", "> #patchbot test locks\n#patchbot test cache-contention profile=quick\n", true)},
			check: func(t *testing.T, dec *Decision) {
				if outcomes(dec) != "accepted" || len(dec.Jobs) != 1 || len(dec.Answers) != 0 {
					t.Fatalf("outcomes %q, %d jobs, %d answers", outcomes(dec), len(dec.Jobs), len(dec.Answers))
				}
				j := dec.Jobs[0]
				if j.Dedupe != "command:cmd@example.org#0" || j.Sender != "maintainer@example.org" ||
					j.Test.Command != "#patchbot test cache-contention profile=quick" || j.Test.Thread.MessageID != "cmd@example.org" ||
					j.Test.Thread.Author != "<maintainer@example.org>" || j.Test.Series.Author != "usama.arif@linux.dev" {
					t.Errorf("job %q from %s: %+v", j.Dedupe, j.Sender, j.Test.Thread)
				}
				if c := dec.Commands[0]; c.Key != "cmd@example.org#0" || c.Unverified || c.ThreadID != seedID {
					t.Errorf("command logged %+v", c)
				}
			}},
		{name: "an unsigned maintainer's test: no job, one fixed answer from the unverified budget",
			mails: []in{{"list", seed, true}, maint("forged@example.org", "#patchbot test cache-contention\n", false)},
			check: func(t *testing.T, dec *Decision) {
				if outcomes(dec) != "refused" || len(dec.Jobs) != 0 || len(dec.Answers) != 1 {
					t.Fatalf("outcomes %q, %d jobs, %d answers", outcomes(dec), len(dec.Jobs), len(dec.Answers))
				}
				a := dec.Answers[0]
				if a.Budget != store.BudgetUnverified || strings.Join(a.Reply.Header.To, " ") != "maintainer@example.org" ||
					a.Reply.Header.Subject != reports.StrangerSubject || a.Reply.Header.InReplyTo != "" {
					t.Errorf("answer %+v from budget %q", a.Reply.Header, a.Budget)
				}
				if r := raw(t, a); strings.Contains(r, "cache-contention") || strings.Contains(r, "forged@") || strings.Contains(r, "squashfs") {
					t.Errorf("the answer repeats what the mail said:\n%s", r)
				}
			}},
		{name: "a stop, then help, in one mail: the stop confirmed, nothing after it",
			mails: []in{{"list", seed, true}, in{"list", reply("stop@linux.dev", "Usama Arif <usama.arif@linux.dev>", "#patchbot stop\n#patchbot help\n"), true}},
			check: func(t *testing.T, dec *Decision) {
				if outcomes(dec) != "answered dropped" || len(dec.OptOuts) != 1 || !dec.OptOuts[0].Verified || len(dec.Answers) != 1 {
					t.Fatalf("outcomes %q, opt-outs %+v, %d answers", outcomes(dec), dec.OptOuts, len(dec.Answers))
				}
				if r := raw(t, dec.Answers[0]); !strings.Contains(r, "will not mail usama.arif@linux.dev again") {
					t.Errorf("the stop was not confirmed:\n%s", r)
				}
			}},
		{name: "fifty copies of a command are one, a fourth command is not read, bad names answered with the valid ones",
			mails: []in{{"list", seed, true}, maint("fold@example.org", strings.Repeat("#patchbot test cache-contention cache-contention\n", 50)+
				"#patchbot test nosuch\n#patchbot test cache-contention profile=nosuch\n#patchbot help\n", true)},
			check: func(t *testing.T, dec *Decision) {
				if outcomes(dec) != "accepted answered answered" || len(dec.Answers) != 2 || len(dec.Jobs) != 1 {
					t.Fatalf("outcomes %q, %d answers, %d jobs", outcomes(dec), len(dec.Answers), len(dec.Jobs))
				}
				first, second := raw(t, dec.Answers[0]), raw(t, dec.Answers[1])
				if !strings.Contains(first, `no suite "nosuch"`) || !strings.Contains(first, "(50 more command line(s)") ||
					!strings.Contains(second, `profile "nosuch"`) || strings.Contains(second, "more command line(s)") {
					t.Errorf("answers:\n%s\n%s", first, second)
				}
			}},
		{name: "a thread that had its mails of the day: the answer is dropped",
			setup: func(_ *Desk, f *fakeKnown) {
				for i := 0; i < 10; i++ {
					f.mailed = append(f.mailed, fakeMail{thread: seedID, at: testNow.Add(-time.Hour)})
				}
			},
			mails: []in{{"list", seed, true}, maint("help@example.org", "#patchbot help\n", true)},
			check: func(t *testing.T, dec *Decision) {
				if outcomes(dec) != "dropped" || len(dec.Answers) != 0 || dec.Tally.Dropped["quota"] != 1 {
					t.Errorf("outcomes %q, %d answers, tally %v", outcomes(dec), len(dec.Answers), dec.Tally)
				}
			}},
		{name: "an unverified address gets one answer a day",
			mails: []in{{"list", seed, true}, maint("first@example.org", "#patchbot help\n", false), maint("second@example.org", "#patchbot help\n", false)},
			check: func(t *testing.T, dec *Decision) {
				if outcomes(dec) != "dropped" || len(dec.Answers) != 0 {
					t.Errorf("outcomes %q, %d answers", outcomes(dec), len(dec.Answers))
				}
			}},
		{name: "a forged command with a long word and a URL: a short fixed answer, nothing of the mail in it",
			mails: []in{{"inbox", "From: spam@spam.example\nTo: patchbot@example.org\nSubject: CHEAP PILLS http://spam.example/buy\n" +
				"Message-ID: <spam@spam.example>\n\n#patchbot BUY-NOW-http://spam.example/" + strings.Repeat("x", 200<<10) + "\n", false}},
			check: func(t *testing.T, dec *Decision) {
				if len(dec.Answers) != 1 {
					t.Fatalf("%d answers", len(dec.Answers))
				}
				r := raw(t, dec.Answers[0])
				if len(r) > 1024 || strings.Contains(r, "spam.example/") || strings.Contains(r, "PILLS") || strings.Contains(r, "xxxx") ||
					strings.Contains(r, "spam@spam.example>") && !strings.Contains(r, "To: <spam@spam.example>") {
					t.Errorf("answer of %d bytes:\n%s", len(r), r)
				}
			}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d, f := testDesk(), newFake()
			if tt.setup != nil {
				tt.setup(d, f)
			}
			tt.check(t, decide(t, d, f, tt.mails...))
		})
	}
}

// The check of an incomplete series, once its wait is over: an answer to
// its author while parts are missing (fixed text for an unverified one),

// A signature that does not cover the thread (here In-Reply-To and
// References, as a large provider signs) does not make a command its
// signer's: the fixed answer to the address says what it left out, as b4
// says what it could not check, and nothing the mail said.
func TestDecidePartlySigned(t *testing.T) {
	d, f := testDesk(), &fakeKnown{}
	f.apply(decide(t, d, f, in{"list", firstMail(t, "../testdata/mbox/squashfs-thundering-herd.mbox"), true}))
	m := f.keep(t, "list", reply("moved@example.org", "Maintainer <maintainer@example.org>", "#patchbot test cache-contention\n"), false)
	m.Message.Attestation.Signatures = []mailbox.Signature{{Domain: "example.org", Result: mailbox.Pass, Aligned: true,
		Unsigned: []string{"In-Reply-To", "References"}}}
	dec, err := d.Decide(context.Background(), f, m)
	if err != nil {
		t.Fatal(err)
	}
	if outcomes(dec) != "refused" || len(dec.Jobs) != 0 || len(dec.Answers) != 1 {
		t.Fatalf("outcomes %q, %d jobs, %d answers", outcomes(dec), len(dec.Jobs), len(dec.Answers))
	}
	if why := fmt.Sprint(dec.Notes); !strings.Contains(why, "in this thread: its DKIM/example.org signature does not cover In-Reply-To, References") {
		t.Errorf("the log does not say why: %s", why)
	}
	a := dec.Answers[0]
	r := strings.Join(strings.Fields(raw(t, a)), " ")
	if !strings.Contains(r, "its DKIM/example.org signature does not cover In-Reply-To, References.") ||
		a.Budget != store.BudgetUnverified || strings.Contains(r, "cache-contention") || strings.Contains(r, "moved@") {
		t.Errorf("the answer (budget %q) does not say what the signature left out, or repeats the mail:\n%s", a.Budget, r)
	}
}

// nothing once the series is whole.
func TestRecheck(t *testing.T) {
	parts := mails(t, "../testdata/mailbox/missing-part.mbox")
	for _, tc := range []struct {
		name    string
		signed  bool
		thirdOf bool // the missing part came meanwhile
		want    string
	}{
		{"a signed author is told in the thread", true, false, "In-Reply-To: <v1-0@demo.example>"},
		{"an unsigned author gets the fixed answer", false, false, "Subject: " + reports.StrangerSeriesSubject},
		{"the series came whole meanwhile: nothing to say", true, true, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d, f := testDesk(), newFake()
			d.Paths = []string{"fs/demo/"}
			var c *Check
			for _, p := range parts {
				dec, err := d.Decide(context.Background(), f, f.keep(t, "list", p, tc.signed))
				if err != nil {
					t.Fatal(err)
				}
				for _, j := range dec.Jobs {
					if j.Check != nil {
						c = j.Check
					}
				}
			}
			if c == nil {
				t.Fatal("no check queued")
			}
			if tc.thirdOf {
				two := strings.NewReplacer("1/3", "2/3", "v1-1@", "v1-2@", "change line 3", "change line 9").Replace(parts[1])
				f.keep(t, "list", two, tc.signed)
			}
			dec, err := d.Recheck(context.Background(), f, c, "patchbot-job-1@example.org", testNow.Add(7*time.Hour))
			if err != nil {
				t.Fatal(err)
			}
			if tc.thirdOf {
				if len(dec.Answers) != 0 || !strings.Contains(notes(dec), "series completed while waiting") {
					t.Errorf("%d answers, notes %q", len(dec.Answers), notes(dec))
				}
				return
			}
			if len(dec.Answers) != 1 {
				t.Fatalf("%d answers, notes %q", len(dec.Answers), notes(dec))
			}
			r := raw(t, dec.Answers[0])
			if !strings.Contains(r, tc.want) || !strings.Contains(r, "patch(es) 2/3 never arrived") {
				t.Errorf("answer lacks %q:\n%s", tc.want, r)
			}
			if !tc.signed && (strings.Contains(r, "demo.example") || strings.Contains(r, "Ada Dev") || strings.Contains(r, "[PATCH")) {
				t.Errorf("the answer to an unverified author repeats the mail:\n%s", r)
			}
		})
	}
}

// The keys of the queue, one form each.
func TestDedupe(t *testing.T) {
	s := &mailbox.Series{Author: "Ada <Ada@Example.org>", Title: "fuse: fewer wake-ups", Version: 2,
		Identity: mailbox.Identity{Address: "ada@example.org", Via: "DKIM/example.org"}}
	for _, tc := range []struct{ got, want Dedupe }{
		{SeriesClaim(s), "series:ada@example.org:fuse: fewer wake-ups:v2:"},
		{SeriesDedupe(s, "p1@example.org"), "series:ada@example.org:fuse: fewer wake-ups:v2:ada@example.org/verified:p1@example.org"},
		{CommandDedupe("c@x", 2), "command:c@x#2"},
		{CheckDedupe(s), "incomplete:ada@example.org:fuse: fewer wake-ups:v2:ada@example.org/verified"},
		{WebDedupe([]byte("{}"), time.Unix(0, 42)), "web:44136fa355b3678a:42"},
	} {
		if tc.got != tc.want {
			t.Errorf("got %q, want %q", tc.got, tc.want)
		}
	}
}
