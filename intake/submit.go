package intake

import (
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/patchbot/patchbot/mailbox"
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
