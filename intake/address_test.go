package intake

import (
	"net/mail"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/patchbot/patchbot/internal/inert"
	"github.com/patchbot/patchbot/mailbox"
	"github.com/patchbot/patchbot/reports"
)

// A reply's Cc: one address each, given once, never the author, the
// lists first (those the thread's mail came through, and list hosts), cut
// at the cap.
func TestCapCc(t *testing.T) {
	lists := map[string]bool{"team@example.org": true}
	for _, tc := range []struct {
		cc     []string
		n      int
		lists  string
		people string
	}{
		{[]string{"p1@x.org", "linux-fsdevel@vger.kernel.org", "team@example.org", "P1 <P1@X.org>", "author@x.org"}, 10,
			"<linux-fsdevel@vger.kernel.org> <team@example.org>", "<p1@x.org>"},
		{[]string{"p1@x.org", "p2@x.org", "squashfs-devel@lists.sourceforge.net"}, 2,
			"<squashfs-devel@lists.sourceforge.net>", "<p1@x.org>"},
		// Text that is not one address is left out, an encoded name
		// that decodes to more addresses too.
		{[]string{"=?UTF-8?Q?a@evil.example=2C_b@evil.example?= <c@evil.example>", "not an address", "a@x.org, b@x.org"}, 10,
			"", ""},
		{[]string{"p1@x.org"}, -3, "", ""},
	} {
		l, p := capCc("author@x.org", tc.cc, lists, tc.n)
		if strings.Join(l, " ") != tc.lists || strings.Join(p, " ") != tc.people {
			t.Errorf("capCc(%q, %d) = %q, %q; want %q, %q", tc.cc, tc.n, l, p, tc.lists, tc.people)
		}
	}
}

// What an address no signature verified may be told: the kind, its own
// address, the missing parts' numbers; never the mail's text.
func TestStranger(t *testing.T) {
	th := reports.Thread{Subject: "CHEAP PILLS http://spam.example/", MessageID: "http://spam.example/x@y",
		References: []string{"r@x"}, Author: "Buy Now http://spam.example <s@x>"}
	for _, tc := range []struct {
		kind, want reports.AnswerKind
		reason     string
	}{
		{reports.AnswerHelp, reports.AnswerUnverified, ""},
		{reports.AnswerRefused, reports.AnswerUnverified, ""},
		{reports.AnswerNotUnderstood, reports.AnswerUnverified, ""},
		{reports.AnswerInvalid, reports.AnswerUnverified, ""},
		{reports.AnswerNoSeries, reports.AnswerUnverified, ""},
		{reports.AnswerStopped, reports.AnswerStopped, "s@x"},
		{reports.AnswerIncomplete, reports.AnswerIncomplete, ""},
	} {
		a := Stranger(reports.Answer{Kind: tc.kind, Thread: th, Command: "#patchbot http://spam.example/", Reason: "http://spam.example/",
			Suites: []string{"locks"}, Ignored: 3, Missing: []string{"2/3"}, Waited: "6 hours", MessageID: "answer@patchbot"})
		if a.Kind != tc.want || a.Reason != tc.reason || a.Command != "" || !reflect.DeepEqual(a.Thread, reports.Thread{Author: "s@x"}) ||
			a.Suites != nil || a.Ignored != 0 || !a.Stranger || a.MessageID != "answer@patchbot" {
			t.Errorf("%s: %+v", tc.kind, a)
		}
		if tc.kind == reports.AnswerIncomplete && (len(a.Missing) != 1 || a.Waited != "6 hours") {
			t.Errorf("incomplete: %+v", a)
		}
	}
}

// A list hears findings, not silence: a "No change" goes to whoever asked
// for the run alone, unless the source's list hears everything; a finding
// goes to the whole thread; nobody outside the thread ever.
func TestAudience(t *testing.T) {
	d := testDesk()
	d.Reply.ExtraCc = []string{"archive@example.org"}
	d.Sources["all"] = mailbox.SourceConfig{Name: "all", Mbox: "/nonexistent/all", List: "l@example.org", ListHears: mailbox.ListHearsEverything}
	req := &Request{Thread: reports.Thread{Author: "Asker <Asker@example.org>", Cc: []string{"cc@example.org"},
		Lists: []string{"linux-fsdevel@vger.kernel.org", "Person <p@example.org>"}}}
	all := "archive@example.org asker@example.org cc@example.org linux-fsdevel@vger.kernel.org p@example.org"
	for _, tc := range []struct {
		trigger, source string
		finding         reports.Finding
		hear            string
	}{
		{"list", "list", reports.FindingImprovement, all},
		{"list", "list", reports.FindingRegression, all},
		{"list", "list", reports.FindingMixed, all},
		{"list", "list", reports.FindingTrouble, all},
		{"list", "list", reports.FindingNotTested, all},
		{"list", "list", reports.FindingNotJudged, all},
		{"list", "list", "", all}, // what the run found is not known: as before
		{"list", "list", reports.FindingNoChange, ""},
		{"command", "list", reports.FindingNoChange, "asker@example.org"},
		{"command", "list", reports.FindingRegression, all},
		{"list", "all", reports.FindingNoChange, all},
	} {
		a := d.Audience(req, tc.trigger, tc.source, tc.finding)
		if got := keys(a.Hear); got != tc.hear {
			t.Errorf("%s on %s, %q: hear %q, want %q", tc.trigger, tc.source, tc.finding, got, tc.hear)
		}
		if got := keys(a.Named); got != all {
			t.Errorf("%s on %s, %q: named %q", tc.trigger, tc.source, tc.finding, got)
		}
	}
	d.Reply.NoListCc = true
	if got := keys(d.Audience(req, "list", "list", reports.FindingRegression).Named); got != "archive@example.org asker@example.org cc@example.org" {
		t.Errorf("with no_list_cc, named %q", got)
	}
}

func keys(m map[string]bool) string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return strings.Join(out, " ")
}

// A name is a stranger's text: its control characters, raw, quoted or in
// an encoded word, come out escaped, and the address is kept; text that is
// not one address is still refused.
func TestOneAddress(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"Usama Arif <Usama.Arif@linux.dev>", `"Usama Arif" <usama.arif@linux.dev>`},
		{"usama.arif@linux.dev", "<usama.arif@linux.dev>"},
		{"Bad\x1b[2J Name <bad@example.org>", `"Bad\\x1b[2J Name" <bad@example.org>`},
		{"\"Bad\x1b]0;pwned\x07\" <bad@example.org>", `"Bad\\x1b]0;pwned\\x07" <bad@example.org>`},
		{"=?utf-8?q?Bad=1B_Name?= <bad@example.org>", `"Bad\\x1b Name" <bad@example.org>`},
		{"=?utf-8?q?Bad=C2=9B31m?= <bad@example.org>", `"Bad\\u009b31m" <bad@example.org>`},
		{"=?utf-8?q?Bad=0D=0AX-Header:_1?= <bad@example.org>", `"Bad\\x0d\\nX-Header: 1" <bad@example.org>`},
		{"=?utf-8?q?Bad=0D=0ABcc:_x@evil.example?= <bad@example.org>", ""},
		{"\"Quote\\\" \x1b\" <bad@example.org>", `"Quote\\\" \\x1b" <bad@example.org>`},
		{"not an address", ""},
		{"a@x.org, b@x.org", ""},
		{"a@x.org,\x1b b@x.org", ""},
		{"=?utf-8?q?a@evil.example=2C_b@evil.example?= <c@evil.example>", ""},
		{"phillip@squashfs.org.uk, \"Andrew\x1b[5m Morton\" <akpm@linux-foundation.org>", ""},
	} {
		got, ok := oneAddress(tc.in)
		if got != tc.want || ok != (tc.want != "") {
			t.Errorf("oneAddress(%q) = %q, %v; want %q", tc.in, got, ok, tc.want)
			continue
		}
		if !ok {
			continue
		}
		// What a reply's header is made of encodes, and names no control.
		r := reports.Reply{Header: reports.Header{From: "patchbot <bot@example.org>", To: []string{got}, Subject: "x",
			MessageID: "a@b"}, Body: "x\n"}
		raw, err := r.Bytes()
		if err != nil {
			t.Errorf("%q: the reply does not encode: %v", tc.in, err)
		}
		if inert.Has(strings.ReplaceAll(string(raw), "\r\n", "")) {
			t.Errorf("%q: the reply carries a control character:\n%q", tc.in, raw)
		}
	}
}

// A series whose author's name holds an escape sequence is queued, the
// name escaped, on a list and from the dashboard alike, and the reply
// made from its request encodes: a stranger's bytes must never make a run
// fail at its reply, at every retry.
func TestAuthorNameWithControls(t *testing.T) {
	seed := firstMail(t, "../testdata/mbox/squashfs-thundering-herd.mbox")
	seed = strings.Replace(seed, "From: Usama Arif <usama.arif@linux.dev>", "From: Usama\x1b[2J\x1b]0;pwned\x07 Arif <usama.arif@linux.dev>", 1)
	seed = strings.Replace(seed, "Andrew Morton <akpm@linux-foundation.org>", "\"Andrew\x1b[5m Morton\" <akpm@linux-foundation.org>", 1)
	d, f := testDesk(), &fakeKnown{}
	dec := decide(t, d, f, in{"list", seed, true})
	sub, err := d.Submitted([]*mailbox.Message{f.kept[0].m}, nil, "", "", testNow)
	if err != nil {
		t.Fatal(err)
	}
	if len(dec.Jobs) != 1 {
		t.Fatalf("%d jobs from the list: %s", len(dec.Jobs), notes(dec))
	}
	for name, req := range map[string]*Request{"list": dec.Jobs[0].Test, "dashboard": sub.Test} {
		th := req.Thread
		if a, err := mail.ParseAddress(th.Author); err != nil || a.Name != `Usama\x1b[2J\x1b]0;pwned\x07 Arif` ||
			a.Address != "usama.arif@linux.dev" {
			t.Errorf("%s: author %q (%v)", name, th.Author, err)
		}
		if !slices.Contains(th.Lists, "<linux-fsdevel@vger.kernel.org>") {
			t.Errorf("%s: lists %q", name, th.Lists)
		}
		r := reports.Reply{Header: reports.Header{From: "patchbot <bot@example.org>", To: []string{th.Author}, Cc: th.Lists,
			Subject: reports.ReplySubject(th.Subject), MessageID: "a@b"}, Body: "x\n"}
		raw, err := r.Bytes()
		if err != nil {
			t.Errorf("%s: the reply does not encode: %v", name, err)
		}
		if inert.Has(strings.ReplaceAll(string(raw), "\r\n", "")) {
			t.Errorf("%s: the reply carries a control character:\n%q", name, raw)
		}
	}
}
