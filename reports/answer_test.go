package reports

import (
	"strings"
	"testing"
	"time"
)

func TestRenderAnswer(t *testing.T) {
	th := Thread{Subject: "[PATCH] squashfs: x", MessageID: "<cmd@x>", References: []string{"p@x"}, Author: "Dev <dev@x>",
		Lists: []string{"list@x"}, Cc: []string{"cc@x"}}
	at := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		a    Answer
		want []string
	}{
		{Answer{Kind: AnswerHelp, Command: "#patchbot help", Suites: []string{"cache-contention", "locks"}},
			[]string{"> #patchbot help", "#patchbot test [SUITE ...]", "suites: cache-contention, locks"}},
		{Answer{Kind: AnswerNotUnderstood, Command: "#patchbot tset", Reason: `unknown command "tset"`},
			[]string{"> #patchbot tset", `could not understand this command: unknown command "tset"`, "#patchbot help"}},
		{Answer{Kind: AnswerRefused, Command: "#patchbot test", Reason: "x@y is not on the allow-list"},
			[]string{"did not run this command: x@y is not on the allow-list."}},
		{Answer{Kind: AnswerNoSeries, Command: "#patchbot test"}, []string{"no patch series in this thread"}},
		{Answer{Kind: AnswerInvalid, Command: "#patchbot test nosuch", Reason: `no suite named "nosuch"`,
			Suites: []string{"cache-contention", "locks"}, Profiles: []string{"quick", "full"}},
			[]string{`did not run this command: no suite named "nosuch".`, "Suites: cache-contention, locks.", "Profiles: quick, full."}},
		{Answer{Kind: AnswerStopped, Command: "#patchbot stop", Reason: "dev@x"},
			[]string{"will not mail dev@x again"}},
		// More profiles than a line holds wrap under the first name.
		{Answer{Kind: AnswerHelp, Command: "#patchbot help", Profiles: []string{"full", "quick", "quick-32k", "standard", "three-windows", "wide", "one-boot", "table"}},
			[]string{"      profiles: full, quick, quick-32k, standard, three-windows, wide,\n                one-boot, table\n"}},
		{Answer{Kind: AnswerHelp, Command: "#patchbot help", Ignored: 51},
			[]string{"(51 more command line(s) in the mail were not read"}},
		// A command longer than a line is cut, not refused: the answer must
		// render whatever the sender wrote.
		{Answer{Kind: AnswerNotUnderstood, Command: "#patchbot test " + strings.Repeat("x", 500),
			Reason: `unknown option "a=` + strings.Repeat("y", 300) + `"`},
			[]string{"> #patchbot test xxxx", "x…\n"}},
		{Answer{Kind: AnswerIncomplete, Missing: []string{"2/3", "3/3"}, Waited: "6 hours", Reason: "patches 2, 3 are missing"},
			[]string{"After waiting 6", "patch(es) 2/3, 3/3 never arrived.", "patches 2, 3 are missing", "A complete resend"}},
	} {
		t.Run(string(tc.a.Kind), func(t *testing.T) {
			tc.a.Thread, tc.a.MessageID, tc.a.Date = th, "answer-1@patchbot", at
			r, err := RenderAnswer(tc.a, ReplyOptions{From: "patchbot <bot@patchbot>"})
			if err != nil {
				t.Fatal(err)
			}
			for _, w := range tc.want {
				if !strings.Contains(r.Body, w) {
					t.Errorf("answer lacks %q:\n%s", w, r.Body)
				}
			}
			if !strings.HasSuffix(r.Body, "\n-- \npatchbot, an automated kernel patch tester\n") {
				t.Errorf("answer does not end in the signature:\n%q", r.Body)
			}
			// An answer goes to its asker alone: never the lists or Cc.
			rcpt, _ := r.Recipients()
			if len(rcpt) != 1 || rcpt[0] != "dev@x" {
				t.Errorf("recipients %v, want only dev@x", rcpt)
			}
			if r.Header.InReplyTo != "cmd@x" || strings.Join(r.Header.References, " ") != "p@x cmd@x" {
				t.Errorf("threading: In-Reply-To %q References %v", r.Header.InReplyTo, r.Header.References)
			}
		})
	}
	if _, err := RenderAnswer(Answer{Kind: AnswerHelp, Thread: th}, ReplyOptions{From: "a@b"}); err == nil {
		t.Error("an answer with no Message-ID or date rendered")
	}
}

// An answer to an unverified sender repeats at most StrangerEcho bytes of
// what the mail said: a 200 KB word with a URL, under a spam subject,
// comes back as 64 bytes of it, under patchbot's own subject.
func TestRenderAnswerToStranger(t *testing.T) {
	word := "#patchbot BUY-NOW-http://spam.example/" + strings.Repeat("x", 200<<10)
	th := Thread{Subject: "CHEAP PILLS http://spam.example/", MessageID: "<cmd@x>", References: []string{"a@x", "b@x"}, Author: "s@x"}
	at := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	for _, kind := range []AnswerKind{AnswerNotUnderstood, AnswerHelp} {
		r, err := RenderAnswer(Answer{Kind: kind, Command: word, Reason: "unknown command \"" + word[10:200] + "\"",
			Thread: th, MessageID: "answer-1@patchbot", Date: at, Stranger: true}, ReplyOptions{From: "patchbot <bot@x>"})
		if err != nil {
			t.Fatal(err)
		}
		raw, _ := r.Bytes()
		if n := strings.Count(string(raw), "x"); n > StrangerEcho {
			t.Errorf("%s: %d bytes of the word repeated", kind, n)
		}
		if strings.Contains(string(raw), "PILLS") || r.Header.Subject != StrangerSubject {
			t.Errorf("%s: subject %q", kind, r.Header.Subject)
		}
		if r.Header.InReplyTo != "cmd@x" || len(r.Header.References) != 1 {
			t.Errorf("%s: threading %q %q, want the mail's own Message-ID alone", kind, r.Header.InReplyTo, r.Header.References)
		}
		if !strings.Contains(r.Body, "> #patchbot BUY-NOW-http://spam.example/") || !strings.Contains(r.Body, "#patchbot help") {
			t.Errorf("%s: the answer does not say what it answers:\n%s", kind, r.Body)
		}
	}
}
