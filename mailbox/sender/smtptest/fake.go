// Package smtptest starts SMTP servers for tests: a real Postfix instance on
// loopback delivering into a Maildir (StartPostfix), and an in-process
// go-smtp server that records what it accepted (StartFake).
package smtptest

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"io"
	"math/big"
	"net"
	"net/mail"
	"sync"
	"testing"
	"time"

	"github.com/emersion/go-sasl"
	"github.com/emersion/go-smtp"
)

// Cert is a throwaway self-signed certificate for 127.0.0.1 and localhost.
type Cert struct {
	TLS     tls.Certificate
	Roots   *x509.CertPool // trusts the certificate
	CertPEM []byte
	KeyPEM  []byte
}

// NewCert makes a Cert valid for a day.
func NewCert(t testing.TB) *Cert {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "patchbot test"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
		IsCA:                  true,
		DNSNames:              []string{"localhost"},
		IPAddresses:           []net.IP{net.ParseIP("127.0.0.1")},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	c := &Cert{
		CertPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		KeyPEM:  pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}),
		Roots:   x509.NewCertPool(),
	}
	if c.TLS, err = tls.X509KeyPair(c.CertPEM, c.KeyPEM); err != nil {
		t.Fatal(err)
	}
	c.Roots.AppendCertsFromPEM(c.CertPEM)
	return c
}

// FakeOptions shape a fake server.
type FakeOptions struct {
	Cert               *Cert  // offer STARTTLS with it
	Username, Password string // offer AUTH PLAIN and require it
	// Reject makes every DATA fail with this SMTP code (e.g. 550).
	Reject int
}

// Message is one mail a fake server accepted.
type Message struct {
	From string
	To   []string
	Raw  []byte
	TLS  bool // it came over STARTTLS
	Auth bool // the client had logged in
}

// Fake is an in-process SMTP server that records accepted mail.
type Fake struct {
	Addr string

	mu       sync.Mutex
	messages []Message
	opt      FakeOptions
}

// StartFake starts a fake SMTP server on a loopback port until the test
// ends.
func StartFake(t testing.TB, opt FakeOptions) *Fake {
	f := &Fake{opt: opt}
	s := smtp.NewServer(smtp.BackendFunc(func(c *smtp.Conn) (smtp.Session, error) {
		return &fakeConn{fake: f, conn: c}, nil
	}))
	s.Domain = "localhost"
	s.AllowInsecureAuth = true // loopback only
	s.ReadTimeout = 30 * time.Second
	s.WriteTimeout = 30 * time.Second
	if opt.Cert != nil {
		s.TLSConfig = &tls.Config{Certificates: []tls.Certificate{opt.Cert.TLS}}
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f.Addr = l.Addr().String()
	go s.Serve(l)
	t.Cleanup(func() { s.Close() })
	return f
}

// Messages returns what the server accepted so far.
func (f *Fake) Messages() []Message {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]Message(nil), f.messages...)
}

// Count is how many accepted messages carry Message-ID id.
func (f *Fake) Count(id string) int {
	n := 0
	for _, m := range f.Messages() {
		msg, err := mail.ReadMessage(bytes.NewReader(m.Raw))
		if err == nil && msg.Header.Get("Message-Id") == "<"+id+">" {
			n++
		}
	}
	return n
}

type fakeConn struct {
	fake *Fake
	conn *smtp.Conn
	auth bool
	msg  Message
}

func (s *fakeConn) AuthMechanisms() []string {
	if s.fake.opt.Username == "" {
		return nil
	}
	return []string{sasl.Plain}
}

func (s *fakeConn) Auth(mech string) (sasl.Server, error) {
	return sasl.NewPlainServer(func(identity, username, password string) error {
		if username != s.fake.opt.Username || password != s.fake.opt.Password {
			return errors.New("invalid credentials")
		}
		s.auth = true
		return nil
	}), nil
}

func (s *fakeConn) Mail(from string, _ *smtp.MailOptions) error {
	if s.fake.opt.Username != "" && !s.auth {
		return &smtp.SMTPError{Code: 530, EnhancedCode: smtp.EnhancedCode{5, 7, 0}, Message: "authentication required"}
	}
	_, tlsOK := s.conn.TLSConnectionState()
	s.msg = Message{From: from, TLS: tlsOK, Auth: s.auth}
	return nil
}

func (s *fakeConn) Rcpt(to string, _ *smtp.RcptOptions) error {
	s.msg.To = append(s.msg.To, to)
	return nil
}

func (s *fakeConn) Data(r io.Reader) error {
	raw, err := io.ReadAll(r)
	if err != nil {
		return err // the client went away before the final "."
	}
	if s.fake.opt.Reject != 0 {
		return &smtp.SMTPError{Code: s.fake.opt.Reject, EnhancedCode: smtp.EnhancedCode{5, 7, 1}, Message: "rejected by the test"}
	}
	s.msg.Raw = raw
	s.fake.mu.Lock()
	s.fake.messages = append(s.fake.messages, s.msg)
	s.fake.mu.Unlock()
	return nil
}

func (s *fakeConn) Reset()        { s.msg = Message{} }
func (s *fakeConn) Logout() error { return nil }
