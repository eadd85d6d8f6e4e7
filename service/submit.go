package service

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/patchbot/patchbot/config"
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

// Submitter queues the runs asked for outside mail: the same queue as
// mail and email commands, the job as the front desk makes it
// (intake.Desk.Submitted). Such a run's reply is kept with the run and
// shown on its page, and mailed to nobody.
type Submitter struct {
	Config config.Config
	Store  *store.Store
	// Wake, if set, tells the worker a job is waiting.
	Wake func()
}

// Submit reads the series a submission names, verifies who sent its mail
// as the daemon does, and queues the front desk's job. A submission
// refused for what it asks wraps intake.ErrRefused.
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
			return 0, fmt.Errorf("reading the uploaded mbox: %v: %w", err, intake.ErrRefused)
		}
	case sub.Lore != "":
		src, err := mailbox.Open(mailbox.SourceConfig{Lore: sub.Lore}, slog.Default())
		if err != nil {
			return 0, fmt.Errorf("%v: %w", err, intake.ErrRefused)
		}
		if msgs, err = mailbox.Collect(ctx, src); err != nil {
			return 0, err // lore did not answer: ours, a 500
		}
	default:
		return 0, fmt.Errorf("the submission names no series: %w", intake.ErrRefused)
	}
	// Who sent it, as the daemon checks it: the run's page says it per patch.
	mailbox.NewVerifier(s.Config.DKIM, s.Config.Commands.AuthservIDs).VerifyAll(ctx, msgs)
	desk := s.Config.Desk()
	j, err := desk.Submitted(msgs, sub.Suites, sub.Profile, sub.Who, time.Now())
	if err != nil {
		return 0, err
	}
	row, err := desk.Row(j)
	if err != nil {
		return 0, err
	}
	id, _, err := s.Store.AddJob(ctx, row)
	if err != nil {
		return 0, err
	}
	if s.Wake != nil {
		s.Wake()
	}
	return id, nil
}
