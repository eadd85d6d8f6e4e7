package sender

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/emersion/go-smtp"

	"github.com/patchbot/patchbot/store"
)

// Transport delivers one message; commit runs just before the server is
// asked to accept it (see SMTP.SendCommit). *SMTP is the real one.
type Transport interface {
	SendCommit(ctx context.Context, to []string, raw []byte, commit func() error) error
}

var _ Transport = (*SMTP)(nil)

// Step is a point in delivering one outbox message. Tests stop the process
// at each step to prove that a crash anywhere sends a reply once.
type Step int

const (
	StepClaimed     Step = iota + 1 // state "sending" committed
	StepConnected                   // EHLO, STARTTLS and AUTH done
	StepBodyWritten                 // message written, final "." not yet sent
	StepAccepted                    // server accepted; "sent" not yet recorded
	StepRecorded                    // "sent" committed
)

// stepHook is called at every step; tests replace it.
var stepHook = func(Step) error { return nil }

// Outbox sends the replies waiting in the store through a Transport.
type Outbox struct {
	Store     *store.Store
	Transport Transport
	Log       *slog.Logger
}

// Flush sends every pending message once and returns how many went out.
// A transient failure puts the message back in the queue for the next
// Flush; a permanent rejection marks it failed. Either is the
// infrastructure's problem, logged, never the author's.
func (o *Outbox) Flush(ctx context.Context) (sent int, err error) {
	log := o.Log
	if log == nil {
		log = slog.Default()
	}
	pending, err := o.Store.Pending(ctx)
	if err != nil {
		return 0, err
	}
	var errs []error
	for _, m := range pending {
		err := o.deliver(ctx, m)
		switch {
		case err == nil:
			sent++
			log.Info("reply sent", "message_id", m.MessageID, "recipients", len(m.Recipients))
		case errors.Is(err, store.ErrStateChanged):
			// Another sender has it.
		default:
			log.Warn("sending reply failed", "message_id", m.MessageID, "attempt", m.Attempts+1, "err", err)
			errs = append(errs, err)
		}
		if ctx.Err() != nil {
			break
		}
	}
	return sent, errors.Join(errs...)
}

// deliver claims m, sends it and records the outcome.
func (o *Outbox) deliver(ctx context.Context, m store.OutboxMessage) error {
	// A message found in "sending" was left by a crash before the final
	// "."; it is claimed again from that state.
	if err := o.Store.Transition(ctx, m.ID, m.State, store.Sending, m.LastError); err != nil {
		return err
	}
	if err := stepHook(StepClaimed); err != nil {
		return err
	}
	commit := func() error {
		return o.Store.Transition(ctx, m.ID, store.Sending, store.Delivering, "")
	}
	err := o.Transport.SendCommit(ctx, m.Recipients, m.Raw, commit)
	if err != nil {
		cur, gerr := o.Store.Message(ctx, m.ID)
		if gerr != nil {
			return errors.Join(err, gerr)
		}
		next := store.Queued
		var rejected *RejectedError
		var reply *smtp.SMTPError
		if errors.As(err, &rejected) {
			next = store.Failed
		}
		if cur.State == store.Delivering && !errors.As(err, &reply) {
			// The connection broke after the final ".": the server may
			// have the mail. Leave it for a person (Store.Uncertain)
			// rather than risk a second copy. (An SMTP error reply to
			// the "." is a definite refusal and handled below.)
			return fmt.Errorf("reply %s: outcome unknown after the final \".\": %w", m.MessageID, err)
		}
		if terr := o.Store.Transition(ctx, m.ID, cur.State, next, err.Error()); terr != nil {
			return errors.Join(err, terr)
		}
		return fmt.Errorf("reply %s: %w", m.MessageID, err)
	}
	if err := stepHook(StepAccepted); err != nil {
		return err
	}
	if err := o.Store.Transition(ctx, m.ID, store.Delivering, store.Sent, ""); err != nil {
		return err
	}
	return stepHook(StepRecorded)
}

// Run flushes the outbox every interval until ctx ends.
func (o *Outbox) Run(ctx context.Context, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		if _, err := o.Flush(ctx); err != nil && o.Log != nil {
			o.Log.Warn("outbox flush", "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
