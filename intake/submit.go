package intake

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/patchbot/patchbot/mailbox"
	"github.com/patchbot/patchbot/store"
)

// ErrRefused is what a submission is refused with for what it asks (no
// series in its mail, no suite that covers it), not for a failure of
// patchbot's own.
var ErrRefused = errors.New("refused")

// Submitted is the job that a run asked for outside mail queues (the
// dashboard's form): the series of msgs, chosen as `patchbot run` chooses
// it, with the suites and profile asked for ("" the default). Its reply is
// kept with the run and mailed to nobody: who asked (as they said; ""
// the dashboard) is not the series' author.
func (d *Desk) Submitted(msgs []*mailbox.Message, suites []string, profile, who string, at time.Time) (Job, error) {
	series, _, err := mailbox.Choose(mailbox.AssembleVersions(msgs), 0)
	if err != nil {
		return Job{}, fmt.Errorf("%v: %w", err, ErrRefused)
	}
	req := NewRequest(series, d.Suites, ReplyTarget(series))
	req.Suites, req.NoMail = suites, true
	if profile != "" {
		req.Profile = profile
	}
	names, err := req.SuiteNames()
	if err != nil {
		return Job{}, fmt.Errorf("%v: %w", err, ErrRefused)
	}
	data, err := json.Marshal(req)
	if err != nil {
		return Job{}, err
	}
	if who == "" {
		who = "dashboard"
	}
	return Job{Dedupe: WebDedupe(data, at), Trigger: "web", Source: "dashboard", Sender: who, Title: series.Subject,
		Test: req, Suites: names}, nil
}

// Submission is a run asked for outside mail (the dashboard's form): the
// series' mail, an uploaded mbox or a public-inbox thread URL, and what to
// run.
type Submission struct {
	Mbox    []byte // an uploaded mbox
	Lore    string // a public-inbox thread URL, when there is no Mbox
	Suites  []string
	Profile string
	Who     string // who asked, as they said ("dashboard" if they did not)
}

// Queue is where a submitted run's job goes (store.Store).
type Queue interface {
	AddJob(ctx context.Context, j store.Job) (int64, bool, error)
}

// Submit reads the series a submission names, has v verify who sent its
// mail as the daemon does (the run's page says it per patch), and queues
// the job Submitted makes on q. A submission refused for what it asks
// wraps ErrRefused; a thread the archive did not hand over is not one.
func (d *Desk) Submit(ctx context.Context, q Queue, v *mailbox.Verifier, sub Submission) (int64, error) {
	var msgs []*mailbox.Message
	switch {
	case len(sub.Mbox) > 0:
		err := mailbox.ReadMbox(bytes.NewReader(sub.Mbox), func(raw []byte, _ int64) error {
			if m, err := mailbox.ParseBytes(raw); err == nil {
				msgs = append(msgs, m)
			}
			return nil
		})
		if err != nil {
			return 0, fmt.Errorf("reading the uploaded mbox: %v: %w", err, ErrRefused)
		}
	case sub.Lore != "":
		src, err := mailbox.Open(mailbox.SourceConfig{Lore: sub.Lore}, slog.Default())
		if err != nil {
			return 0, fmt.Errorf("%v: %w", err, ErrRefused)
		}
		if msgs, err = mailbox.Collect(ctx, src); err != nil {
			return 0, err // the archive did not answer: ours
		}
	default:
		return 0, fmt.Errorf("the submission names no series: %w", ErrRefused)
	}
	if v != nil {
		v.VerifyAll(ctx, msgs)
	}
	j, err := d.Submitted(msgs, sub.Suites, sub.Profile, sub.Who, time.Now())
	if err != nil {
		return 0, err
	}
	row, err := d.Row(j)
	if err != nil {
		return 0, err
	}
	id, _, err := q.AddJob(ctx, row)
	return id, err
}
