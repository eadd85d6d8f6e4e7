package service

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/patchbot/patchbot/intake"
	"github.com/patchbot/patchbot/mailbox"
	"github.com/patchbot/patchbot/store"
)

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

// ErrRefused is what Submit wraps when it refuses a submission for what it
// asks (no series in the mail, nothing the paths cover), not for a
// failure of its own.
var ErrRefused = errors.New("refused")

// Submitter queues the runs asked for outside mail: the same queue as
// mail and email commands. Such a run's reply is kept with the run and
// shown on its page, and mailed to nobody: the person who asked is not
// the series' author.
type Submitter struct {
	Config Config
	Store  *store.Store
	// Wake, if set, tells the worker a job is waiting.
	Wake func()
}

// Submit reads the series a submission names, chooses the version to test
// as `patchbot run` does, and queues it.
func (s *Submitter) Submit(ctx context.Context, sub Submission) (int64, error) {
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
			return 0, err // lore did not answer: ours, a 500
		}
	default:
		return 0, fmt.Errorf("the submission names no series: %w", ErrRefused)
	}
	// Who sent it, as the daemon checks it: the run's page says it per patch.
	mailbox.NewVerifier(s.Config.DKIM, s.Config.Commands.AuthservIDs).VerifyAll(ctx, msgs)
	series, _, err := mailbox.Choose(mailbox.AssembleVersions(msgs), 0)
	if err != nil {
		return 0, fmt.Errorf("%v: %w", err, ErrRefused)
	}
	req := intake.NewRequest(series, s.Config.Suites, intake.ReplyTarget(series))
	req.Suites = sub.Suites
	if sub.Profile != "" {
		req.Profile = sub.Profile
	}
	req.NoMail = true
	names, err := req.SuiteNames()
	if err != nil {
		return 0, fmt.Errorf("%v: %w", err, ErrRefused)
	}
	data, err := json.Marshal(req)
	if err != nil {
		return 0, err
	}
	who := sub.Who
	if who == "" {
		who = "dashboard"
	}
	id, _, err := s.Store.AddJob(ctx, store.Job{Dedupe: string(intake.WebDedupe(data, time.Now())), Trigger: "web",
		Title: req.Series.Subject, Request: data,
		Source: "dashboard", Sender: who, Needs: needsOf(s.Config, names)})
	if err != nil {
		return 0, err
	}
	if s.Wake != nil {
		s.Wake()
	}
	return id, nil
}
