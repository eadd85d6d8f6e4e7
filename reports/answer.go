package reports

import (
	"bytes"
	"errors"
	"fmt"
	"net/mail"
	"strings"
	"text/template"
	"time"
	"unicode/utf8"

	"github.com/patchbot/patchbot/internal/inert"
)

var answerTemplate = template.Must(template.New("answer.txt.tmpl").Funcs(template.FuncMap{
	"wrap": func(s string) string { return wrap(s, 72) },
	"join": strings.Join,
	"list": listLines,
}).ParseFS(templateFS, "templates/answer.txt.tmpl"))

// listLines is label and names joined by ", ", wrapped to 72 columns,
// each further line under the first name: a list of names grows with the
// suites and their profiles, and a mail's lines must not.
func listLines(label string, names []string) string {
	return label + hanging(strings.Join(names, ", "), utf8.RuneCountInString(label), 72)
}

// AnswerKind is which short answer the daemon gives.
type AnswerKind string

const (
	AnswerHelp          AnswerKind = "help"           // to "#patchbot help"
	AnswerNotUnderstood AnswerKind = "not-understood" // a malformed command; Reason says why
	AnswerNoSeries      AnswerKind = "no-series"      // a command in a thread with nothing to test
	AnswerRefused       AnswerKind = "refused"        // a command patchbot will not run; Reason says why
	AnswerIncomplete    AnswerKind = "incomplete"     // a series whose parts never arrived
	AnswerInvalid       AnswerKind = "invalid"        // a test command naming a suite or profile that does not exist; Reason says which
	AnswerStopped       AnswerKind = "stopped"        // to "#patchbot stop": Reason is the address that will not be mailed again
	// AnswerUnverified is the one answer to a command from an address no
	// signature verified, whatever it asked (a stop aside): fixed text.
	AnswerUnverified AnswerKind = "unverified"
)

// Answer is a short reply with no comparison: the answer to an email
// command, or the word that a series could not be tested.
type Answer struct {
	Kind AnswerKind
	// Thread is the mail answered; the answer goes to its Author alone.
	Thread    Thread
	MessageID string    // the answer's Message-ID, without angle brackets
	Date      time.Time // dates the answer (a pure function: no clock inside)
	Command   string    // the command line answered, quoted at the top
	Reason    string
	// Missing lists the parts that never arrived ("2/3"), for incomplete.
	Missing []string
	// Waited is how long the series waited for them, in words.
	Waited string
	// Suites and Profiles are the valid names, listed in help and in the
	// answer to an invalid command.
	Suites, Profiles []string
	// Ignored counts the commands of the mail past the per-mail limit or
	// repeated, which get no answer.
	Ignored int
	// Stranger: the asker's address is not verified (the mail may be
	// forged, and the answer go to someone who never wrote). Then the
	// answer has a subject of patchbot's own and repeats at most
	// StrangerEcho bytes of what the mail said: the command cut to that,
	// no reason quoting it, and only the mail's own Message-ID (when that
	// short, and given) to thread under. The daemon gives none of these
	// (intake.Stranger): such an answer is fixed text.
	Stranger bool
	// Unproven says, for a stranger's answer, what a valid signature
	// aligned with the asker's address left out (mailbox.Identity.Why:
	// patchbot's words, the fields it did not cover or its time), as b4
	// says what it could not check.
	Unproven string
}

// StrangerEcho is how much of an unverified sender's text an answer
// repeats.
const StrangerEcho = 64

// StrangerSubject is the subject of every answer to an unverified
// sender's command, StrangerSeriesSubject of one about an unverified
// author's series.
const (
	StrangerSubject       = "Re: your #patchbot command"
	StrangerSeriesSubject = "Re: your patch series"
)

// RenderAnswer composes a short answer. Like Render it is pure.
func RenderAnswer(a Answer, opt ReplyOptions) (*Reply, error) {
	if a.Thread.MessageID == "" && !a.Stranger || a.Thread.Author == "" || a.MessageID == "" || a.Date.IsZero() {
		return nil, errors.New("rendering answer: the message answered, its author, the answer's Message-ID and date are required")
	}
	from, err := mail.ParseAddress(opt.From)
	if err != nil {
		return nil, fmt.Errorf("rendering answer: From %q: %w", opt.From, err)
	}
	if a.Stranger {
		a.Command = inert.Clip(a.Command, StrangerEcho)
		if a.Kind == AnswerNotUnderstood || a.Kind == AnswerInvalid {
			a.Reason = "" // it quotes the line again
		}
	}
	// The command is the sender's text: quoted, it must not push a line
	// past the width (a render error would make the mail unanswerable).
	if r := []rune(a.Command); len(r) > MaxColumns-2 {
		a.Command = string(r[:MaxColumns-3]) + "…"
	}
	var body bytes.Buffer
	if err := answerTemplate.Execute(&body, a); err != nil {
		return nil, fmt.Errorf("rendering answer: %w", err)
	}
	// The command quoted and a reason may hold a sender's bytes: no
	// control character reaches a mail reader, as in Render.
	text := tidy(inert.String(body.String()))
	// The signature separator "-- " keeps its space.
	text = strings.Replace(text, "\n--\npatchbot,", "\n-- \npatchbot,", 1)
	for i, line := range strings.Split(text, "\n") {
		if n := utf8.RuneCountInString(line); n > MaxColumns && !unbreakable(line) {
			return nil, fmt.Errorf("rendering answer: line %d is %d columns wide: %q", i+1, n, line)
		}
	}
	h := Header{From: from.String(), To: []string{a.Thread.Author}, Subject: ReplySubject(a.Thread.Subject),
		Date: a.Date.UTC(), MessageID: trimID(a.MessageID), InReplyTo: trimID(a.Thread.MessageID)}
	if a.Stranger {
		h.Subject = StrangerSubject
		if a.Kind == AnswerIncomplete { // no command
			h.Subject = StrangerSeriesSubject
		}
		if len(h.InReplyTo) > StrangerEcho {
			h.InReplyTo = ""
		}
		if h.InReplyTo != "" {
			h.References = []string{h.InReplyTo}
		}
		return &Reply{Header: h, Body: text}, nil
	}
	for _, id := range a.Thread.References {
		h.References = append(h.References, trimID(id))
	}
	if len(h.References) == 0 || h.References[len(h.References)-1] != h.InReplyTo {
		h.References = append(h.References, h.InReplyTo)
	}
	return &Reply{Header: h, Body: text}, nil
}
