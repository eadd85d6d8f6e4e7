// Package outbox delivers replies exactly once. A reply is written to the
// store before any attempt to send it; a sender then claims it (owner and
// lease), hands it to a transport (mailbox/sender), and records how far
// delivery got, so that a crash at any point neither loses a reply nor
// sends it twice:
//
//	queued ──claim──► sending ──before "."──► delivering ──accepted──► sent
//	   ▲                 │                        │                    ▲
//	   └── retry later ──┘ (failed attempt,       └── crash (lease     │ seen on a
//	       or the lease ran out: the server           ran out) or      │ watched source
//	       never got the final ".")                    broken link ──► uncertain
//
// A permanent refusal (5xx) ends in failed. An uncertain delivery is
// logged at error level and counted (OnUncertain) once, and never resent
// on its own: a person checks, and queues it again (Requeue) if it never
// arrived; a copy of it read back from a watched list settles it as sent.
// Nothing here decides whom a mail goes to: the recipient cap is a last
// guard against a composer bug, and the opt-out list a last filter.
package outbox

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"
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
	ThreadID  string // the thread it answers in, counted for the per-thread quota
	// Budget is the quota it is drawn from: "" or store.BudgetUnverified
	// (an answer to an unverified sender, counted apart).
	Budget string
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
	// OptOut are addresses never mailed (the config's list), beside those
	// the store holds.
	OptOut []string
	// Retry is the first wait after a transient failure, doubled each
	// attempt up to an hour; default one minute.
	Retry time.Duration
	// MaxAge is the retries' budget in time: a reply first queued longer
	// ago than this fails for good at its next transient failure (a
	// person may requeue it); default 72 hours.
	MaxAge time.Duration
	Log    *slog.Logger
	// OnUncertain is told of each delivery whose outcome is unknown (a
	// metric); may be nil.
	OnUncertain func(m store.OutboxMessage)

	// OnStep is called at every step of a delivery; crash tests stop the
	// process there. Nil in production.
	OnStep func(Step) error

	wakeOnce sync.Once
	wake     chan struct{}
	flushMu  sync.Mutex
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
	if o.OnStep != nil {
		return o.OnStep(s)
	}
	return nil
}

func (o *Outbox) wakeup() chan struct{} {
	o.wakeOnce.Do(func() { o.wake = make(chan struct{}, 1) })
	return o.wake
}

// Wake makes Run flush now rather than at its next tick: a reply was
// committed to the outbox.
func (o *Outbox) Wake() {
	select {
	case o.wakeup() <- struct{}{}:
	default:
	}
}

// ErrTooManyRecipients refuses a mail to more addresses than the cap.
var ErrTooManyRecipients = errors.New("too many recipients")

// Put queues m. Putting a Message-ID that is already there changes nothing
// and reports added false: a job re-run after a crash cannot queue its
// reply twice.
func (o *Outbox) Put(ctx context.Context, m Message) (added bool, err error) {
	err = o.Store.Update(ctx, func(tx *store.Tx) error {
		added, err = o.PutTx(ctx, tx, m)
		return err
	})
	return added, err
}

// DefaultMaxRecipients is the recipient cap when MaxRecipients is 0.
const DefaultMaxRecipients = 25

// ErrNoRecipients means every recipient of a mail asked never to be
// mailed again: nothing is queued.
var ErrNoRecipients = errors.New("no recipient left: all opted out")

// PutTx is Put inside the caller's transaction, so that a reply commits
// together with what made it (the mail and the command it answers). Opted
// out addresses are dropped from the envelope here, the last place that
// can; a mail left with no recipient is not queued (ErrNoRecipients).
func (o *Outbox) PutTx(ctx context.Context, tx *store.Tx, m Message) (added bool, err error) {
	limit := o.MaxRecipients
	if limit <= 0 {
		limit = DefaultMaxRecipients
	}
	if len(m.To) > limit {
		return false, fmt.Errorf("outbox: %s has %d recipients (at most %d): %w", m.MessageID, len(m.To), limit, ErrTooManyRecipients)
	}
	var to []string
	for _, a := range m.To {
		out, err := tx.OptedOut(ctx, a)
		if err != nil {
			return false, err
		}
		for _, o := range o.OptOut {
			out = out || strings.EqualFold(strings.TrimSpace(o), a)
		}
		if !out {
			to = append(to, a)
		}
	}
	if len(to) == 0 {
		return false, fmt.Errorf("outbox: %s: %w", m.MessageID, ErrNoRecipients)
	}
	_, added, err = tx.Enqueue(ctx, store.OutboxMessage{MessageID: m.MessageID, From: m.From, Recipients: to,
		Raw: m.Raw, ThreadID: m.ThreadID, Budget: m.Budget})
	return added, err
}

// Flush sends what may be sent now, one claimed message at a time, and
// returns how many went out. A transient failure queues the message again
// with a growing wait; a permanent refusal marks it failed. Either is the
// infrastructure's problem, logged, never the author's.
//
// Flushes of one Outbox take turns, so that none of its claims is in
// flight when one begins: a claim of its own still standing then was left
// by a delivery whose record failed (the database went away under it),
// and is taken back at once as Recover does.
func (o *Outbox) Flush(ctx context.Context) (sent int, err error) {
	if o.Sender == nil {
		return 0, nil
	}
	o.flushMu.Lock()
	defer o.flushMu.Unlock()
	var errs []error
	if _, err := o.Recover(ctx); err != nil {
		errs = append(errs, err)
	}
	if err := o.markUncertain(ctx); err != nil {
		errs = append(errs, err)
	}
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
	delivering, ours := false, false
	err := o.Sender.Send(ctx, &sender.Email{From: m.From, To: m.Recipients, Raw: m.Raw, BeforeEnd: func() error {
		if err := o.hook(StepBodyWritten); err != nil {
			return err
		}
		if err := o.Store.MoveOutbox(ctx, m.ID, owner, store.Sending, store.Delivering, "", time.Time{}); err != nil {
			// The store failed, not the server: no "." was sent, and the
			// mail goes again as soon as the store is back.
			ours = !errors.Is(err, store.ErrStateChanged)
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
			if merr := o.move(bg, m.ID, owner, store.Delivering, store.Uncertain, err.Error(), time.Time{}); merr != nil {
				return errors.Join(err, merr)
			}
			o.uncertain(*m, err.Error())
			return fmt.Errorf("reply %s: outcome unknown after the final \".\": %w", m.MessageID, err)
		}
		from := store.Sending
		if delivering {
			from = store.Delivering
		}
		next, notBefore := store.Queued, time.Now().Add(o.backoff(m.Attempts))
		if ours {
			notBefore = time.Now()
		}
		var rejected *sender.RejectedError
		if errors.As(err, &rejected) || o.tooOld(m, notBefore) {
			next, notBefore = store.Failed, time.Time{}
		}
		if merr := o.move(bg, m.ID, owner, from, next, err.Error(), notBefore); merr != nil {
			return errors.Join(err, merr)
		}
		return fmt.Errorf("reply %s: %w", m.MessageID, err)
	}
	if err := o.hook(StepAccepted); err != nil {
		return err
	}
	err = o.move(bg, m.ID, owner, store.Delivering, store.Sent, "", time.Time{})
	if errors.Is(err, store.ErrStateChanged) {
		// Slower than our lease: the sweep called it uncertain meanwhile,
		// and we know better now.
		err = o.move(bg, m.ID, owner, store.Uncertain, store.Sent, "", time.Time{})
	}
	if err != nil {
		return err
	}
	return o.hook(StepRecorded)
}

// tooOld says whether a retry at next would start past the budget.
func (o *Outbox) tooOld(m *store.OutboxMessage, next time.Time) bool {
	age := o.MaxAge
	if age <= 0 {
		age = 72 * time.Hour
	}
	return !m.Created.IsZero() && next.Sub(m.Created) > age
}

// move records how far a delivery got, trying again while the store
// fails (a database restarting) for up to a minute: what the server
// answered is known only here, and lost if it is not recorded. A move the
// store refuses (ErrStateChanged) is not retried.
func (o *Outbox) move(ctx context.Context, id int64, owner string, from, to store.OutboxState, errText string, notBefore time.Time) error {
	wait, give := 100*time.Millisecond, time.Now().Add(time.Minute)
	for {
		err := o.Store.MoveOutbox(ctx, id, owner, from, to, errText, notBefore)
		if err == nil || errors.Is(err, store.ErrStateChanged) || time.Now().Add(wait).After(give) {
			return err
		}
		o.log().Warn("recording a delivery's state failed; retrying", "outbox_id", id, "to", string(to), "err", err)
		time.Sleep(wait)
		wait = min(2*wait, 5*time.Second)
	}
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

// markUncertain reports, once each, the deliveries a dead sender left at
// the final ".": its lease ran out while the record said "delivering".
func (o *Outbox) markUncertain(ctx context.Context) error {
	ms, err := o.Store.MarkUncertain(ctx, time.Now())
	for _, m := range ms {
		o.uncertain(m, "the sender died (its lease ran out) after the final \".\" was asked for")
	}
	return err
}

func (o *Outbox) uncertain(m store.OutboxMessage, why string) {
	if o.OnUncertain != nil {
		o.OnUncertain(m)
	}
	o.log().Error("reply delivery uncertain: the server may or may not have it; not resending it. "+
		"Check the recipients' copy, then requeue it if it never arrived",
		"message_id", m.MessageID, "outbox_id", m.ID, "recipients", m.Recipients, "why", why)
}

// Recover takes back, at start, what this sender's previous run left
// claimed (its Owner must be the same across restarts, as a coordinator's
// is): a message it was sending before the final "." goes out again at
// once, and one at the final "." is uncertain (reported, not resent). It
// returns how many were queued again.
func (o *Outbox) Recover(ctx context.Context) (int, error) {
	requeued, uncertain, err := o.Store.RecoverOutbox(ctx, o.owner())
	for _, m := range uncertain {
		o.uncertain(m, "the sender died after the final \".\" was asked for")
	}
	if requeued > 0 {
		o.log().Info("replies a dead sender was sending queued again", "count", requeued, "owner", o.owner())
		o.Wake()
	}
	return requeued, err
}

// Uncertain lists the deliveries a crash or a broken link left unknown.
func (o *Outbox) Uncertain(ctx context.Context) ([]store.OutboxMessage, error) {
	return o.Store.OutboxIn(ctx, store.Uncertain)
}

// Requeue sends an uncertain message again, for a person who checked that
// it never arrived.
func (o *Outbox) Requeue(ctx context.Context, id int64) error {
	if err := o.Store.RequeueUncertain(ctx, id); err != nil {
		return err
	}
	o.Wake()
	return nil
}

// Run flushes at once, then whenever Wake is called and at least every
// interval, until ctx ends: a reply that failed transiently goes out on a
// later round without waiting for the next reply to be queued.
func (o *Outbox) Run(ctx context.Context, interval time.Duration) {
	if o.Sender == nil {
		return
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		// A flush that failed (the store, or the server) is tried again
		// within seconds; each message keeps its own backoff.
		var again <-chan time.Time
		if _, err := o.Flush(ctx); err != nil && ctx.Err() == nil {
			o.log().Warn("outbox flush", "err", err)
			again = time.After(min(interval, 5*time.Second))
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-again:
		case <-o.wakeup():
		}
	}
}
