package mailbox

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/emersion/go-imap/v2"
	"github.com/emersion/go-imap/v2/imapclient"
)

// IMAP reads one mailbox of an IMAP server. The cursor is an IMAPCursor in
// text form: the mailbox's UIDVALIDITY and the last UID delivered. When the
// server reports another UIDVALIDITY the UIDs mean nothing any more and
// the whole mailbox is read again.
type IMAP struct {
	Addr     string // host:port
	TLS      bool   // imaps (implicit TLS); otherwise plain text, for loopback and tests
	User     string
	Password string
	Mailbox  string // default INBOX
	Logger   *slog.Logger

	// PollInterval is how often Watch looks for new mail when the server
	// has no IDLE (or NoIdle is set); with IDLE it is a safety net against
	// a lost notification. Default 1 minute.
	PollInterval time.Duration
	NoIdle       bool
	// MinBackoff and MaxBackoff bound the wait before reconnecting after
	// the connection failed (doubling each time). Defaults 1s and 1min.
	MinBackoff, MaxBackoff time.Duration
	// DialTimeout bounds connecting and logging in. Default 30s.
	DialTimeout time.Duration

	// idling, if set, is told each time Watch starts waiting in IDLE, so
	// that a test can deliver mail knowing only IDLE can report it.
	idling func()
}

var _ Watcher = (*IMAP)(nil)

// NewIMAP makes an IMAP source from imap://user:password@host:port or
// imaps://... (the port defaults to 143 or 993).
func NewIMAP(rawURL, mailbox string) (*IMAP, error) {
	c, password, err := ParseIMAPURL(rawURL)
	if err != nil {
		return nil, err
	}
	s := &IMAP{Addr: c.Addr, TLS: c.TLS, User: c.User, Password: password, Mailbox: mailbox}
	if c.Mailbox != "" && mailbox == "" {
		s.Mailbox = c.Mailbox
	}
	return s, nil
}

// IMAPCursor is the position in an IMAP mailbox.
type IMAPCursor struct {
	UIDValidity uint32
	LastUID     uint32
}

func (c IMAPCursor) String() string {
	return fmt.Sprintf("%d:%d", c.UIDValidity, c.LastUID)
}

// ParseIMAPCursor reads IMAPCursor.String's form; "" is the beginning.
func ParseIMAPCursor(s string) (IMAPCursor, error) {
	if s == "" {
		return IMAPCursor{}, nil
	}
	a, b, ok := strings.Cut(s, ":")
	v, err1 := strconv.ParseUint(a, 10, 32)
	u, err2 := strconv.ParseUint(b, 10, 32)
	if !ok || err1 != nil || err2 != nil {
		return IMAPCursor{}, fmt.Errorf("IMAP cursor %q is not UIDVALIDITY:UID", s)
	}
	return IMAPCursor{uint32(v), uint32(u)}, nil
}

func (s *IMAP) mailbox() string {
	if s.Mailbox == "" {
		return "INBOX"
	}
	return s.Mailbox
}

func durOr(d, def time.Duration) time.Duration {
	if d <= 0 {
		return def
	}
	return d
}

// Poll connects, delivers what is new since cur and logs out.
func (s *IMAP) Poll(ctx context.Context, cur string, fn func(*Message, string) error) (string, error) {
	c, err := ParseIMAPCursor(cur)
	if err != nil {
		return cur, err
	}
	conn, err := s.connect(ctx, nil)
	if err != nil {
		return cur, err
	}
	defer conn.Close()
	c, err = s.sync(ctx, conn, c, fn)
	if err == nil {
		err = conn.Logout().Wait()
		if err != nil {
			err = nil // we have what we came for
		}
	}
	return c.String(), err
}

// connect dials, logs in and selects the mailbox. newMail, if not nil, is
// poked when the server announces new messages (during IDLE).
func (s *IMAP) connect(ctx context.Context, newMail chan<- struct{}) (*imapclient.Client, error) {
	opts := &imapclient.Options{}
	if newMail != nil {
		opts.UnilateralDataHandler = &imapclient.UnilateralDataHandler{
			Mailbox: func(d *imapclient.UnilateralDataMailbox) {
				if d.NumMessages != nil {
					select {
					case newMail <- struct{}{}:
					default:
					}
				}
			},
		}
	}
	timeout := durOr(s.DialTimeout, 30*time.Second)
	d := net.Dialer{Timeout: timeout}
	dctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	conn, err := d.DialContext(dctx, "tcp", s.Addr)
	if err != nil {
		return nil, fmt.Errorf("connecting to IMAP server %s: %w", s.Addr, err)
	}
	if s.TLS {
		host, _, _ := net.SplitHostPort(s.Addr)
		conn = tls.Client(conn, &tls.Config{ServerName: host})
	}
	c := imapclient.New(conn, opts)
	// Unblock a login stuck on a dead server when ctx ends.
	stop := context.AfterFunc(dctx, func() {
		if dctx.Err() == context.DeadlineExceeded || ctx.Err() != nil {
			c.Close()
		}
	})
	defer stop()
	if err := c.WaitGreeting(); err != nil {
		c.Close()
		return nil, fmt.Errorf("waiting for IMAP greeting from %s: %w", s.Addr, err)
	}
	if err := c.Login(s.User, s.Password).Wait(); err != nil {
		c.Close()
		return nil, fmt.Errorf("logging in to IMAP server %s as %s: %w", s.Addr, s.User, err)
	}
	return c, nil
}

// sync selects the mailbox and delivers every message with a UID above
// cur.LastUID (all of them after a UIDVALIDITY change).
func (s *IMAP) sync(ctx context.Context, c *imapclient.Client, cur IMAPCursor, fn func(*Message, string) error) (IMAPCursor, error) {
	sel, err := c.Select(s.mailbox(), &imap.SelectOptions{ReadOnly: true}).Wait()
	if err != nil {
		return cur, fmt.Errorf("selecting IMAP mailbox %q: %w", s.mailbox(), err)
	}
	if sel.UIDValidity != cur.UIDValidity {
		if cur.UIDValidity != 0 {
			logOr(s.Logger).Warn("IMAP UIDVALIDITY changed; reading the whole mailbox again",
				"mailbox", s.mailbox(), "old", cur.UIDValidity, "new", sel.UIDValidity)
		}
		cur = IMAPCursor{UIDValidity: sel.UIDValidity}
	}
	return s.fetchNew(ctx, c, cur, fn)
}

func (s *IMAP) fetchNew(ctx context.Context, c *imapclient.Client, cur IMAPCursor, fn func(*Message, string) error) (IMAPCursor, error) {
	if mb := c.Mailbox(); mb != nil && mb.NumMessages == 0 {
		return cur, nil
	}
	// "N:*" always matches the highest UID, even below N: filter below.
	set := imap.UIDSet{imap.UIDRange{Start: imap.UID(cur.LastUID + 1), Stop: 0}}
	body := &imap.FetchItemBodySection{Peek: true}
	cmd := c.Fetch(set, &imap.FetchOptions{UID: true, BodySection: []*imap.FetchItemBodySection{body}})
	defer cmd.Close()
	for {
		msg := cmd.Next()
		if msg == nil {
			break
		}
		var uid imap.UID
		var raw []byte
		for {
			item := msg.Next()
			if item == nil {
				break
			}
			switch it := item.(type) {
			case imapclient.FetchItemDataUID:
				uid = it.UID
			case imapclient.FetchItemDataBodySection:
				b, err := io.ReadAll(it.Literal)
				if err != nil {
					return cur, fmt.Errorf("reading IMAP message body: %w", err)
				}
				raw = b
			}
		}
		if uint32(uid) <= cur.LastUID {
			continue
		}
		if err := ctx.Err(); err != nil {
			return cur, err
		}
		cur.LastUID = uint32(uid)
		m, err := ParseBytes(raw)
		if err != nil {
			logOr(s.Logger).Warn("skipping mail that cannot be parsed", "mailbox", s.mailbox(), "uid", uid, "err", err)
			continue
		}
		if err := fn(m, cur.String()); err != nil {
			return cur, &fnError{err}
		}
	}
	if err := cmd.Close(); err != nil {
		return cur, fmt.Errorf("fetching new IMAP messages: %w", err)
	}
	return cur, nil
}

// fnError marks an error returned by the caller's callback: Watch stops on
// it instead of reconnecting.
type fnError struct{ err error }

func (e *fnError) Error() string { return e.err.Error() }
func (e *fnError) Unwrap() error { return e.err }

// Watch delivers what is new since cur, then waits for new mail with IDLE
// (or by polling) and delivers it as it comes. When the connection drops it
// reconnects with exponential backoff and goes on from the last UID
// delivered. It returns when ctx is done or fn fails.
func (s *IMAP) Watch(ctx context.Context, cur string, fn func(*Message, string) error) error {
	c, err := ParseIMAPCursor(cur)
	if err != nil {
		return err
	}
	minB, maxB := durOr(s.MinBackoff, time.Second), durOr(s.MaxBackoff, time.Minute)
	backoff := minB
	for {
		synced := false
		err := s.session(ctx, &c, fn, &synced)
		var fe *fnError
		if errors.As(err, &fe) {
			return fe.err
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if synced {
			backoff = minB // the connection worked for a while
		}
		logOr(s.Logger).Warn("IMAP connection lost; reconnecting", "addr", s.Addr, "err", err, "in", backoff)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(backoff):
		}
		backoff = min(backoff*2, maxB)
	}
}

// session is one connection's life: sync, then wait and fetch until the
// connection or ctx ends. It always returns an error.
func (s *IMAP) session(ctx context.Context, cur *IMAPCursor, fn func(*Message, string) error, synced *bool) error {
	newMail := make(chan struct{}, 1)
	c, err := s.connect(ctx, newMail)
	if err != nil {
		return err
	}
	defer c.Close()
	stop := context.AfterFunc(ctx, func() { c.Close() })
	defer stop()

	if *cur, err = s.sync(ctx, c, *cur, fn); err != nil {
		return err
	}
	*synced = true
	useIdle := !s.NoIdle && (c.Caps().Has(imap.CapIdle) || c.Caps().Has(imap.CapIMAP4rev2))
	poll := durOr(s.PollInterval, time.Minute)
	for {
		if useIdle {
			idle, err := c.Idle()
			if err != nil {
				return fmt.Errorf("starting IMAP IDLE: %w", err)
			}
			if s.idling != nil {
				s.idling()
			}
			select {
			case <-newMail:
			case <-time.After(poll):
			case <-c.Closed():
			case <-ctx.Done():
			}
			if err := idle.Close(); err != nil {
				return fmt.Errorf("stopping IMAP IDLE: %w", err)
			}
			if err := idle.Wait(); err != nil {
				return fmt.Errorf("IMAP IDLE: %w", err)
			}
		} else {
			select {
			case <-time.After(poll):
			case <-c.Closed():
			case <-ctx.Done():
			}
			// NOOP lets the server tell us about new messages.
			if err := c.Noop().Wait(); err != nil {
				return fmt.Errorf("IMAP NOOP: %w", err)
			}
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		if *cur, err = s.fetchNew(ctx, c, *cur, fn); err != nil {
			return err
		}
	}
}
