package intake

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/patchbot/patchbot/mailbox"
	"github.com/patchbot/patchbot/reports"
	"github.com/patchbot/patchbot/suites"
)

// Request is what one test job tests: a series, the thread to answer, and
// what to measure. It is stored with the job as JSON, so that a restarted
// daemon, or a worker on another host, runs the job from it alone.
type Request struct {
	// Series is the series tested, carried whole: its patches as git am
	// applies them, with their subjects and titles, and what it touches.
	Series Series         `json:"series"`
	Thread reports.Thread `json:"thread"`
	// Suites to run; empty means those the touched files select.
	Suites  []string `json:"suites,omitempty"`
	Profile string   `json:"profile"`
	Runs    int      `json:"runs"`
	// AA tests the base against itself (an A/A run): the series is not
	// applied, and a sound comparison must find no change.
	AA bool `json:"aa,omitempty"`
	// Command is the email command line this job answers, quoted in the
	// reply; empty for a series seen on a list or a run from the CLI.
	Command string `json:"command,omitempty"`
	// NoMail keeps the reply with the run (and on the dashboard) and mails
	// nobody: a run asked for on the dashboard.
	NoMail bool `json:"no_mail,omitempty"`
	// ReplyID is the reply's Message-ID; empty lets reports derive one
	// from the run. The daemon gives one per job, so that a job re-run
	// after a crash finds its reply already in the outbox.
	ReplyID string `json:"reply_id,omitempty"`
	// BaseOverride is the base asked for (--base, base=): a tree's name,
	// "default", or a commit; it wins over the series' base and tags.
	BaseOverride string `json:"base_override,omitempty"`
	// First and Last measure patches First..Last only (patches=M-N), on
	// top of patches 1..First-1; 0 measures the whole series.
	First int `json:"first,omitempty"`
	Last  int `json:"last,omitempty"`
	// Attestation is who signed each patch's mail, as verified when it
	// came, for the reply and the dashboard.
	Attestation []reports.Attested `json:"attestation,omitempty"`
}

// Series is a series as a job carries it: enough to build it, name its
// patches in the reply and find its earlier versions, with nothing left to
// parse.
type Series struct {
	SeriesKey
	// Subject is the cover letter's subject, else the first patch's, as
	// posted: the job's title.
	Subject string   `json:"subject,omitempty"`
	Patches []Patch  `json:"patches,omitempty"` // in order
	Files   []string `json:"files,omitempty"`   // the files it touches
	Base    string   `json:"base,omitempty"`    // its base-commit, if it gave one
	// Tags are the subject's tags that may name a tree ("net-next").
	Tags []string `json:"tags,omitempty"`
}

// Patch is one patch of a series as a job carries it.
type Patch struct {
	Subject string `json:"subject"`         // as posted
	Title   string `json:"title,omitempty"` // without reply markers and tags
	Mail    []byte `json:"mail"`            // as git am applies it (mailbox.Series.Mails)
}

// SeriesKey is a series across its versions: the same author, as
// verified, and title.
type SeriesKey struct {
	Author  string `json:"author,omitempty"` // address only
	Title   string `json:"title,omitempty"`
	Version int    `json:"version,omitempty"`
	// Identity is the author's mailbox.Identity key ("addr/verified"):
	// an unverified post's run is never another's earlier version.
	Identity string `json:"identity,omitempty"`
}

// SeriesOf is a series as a job carries it.
func SeriesOf(s *mailbox.Series) Series {
	out := Series{SeriesKey: SeriesKey{Author: mailbox.AddrOf(s.Author), Title: s.Title, Version: s.Version,
		Identity: s.Identity.Key()}, Subject: s.Subject, Files: s.Files(), Base: s.Base, Tags: s.Tags()}
	for _, p := range s.Patches {
		out.Patches = append(out.Patches, Patch{Subject: p.Subject, Title: mailbox.ParseSubject(p.Subject).Title, Mail: p.Raw})
	}
	return out
}

// Mails are the patches as git am applies them, in order.
func (s Series) Mails() [][]byte {
	out := make([][]byte, len(s.Patches))
	for i, p := range s.Patches {
		out[i] = p.Mail
	}
	return out
}

// Subjects are the patches' subjects as posted, in order.
func (s Series) Subjects() []string {
	out := make([]string, len(s.Patches))
	for i, p := range s.Patches {
		out[i] = p.Subject
	}
	return out
}

// Titles are the patches' titles, in order: "" where a subject has none.
func (s Series) Titles() []string {
	out := make([]string, len(s.Patches))
	for i, p := range s.Patches {
		out[i] = p.Title
	}
	return out
}

// Same says whether two keys name one series: the same author and title
// (case and spacing aside), as a reroll keeps them, and the same identity
// when both have one (runs from before identities match any).
func (k SeriesKey) Same(o SeriesKey) bool {
	return k.Author != "" && strings.EqualFold(k.Author, o.Author) && norm(k.Title) == norm(o.Title) &&
		(k.Identity == "" || o.Identity == "" || k.Identity == o.Identity)
}

func norm(s string) string { return strings.Join(strings.Fields(strings.ToLower(s)), " ") }

// NewRequest describes the test of a complete series, answering the mail
// replyTo (the patch, the cover letter, or an email command), with the
// default suites and rounds.
func NewRequest(s *mailbox.Series, defaults SuitesConfig, replyTo string) *Request {
	req := &Request{Series: SeriesOf(s), Profile: defaults.Profile, Runs: defaults.Runs}
	for _, p := range s.Patches {
		if p.Message != nil && p.Message.Attestation != nil {
			a := reports.Attested{Subject: p.Subject, Verified: p.Message.Identity().Verified()}
			for _, c := range p.Attestation {
				a.Checks = append(a.Checks, reports.Check{Pass: c.Pass, Text: c.Text})
			}
			req.Attestation = append(req.Attestation, a)
		}
	}
	p0 := s.Patches[0]
	// Every address as the addressing rule writes it (oneAddress), so
	// that a reply made from the request encodes whatever a name holds;
	// an author that is not one address is kept as it came, for the
	// front desk to refuse.
	author, ok := oneAddress(s.Author)
	if !ok {
		author = s.Author
	}
	var lists []string
	for _, a := range append(append([]string{}, s.To...), s.Cc...) {
		if a, ok := oneAddress(a); ok {
			lists = append(lists, a)
		}
	}
	req.Thread = reports.Thread{Subject: p0.Subject, MessageID: replyTo, References: p0.Message.References,
		Author: author, Lists: lists}
	if s.Cover != nil && replyTo == s.Cover.MessageID {
		req.Thread.Subject, req.Thread.References = s.Cover.Subject, s.Cover.References
	}
	return req
}

// ReplyTarget is the mail a series' reply answers: its cover letter, else
// its first patch.
func ReplyTarget(s *mailbox.Series) string {
	if s.Cover != nil {
		return s.Cover.MessageID
	}
	return s.Patches[0].MessageID
}

// SuiteNames are the suites the request runs: those it names, or those
// the touched files select; each is checked to exist with the request's
// profile, so that a bad name is refused before any kernel is built.
func (r *Request) SuiteNames() ([]string, error) {
	return suites.Choose(r.Suites, r.Series.Files, r.Profile)
}

// Span is the part of the series measured: First..Last, or all of it.
func (r *Request) Span() (first, last int, err error) {
	n := len(r.Series.Patches)
	if n == 0 {
		return 0, 0, errors.New("the request has no patches")
	}
	if r.First == 0 && r.Last == 0 {
		return 1, n, nil
	}
	if r.First < 1 || r.Last < r.First || r.Last > n {
		return 0, 0, fmt.Errorf("patches=%d-%d: the series has %d patches", r.First, r.Last, n)
	}
	return r.First, r.Last, nil
}

// Describe writes on run what the request says of it: the thread it
// answers, the reply's Message-ID, the command, who signed each patch, the
// series' length and the patches measured. It returns the commands'
// inputs that reproduce the run, on host's VM shape and tree.
func (r *Request) Describe(run *reports.Run, host reports.Repro) (reports.Repro, error) {
	first, last, err := r.Span()
	if err != nil {
		return reports.Repro{}, err
	}
	run.Thread, run.ReplyID, run.Command, run.Attestation = r.Thread, r.ReplyID, r.Command, r.Attestation
	run.Series, run.Range = len(r.Series.Patches), nil
	repro := host
	repro.MessageID, repro.Suites, repro.Profile, repro.Runs = r.Thread.MessageID, r.Suites, r.Profile, r.Runs
	repro.AA, repro.Base = r.AA, r.BaseOverride
	if r.First > 0 {
		run.Range = &reports.PatchRange{First: first, Last: last, Total: len(r.Series.Patches)}
		repro.Patches = fmt.Sprintf("%d-%d", first, last)
	}
	return repro, nil
}

// UnmarshalJSON reads a request as stored, also in the form jobs were
// queued in before the series was carried whole (its mails, subjects,
// files, base, tags and title beside the series' key), so that jobs queued
// before an upgrade still run.
func (r *Request) UnmarshalJSON(data []byte) error {
	type plain Request
	var v struct {
		plain
		Title    string   `json:"title"`
		Mails    [][]byte `json:"patches"`
		Subjects []string `json:"subjects"`
		Files    []string `json:"files"`
		Base     string   `json:"base"`
		Tags     []string `json:"tags"`
	}
	if err := json.Unmarshal(data, &v); err != nil {
		return err
	}
	*r = Request(v.plain)
	if len(r.Series.Patches) == 0 && len(v.Mails) > 0 {
		s := &r.Series
		s.Subject, s.Files, s.Base, s.Tags = v.Title, v.Files, v.Base, v.Tags
		for i, m := range v.Mails {
			p := Patch{Mail: m}
			if i < len(v.Subjects) {
				p.Subject, p.Title = v.Subjects[i], mailbox.ParseSubject(v.Subjects[i]).Title
			}
			s.Patches = append(s.Patches, p)
		}
	}
	return nil
}

// Check is a job that looks at stored mail again once its wait is over
// (store.KindCheck, run by the coordinator, never a worker): whether an
// incomplete series is still missing parts, and if so the answer to its
// author saying which, and why it was not tested.
type Check struct {
	// Thread is the mail the answer goes under, to its author alone.
	Thread reports.Thread `json:"thread"`
	Series Incomplete     `json:"incomplete"`
}

// Incomplete names the series a Check looks at.
type Incomplete struct {
	ThreadID string `json:"thread_id"`
	Author   string `json:"author"`
	Title    string `json:"title"`
	Version  int    `json:"version"`
	// Identity is the author's mailbox.Identity key; Unverified says the
	// author was not proven, so the answer draws from the unverified
	// budget and repeats nothing the mail said.
	Identity   string `json:"identity,omitempty"`
	Unverified bool   `json:"unverified,omitempty"`
}

// Is says whether s is the series waited for.
func (c Incomplete) Is(s *mailbox.Series) bool {
	return s.Title == c.Title && s.Version == c.Version && mailbox.AddrOf(s.Author) == c.Author &&
		(c.Identity == "" || s.Identity.Key() == c.Identity)
}
