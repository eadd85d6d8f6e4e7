// Package outbox delivers replies exactly once. A reply is written to the
// store before any attempt to send it; a sender then claims it (owner and
// lease), hands it to a transport (mailbox/sender), and records how far
// delivery got, so that a crash at any point neither loses a reply nor
// sends it twice:
//
//	queued ──claim──► sending ──before "."──► delivering ──accepted──► sent
//	   ▲                 │                        │
//	   └── retry later ──┘ (failed attempt,       └── crash or broken link:
//	       or the lease ran out: the server           uncertain, left for a
//	       never got the final ".")                    person; never resent
//
// A permanent refusal (5xx) ends in failed. Nothing here decides whom a
// mail goes to: the recipient cap is a last guard against a composer bug.
package outbox

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/emersion/go-smtp"

	"github.com/patchbot/patchbot/mailbox/sender"
	"github.com/patchbot/patchbot/store"
)

// Sender hands one mail to a server; *sender.SMTP is the real one.
type Sender interface {
	Send(ctx context.Context, e *sender.Email) error
}

var _ Sender = (*sender.SMTP)(nil)

// Message is a mail to put in the outbox.
type Message struct {
	MessageID string // without angle brackets; one outbox entry per Message-ID
	From      string // envelope sender
	To        []string
	Raw       []byte
}

// Step is a point in delivering one message. Tests stop the process at
// each step to prove that a crash anywhere sends a reply once.
type Step int

const (
	StepClaimed     Step = iota + 1 // "sending" committed
	StepBodyWritten                 // message written, "delivering" not yet committed
	StepDelivering                  // "delivering" committed, final "." not yet sent
	StepAccepted                    // server accepted; "sent" not yet recorded
	StepRecorded                    // "sent" committed
)

// Outbox is the durable queue of replies over a store.
type Outbox struct {
	Store *store.Store
	// Sender delivers; nil means sending is off (Put only queues).
	Sender Sender
	// Owner names this sender in its claims; default host:pid.
	Owner string
	// Lease is how long a claim lasts; it must outlast one delivery
	// (sender.Config.Timeout). Default 10 minutes.
	Lease time.Duration
	// MaxRecipients refuses a mail with more envelope recipients; default 25.
	MaxRecipients int
	// Retry is the first wait after a transient failure, doubled each
	// attempt up to an hour; default one minute.
	Retry time.Duration
	Log   *slog.Logger
	// OnUncertain is told of each delivery whose outcome is unknown (a
	// metric); may be nil.
	OnUncertain func(m store.OutboxMessage)

	// step is called at every step; tests replace it.
	step func(Step) error
}

func (o *Outbox) owner() string {
	if o.Owner != "" {
		return o.Owner
	}
	host, _ := os.Hostname()
	return fmt.Sprintf("%s:%d", host, os.Getpid())
}

func (o *Outbox) lease() time.Duration {
	if o.Lease > 0 {
		return o.Lease
	}
	return 10 * time.Minute
}

func (o *Outbox) log() *slog.Logger {
	if o.Log != nil {
		return o.Log
	}
	return slog.Default()
}

func (o *Outbox) hook(s Step) error {
	if o.step != nil {
		return o.step(s)
	}
	return nil
}

// ErrTooManyRecipients refuses a mail to more addresses than the cap.
var ErrTooManyRecipients = errors.New("too many recipients")

// Put queues m. Putting a Message-ID that is already there changes nothing
// and reports added false: a job re-run after a crash cannot queue its
// reply twice.
func (o *Outbox) Put(ctx context.Context, m Message) (added bool, err error) {
	limit := o.MaxRecipients
	if limit <= 0 {
		limit = 25
	}
	if len(m.To) > limit {
		return false, fmt.Errorf("outbox: %s has %d recipients (at most %d): %w", m.MessageID, len(m.To), limit, ErrTooManyRecipients)
	}
	_, added, err = o.Store.Enqueue(ctx, store.OutboxMessage{MessageID: m.MessageID, From: m.From, Recipients: m.To, Raw: m.Raw})
	return added, err
}

// Flush sends what may be sent now, one claimed message at a time, and
// returns how many went out. A transient failure queues the message again
// with a growing wait; a permanent refusal marks it failed. Either is the
// infrastructure's problem, logged, never the author's.
func (o *Outbox) Flush(ctx context.Context) (sent int, err error) {
	if o.Sender == nil {
		return 0, nil
	}
	var errs []error
	// Claims are judged against the time the flush began: a message that
	// fails now waits until a later flush, however short its backoff.
	start := time.Now()
	for ctx.Err() == nil {
		m, err := o.Store.ClaimOutbox(ctx, o.owner(), o.lease()+time.Since(start), start)
		if errors.Is(err, store.ErrNoMessage) {
			break
		}
		if err != nil {
			return sent, errors.Join(append(errs, err)...)
		}
		switch err := o.deliver(ctx, m); {
		case err == nil:
			sent++
			o.log().Info("reply sent", "message_id", m.MessageID, "recipients", len(m.Recipients), "attempt", m.Attempts)
		case errors.Is(err, store.ErrStateChanged):
			// Our lease ran out and another sender has it.
		default:
			o.log().Warn("sending reply failed", "message_id", m.MessageID, "attempt", m.Attempts, "err", err)
			errs = append(errs, err)
		}
	}
	return sent, errors.Join(errs...)
}

// deliver sends one claimed message and records the outcome.
func (o *Outbox) deliver(ctx context.Context, m *store.OutboxMessage) error {
	owner := m.Owner
	if err := o.hook(StepClaimed); err != nil {
		return err
	}
	delivering := false
	err := o.Sender.Send(ctx, &sender.Email{From: m.From, To: m.Recipients, Raw: m.Raw, BeforeEnd: func() error {
		if err := o.hook(StepBodyWritten); err != nil {
			return err
		}
		if err := o.Store.MoveOutbox(ctx, m.ID, owner, store.Sending, store.Delivering, "", time.Time{}); err != nil {
			return err
		}
		delivering = true
		return o.hook(StepDelivering)
	}})
	bg := context.WithoutCancel(ctx)
	if err != nil {
		var reply *smtp.SMTPError
		if delivering && !errors.As(err, &reply) {
			// The link broke after the final "." was asked for: the
			// server may have the mail. Leave it for a person rather
			// than risk a second copy. (An SMTP reply to the "." is a
			// definite answer and handled below.)
			if o.OnUncertain != nil {
				o.OnUncertain(*m)
			}
			o.log().Error("reply delivery uncertain: the server may or may not have it; not resending",
				"message_id", m.MessageID, "err", err)
			return fmt.Errorf("reply %s: outcome unknown after the final \".\": %w", m.MessageID, err)
		}
		from := store.Sending
		if delivering {
			from = store.Delivering
		}
		next, notBefore := store.Queued, time.Now().Add(o.backoff(m.Attempts))
		var rejected *sender.RejectedError
		if errors.As(err, &rejected) {
			next, notBefore = store.Failed, time.Time{}
		}
		if merr := o.Store.MoveOutbox(bg, m.ID, owner, from, next, err.Error(), notBefore); merr != nil {
			return errors.Join(err, merr)
		}
		return fmt.Errorf("reply %s: %w", m.MessageID, err)
	}
	if err := o.hook(StepAccepted); err != nil {
		return err
	}
	if err := o.Store.MoveOutbox(bg, m.ID, owner, store.Delivering, store.Sent, "", time.Time{}); err != nil {
		return err
	}
	return o.hook(StepRecorded)
}

func (o *Outbox) backoff(attempts int) time.Duration {
	d := o.Retry
	if d <= 0 {
		d = time.Minute
	}
	for i := 1; i < attempts && d < time.Hour; i++ {
		d *= 2
	}
	return min(d, time.Hour)
}

// Uncertain lists the deliveries a crash or a broken link left unknown.
func (o *Outbox) Uncertain(ctx context.Context) ([]store.OutboxMessage, error) {
	return o.Store.OutboxIn(ctx, store.Delivering)
}

// Run flushes at once and then every interval until ctx ends: a reply
// that failed transiently goes out on a later round without waiting for
// the next reply to be queued.
func (o *Outbox) Run(ctx context.Context, interval time.Duration) {
	if o.Sender == nil {
		return
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		if _, err := o.Flush(ctx); err != nil && ctx.Err() == nil {
			o.log().Warn("outbox flush", "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
