// Package sender is a stateless mail transport: Send hands one mail to an
// SMTP server, using STARTTLS and AUTH when the server offers them. It
// keeps no state; durable delivery (claims, leases, retries, the record
// of what was sent) is the outbox's (mailbox/outbox). By default nothing is
// sent; Config.Enabled switches sending on.
package sender

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"os"
	"time"

	"github.com/emersion/go-sasl"
	"github.com/emersion/go-smtp"

	"github.com/patchbot/patchbot/mailbox"
)

// Config is the [sender] part of patchbot's config.
type Config struct {
	// Enabled switches sending on. Off, replies are only written to the
	// outbox and printed.
	Enabled bool `yaml:"enabled"`
	// Addr is the SMTP server, host:port (e.g. "smtp.example.org:587").
	Addr string `yaml:"addr"`
	// From is the envelope sender.
	From string `yaml:"from"`
	// HeloName is the name given in EHLO (default "localhost").
	HeloName string `yaml:"helo_name"`
	// Username and the password are used with AUTH PLAIN when the server
	// offers AUTH. The password is read from PasswordFile (mode 0600): a
	// config file or a command line never holds it. Password is for
	// programs that got it elsewhere.
	Username     string `yaml:"username"`
	Password     string `yaml:"-"`
	PasswordFile string `yaml:"password_file"`
	// RequireTLS refuses to send when the server does not offer STARTTLS.
	RequireTLS bool `yaml:"require_tls"`
	// CAFile holds PEM certificates to trust for the server instead of the
	// system's (a private relay with its own CA).
	CAFile string `yaml:"ca_file"`
	// Timeout bounds one delivery (default 2 minutes).
	Timeout time.Duration `yaml:"timeout"`
}

// SMTP sends mail through one SMTP server.
type SMTP struct {
	cfg      Config
	password string
	roots    *x509.CertPool // nil: the system's
	host     string
}

// NewSMTP checks cfg and returns a client for its server.
func NewSMTP(cfg Config) (*SMTP, error) {
	if cfg.Addr == "" {
		return nil, errors.New("sender: no SMTP server address (addr)")
	}
	host, _, err := net.SplitHostPort(cfg.Addr)
	if err != nil {
		return nil, fmt.Errorf("sender: addr %q: %w", cfg.Addr, err)
	}
	if cfg.From == "" {
		return nil, errors.New("sender: no envelope sender (from)")
	}
	if cfg.HeloName == "" {
		cfg.HeloName = "localhost"
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = 2 * time.Minute
	}
	s := &SMTP{cfg: cfg, password: cfg.Password, host: host}
	if cfg.PasswordFile != "" {
		pw, err := mailbox.ReadSecret(cfg.PasswordFile)
		if err != nil {
			return nil, fmt.Errorf("sender: %w", err)
		}
		s.password = pw
	}
	if cfg.CAFile != "" {
		pem, err := os.ReadFile(cfg.CAFile)
		if err != nil {
			return nil, fmt.Errorf("sender: reading CA file: %w", err)
		}
		s.roots = x509.NewCertPool()
		if !s.roots.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("sender: %s holds no PEM certificate", cfg.CAFile)
		}
	}
	return s, nil
}

// WithRoots returns a copy of s that trusts roots for the server's
// certificate (tests with a throwaway CA).
func (s *SMTP) WithRoots(roots *x509.CertPool) *SMTP {
	c := *s
	c.roots = roots
	return &c
}

// RejectedError is a permanent refusal by the server (a 5xx reply): sending
// the same mail again will not help. Anything else is transient.
type RejectedError struct {
	Stage string // "MAIL FROM", "RCPT TO", "DATA"
	Err   error
}

func (e *RejectedError) Error() string {
	return fmt.Sprintf("the SMTP server rejected %s: %v", e.Stage, e.Err)
}
func (e *RejectedError) Unwrap() error { return e.Err }

func classify(stage string, err error) error {
	var se *smtp.SMTPError
	if errors.As(err, &se) && se.Code >= 500 {
		return &RejectedError{Stage: stage, Err: err}
	}
	return fmt.Errorf("SMTP %s: %w", stage, err)
}

// Email is one mail to hand to the server.
type Email struct {
	// From is the envelope sender; empty means Config.From.
	From string
	To   []string // envelope recipients
	Raw  []byte   // the whole RFC 5322 message
	// BeforeEnd, if set, runs after the message has been written and
	// before the final "." that asks the server to accept it. If it fails,
	// the transaction is abandoned and the server delivers nothing: the
	// outbox records there that delivery may have happened from now on.
	BeforeEnd func() error
}

// Send delivers e. A *RejectedError is a permanent refusal; other errors
// are transient, except that an error after BeforeEnd succeeded leaves the
// outcome unknown (the caller knows it ran).
func (s *SMTP) Send(ctx context.Context, e *Email) error {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.Timeout)
	defer cancel()
	c, err := s.dial(ctx)
	if err != nil {
		return err
	}
	defer c.Close()
	// Bound every exchange by the context: a stuck server must not hang us.
	stop := context.AfterFunc(ctx, func() { c.Close() })
	defer stop()

	from := e.From
	if from == "" {
		from = s.cfg.From
	}
	if err := c.Mail(from, nil); err != nil {
		return classify("MAIL FROM", err)
	}
	for _, rcpt := range e.To {
		if err := c.Rcpt(rcpt, nil); err != nil {
			return classify("RCPT TO "+rcpt, err)
		}
	}
	w, err := c.Data()
	if err != nil {
		return classify("DATA", err)
	}
	if _, err := w.Write(bytes.ReplaceAll(bytes.ReplaceAll(e.Raw, []byte("\r\n"), []byte("\n")), []byte("\n"), []byte("\r\n"))); err != nil {
		return fmt.Errorf("SMTP DATA: writing the message: %w", err)
	}
	if e.BeforeEnd != nil {
		if err := e.BeforeEnd(); err != nil {
			return fmt.Errorf("SMTP DATA: %w", err)
		}
	}
	if err := w.Close(); err != nil {
		return classify("DATA", err)
	}
	if err := c.Quit(); err != nil {
		// The server accepted the mail already; a failed QUIT loses nothing.
		return nil
	}
	return nil
}

// dial connects, says EHLO, upgrades with STARTTLS when offered and logs in
// with AUTH when offered and configured.
func (s *SMTP) dial(ctx context.Context) (*smtp.Client, error) {
	connect := func() (net.Conn, error) {
		var d net.Dialer
		conn, err := d.DialContext(ctx, "tcp", s.cfg.Addr)
		if err != nil {
			return nil, fmt.Errorf("connecting to SMTP server: %w", err)
		}
		if dl, ok := ctx.Deadline(); ok {
			conn.SetDeadline(dl)
		}
		return conn, nil
	}
	conn, err := connect()
	if err != nil {
		return nil, err
	}
	c := smtp.NewClient(conn)
	if err := c.Hello(s.cfg.HeloName); err != nil {
		c.Close()
		return nil, fmt.Errorf("SMTP EHLO: %w", err)
	}
	secure := false
	if ok, _ := c.Extension("STARTTLS"); ok {
		// go-smtp upgrades only on a fresh client: reconnect and
		// STARTTLS right after the greeting.
		c.Quit()
		if conn, err = connect(); err != nil {
			return nil, err
		}
		tc := &tls.Config{ServerName: s.host, RootCAs: s.roots, MinVersion: tls.VersionTLS12}
		if c, err = smtp.NewClientStartTLS(conn, tc); err != nil {
			conn.Close()
			return nil, fmt.Errorf("SMTP STARTTLS: %w", err)
		}
		// (go-smtp says EHLO as "localhost" on this connection.)
		secure = true
	} else if s.cfg.RequireTLS {
		c.Close()
		return nil, fmt.Errorf("SMTP server %s does not offer STARTTLS and require_tls is set", s.cfg.Addr)
	}
	if ok, _ := c.Extension("AUTH"); ok && s.cfg.Username != "" {
		if !secure && !isLoopback(s.host) {
			c.Close()
			return nil, fmt.Errorf("SMTP AUTH: refusing to send the password to %s without TLS", s.cfg.Addr)
		}
		if err := c.Auth(sasl.NewPlainClient("", s.cfg.Username, s.password)); err != nil {
			c.Close()
			return nil, fmt.Errorf("SMTP AUTH: %w", err)
		}
	}
	return c, nil
}

func isLoopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
