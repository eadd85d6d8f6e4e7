// Package intake is the front desk: what to do with one mail. Given a mail
// (parsed, with who sent it as verified), what the store already knows (a
// small read-only view, Known) and the config, Desk.Decide returns a
// Decision as a value: the jobs to queue, the commands obeyed or refused,
// the answers to send and to whom, the opt-outs to record, and what to
// log. Deciding writes nothing, and its tests are tables of mail in,
// decision out; Desk.Apply then writes a decision through the small
// interface of the mail's transaction (Writer: store.Tx), its answers
// through the outbox the daemon (package service) hands it. A run asked
// for on the dashboard is queued by Desk.Submit.
//
// The addressing rule lives here once (address.go): whom a reply or an
// answer may go to, within which limits and budgets; what an unverified
// address may be told (nothing a stranger wrote); and which outcomes of a
// finished run a list hears (Desk.Audience). So do the jobs' requests
// (Request, a test; Check, an incomplete series' wait) and their keys in
// the queue (Dedupe).
package intake

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"log/slog"
	"time"

	"github.com/patchbot/patchbot/mailbox"
	"github.com/patchbot/patchbot/reports"
	"github.com/patchbot/patchbot/store"
)

// Desk decides what to do with mail: the rule, with the config it
// applies.
type Desk struct {
	Config
	// Sources are the configured sources by name (config.SourceName):
	// whether a source's mail is a list's, the list it names, whether it
	// is trusted, and what its list hears of a finished run.
	Sources map[string]mailbox.SourceConfig
	// Reply is how patchbot writes: from whom (its own mail, read back
	// from a list, is never answered), with which extra Cc.
	Reply reports.ReplyOptions
	// Needs is what every test needs of a worker beyond its suites (the
	// VM shape, KVM), for the queue (Row).
	Needs store.Needs
}

// Mail is one mail at the desk, as kept.
type Mail struct {
	*mailbox.Message // with its Attestation
	// Key is what it is kept under (KeyOf), Source the source it was read
	// from, Thread the thread it is kept in (ThreadOf).
	Key, Source, Thread string
	At                  time.Time
}

// Decision is what to do with one mail, as a value. The daemon applies it
// in the mail's transaction: the answers (into the outbox: a "stop" is
// confirmed before it takes effect), the opt-outs, the jobs, then the
// commands' log; and logs the notes.
type Decision struct {
	Jobs     []Job
	Commands []store.Command // each command read, with its outcome, to log
	OptOuts  []OptOut
	Answers  []Answer
	Notes    []Note
	// Tally counts for the metrics: commands by outcome (those logged and
	// those dropped unlogged), and mails not written by why (quota,
	// render).
	Tally Tally
}

// Job is a job to queue: a test (Test) or a check (Check).
type Job struct {
	Dedupe  Dedupe
	Trigger string // "list", "command", "incomplete", "web"
	// Source and Sender are whom the job is for: the source its mail came
	// from, and the series' author or the command's sender.
	Source, Sender string
	Title          string
	Test           *Request
	Suites         []string // the suites a test runs
	Check          *Check
	NotBefore      time.Time // a check waits until then
}

// Row is a job as the queue keeps it: its request as JSON, and what a
// test needs of a worker (the desk's Needs, with its suites).
func (d *Desk) Row(j Job) (store.Job, error) {
	row := store.Job{Dedupe: string(j.Dedupe), Kind: store.KindTest, Trigger: j.Trigger, Title: j.Title,
		Source: j.Source, Sender: j.Sender, NotBefore: j.NotBefore}
	var data any = j.Test
	if j.Check != nil {
		row.Kind, data = store.KindCheck, j.Check
	} else {
		row.Needs = d.Needs
		row.Needs.Suites = j.Suites
	}
	var err error
	row.Request, err = json.Marshal(data)
	return row, err
}

// OptOut is an address that asked never to be mailed again.
type OptOut struct {
	Address, Reason string
	Verified        bool // its "stop" was verified
}

// Answer is a short answer to put in the outbox, rendered and addressed.
type Answer struct {
	Reply  *reports.Reply
	Thread string // the thread whose quota it counts in
	Budget string // "" or store.BudgetUnverified
}

// Note is a line for the daemon's log.
type Note struct {
	Level slog.Level
	Msg   string
	Args  []any
}

// Tally is what a decision adds to the metrics.
type Tally struct {
	Commands map[store.CommandOutcome]int
	Dropped  map[string]int
}

func (d *Decision) note(level slog.Level, msg string, args ...any) {
	d.Notes = append(d.Notes, Note{Level: level, Msg: msg, Args: args})
}

func (d *Decision) count(outcome store.CommandOutcome, n int) {
	if d.Tally.Commands == nil {
		d.Tally.Commands = map[store.CommandOutcome]int{}
	}
	d.Tally.Commands[outcome] += n
}

func (d *Decision) drop(why string) {
	if d.Tally.Dropped == nil {
		d.Tally.Dropped = map[string]int{}
	}
	d.Tally.Dropped[why]++
}

// KeyOf is what a mail is kept under: its Message-ID, or for a mail
// without one a name made from its bytes, so that such a mail is kept, and
// its series assembled, like any other.
func KeyOf(m *mailbox.Message) string {
	if m.MessageID != "" {
		return m.MessageID
	}
	h := sha256.Sum256(m.Raw)
	return "no-message-id-" + hex.EncodeToString(h[:12]) + "@patchbot.invalid"
}

// ThreadOf is the thread a mail is kept in: that of the mail it answers,
// when that is kept (a reply whose References list its parent first stays
// in the thread), else the first of its References, else the mail it
// answers, else its own key (a thread of its own).
func ThreadOf(ctx context.Context, known Known, m *mailbox.Message) (string, error) {
	th, err := known.ThreadOf(ctx, append([]string{m.InReplyTo}, m.References...))
	if err != nil || th != "" {
		return th, err
	}
	switch {
	case len(m.References) > 0:
		return m.References[0], nil
	case m.InReplyTo != "":
		return m.InReplyTo, nil
	}
	return KeyOf(m), nil
}

// Decide decides what to do with a mail the store has just kept (known
// holds it in its thread): obey its commands, or queue the tests of the
// series its patch completes, or nothing.
func (d *Desk) Decide(ctx context.Context, known Known, m Mail) (*Decision, error) {
	t := &turn{Desk: d, known: known, mail: m, origin: mailbox.OriginOf(m.Message), dec: &Decision{}}
	t.log = []any{"source", m.Source, "message_id", m.MessageID, "from", m.Identity().String()}
	if t.origin.Sender != "" && t.origin.Sender == mailbox.AddrOf(d.Reply.From) {
		return t.dec, nil // patchbot's own mail, read back from a list
	}
	var err error
	if cmds := mailbox.ParseCommands(m.Message); len(cmds) > 0 {
		err = t.commands(ctx, cmds)
	} else if m.Diff != "" {
		err = t.patches(ctx)
	}
	return t.dec, err
}

// turn is one decision being made: the rule, what the store knows, and
// what the decision holds so far, which the later checks of the same
// decision count as the store would once it is applied (an answer decided
// uses up quota, a "stop" decided is an opt-out, a command decided counts
// against its sender).
type turn struct {
	*Desk
	known  Known
	mail   Mail
	origin mailbox.Origin
	dec    *Decision
	log    []any // the mail's attributes, for every note
}

func (t *turn) note(level slog.Level, msg string, args ...any) {
	t.dec.note(level, msg, append(append([]any{}, t.log...), args...)...)
}
