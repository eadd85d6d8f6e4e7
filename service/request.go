package service

import (
	"errors"
	"fmt"

	"github.com/patchbot/patchbot/mailbox"
	"github.com/patchbot/patchbot/reports"
	"github.com/patchbot/patchbot/suites"
)

// Request is what one job tests: a series (its patch mails, in order), the
// thread to answer, and what to measure. It is stored with the job as JSON,
// so a restarted daemon can run the job again from it alone.
type Request struct {
	Title   string         `json:"title"`
	Patches [][]byte       `json:"patches"` // one am-ready mail per patch (mailbox.Series.Mails)
	Files   []string       `json:"files"`   // files the series touches
	Base    string         `json:"base,omitempty"`
	Thread  reports.Thread `json:"thread"`
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
	// Incomplete marks a job that only checks, once its wait is over,
	// whether the series of this thread and version is still missing parts,
	// and if so answers why it was not tested.
	Incomplete *IncompleteCheck `json:"incomplete,omitempty"`

	// Tags are the subject's tags that may name a tree ("net-next").
	Tags []string `json:"tags,omitempty"`
	// BaseOverride is the base asked for (--base, base=): a tree's name,
	// "default", or a commit; it wins over Base and Tags.
	BaseOverride string `json:"base_override,omitempty"`
	// First and Last measure patches First..Last only (patches=M-N), on
	// top of patches 1..First-1; 0 measures the whole series.
	First int `json:"first,omitempty"`
	Last  int `json:"last,omitempty"`
	// Subjects are the patches' subjects, in order, for the per-patch
	// parts of the reply.
	Subjects []string `json:"subjects,omitempty"`
	// Series names the series across its versions, so that the reply to
	// v2 can say what v1 measured.
	Series SeriesKey `json:"series"`
	// Attestation is who signed each patch's mail, as verified when it
	// came, for the reply and the dashboard.
	Attestation []reports.Attested `json:"attestation,omitempty"`
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

// IncompleteCheck names the series an incomplete-series job looks at.
type IncompleteCheck struct {
	ThreadID string `json:"thread_id"`
	Author   string `json:"author"`
	Title    string `json:"title"`
	Version  int    `json:"version"`
	// Identity is the author's mailbox.Identity key; Unverified says the
	// author was not proven, so the answer draws from the unverified
	// budget.
	Identity   string `json:"identity,omitempty"`
	Unverified bool   `json:"unverified,omitempty"`
}

// NewRequest describes the test of a complete series, answering the mail
// replyTo (the patch, the cover letter, or an email command).
func NewRequest(s *mailbox.Series, defaults SuitesConfig, replyTo string) *Request {
	req := &Request{Title: s.Subject, Patches: s.Mails(), Files: s.Files(), Base: s.Base,
		Profile: defaults.Profile, Runs: defaults.Runs,
		Series: SeriesKey{Author: mailbox.AddrOf(s.Author), Title: s.Title, Version: s.Version, Identity: s.Identity.Key()}}
	req.Subjects = s.Subjects()
	for _, p := range s.Patches {
		if p.Message != nil && p.Message.Attestation != nil {
			a := reports.Attested{Subject: p.Subject, Verified: p.Message.Identity().Verified()}
			for _, c := range p.Attestation {
				a.Checks = append(a.Checks, reports.Check{Pass: c.Pass, Text: c.Text})
			}
			req.Attestation = append(req.Attestation, a)
		}
	}
	req.Tags = s.Tags()
	p0 := s.Patches[0]
	req.Thread = reports.Thread{Subject: p0.Subject, MessageID: replyTo, References: p0.Message.References,
		Author: s.Author, Lists: append(append([]string{}, s.To...), s.Cc...)}
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
func (r *Request) SuiteNames() ([]string, error) { return suites.Choose(r.Suites, r.Files, r.Profile) }

// span is the part of the series measured: First..Last, or all of it.
func (r *Request) span() (first, last int, err error) {
	n := len(r.Patches)
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
