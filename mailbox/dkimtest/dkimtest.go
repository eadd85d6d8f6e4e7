// Package dkimtest makes real DKIM signatures for tests with Debian's
// python3-dkim (the dkimpy module that dkimsign runs), the way a sender's
// mail server signs, with fresh RSA 2048 keys:
//
//	dns := dnstest.Start(t)
//	keys := dkimtest.NewKeys(t, "key1", "linux.dev", "example.org")
//	keys["linux.dev"].Publish(dns)
//	signed := keys["linux.dev"].Sign(t, raw)
//
// One python3 process signs every mail of a test (dkimsign would start
// one, and import the module, per mail: most of a second each here).
package dkimtest

import (
	"bufio"
	"bytes"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/base64"
	"encoding/pem"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/patchbot/patchbot/mailbox/dnstest"
)

// Key is one domain's signing key.
type Key struct {
	Domain, Selector string
	Path             string // the private key (PEM), as dkimsign takes it
	TXT              string // the DNS record: "v=DKIM1; k=rsa; p=..."
	signer           *signer
}

// Name is the key's DNS name, selector._domainkey.domain.
func (k *Key) Name() string { return k.Selector + "._domainkey." + k.Domain }

// Publish serves the key from a test DNS server.
func (k *Key) Publish(dns *dnstest.Server) { dns.SetTXT(k.Name(), k.TXT) }

const python = "/usr/bin/python3"

// NewKeys makes a key for each domain, all with selector, and the signer
// process they share, stopped when the test ends. It skips the test when
// python3-dkim is not installed.
func NewKeys(t testing.TB, selector string, domains ...string) map[string]*Key {
	t.Helper()
	if err := exec.Command(python, "-c", "import dkim").Run(); err != nil {
		t.Skip("python3-dkim is not installed (scripts/install-deps.sh installs it)")
	}
	s := startSigner(t)
	dir := t.TempDir()
	out := map[string]*Key{}
	for _, d := range domains {
		priv, err := rsa.GenerateKey(rand.Reader, 2048)
		if err != nil {
			t.Fatal(err)
		}
		pub, err := x509.MarshalPKIXPublicKey(&priv.PublicKey)
		if err != nil {
			t.Fatal(err)
		}
		k := &Key{Domain: d, Selector: selector, Path: filepath.Join(dir, d+".key"), signer: s,
			TXT: "v=DKIM1; k=rsa; h=sha256; p=" + base64.StdEncoding.EncodeToString(pub)}
		pemKey := pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(priv)})
		if err := os.WriteFile(k.Path, pemKey, 0o600); err != nil {
			t.Fatal(err)
		}
		out[d] = k
	}
	return out
}

// Sign signs raw (CRLF or LF line ends) as dkimsign does: relaxed/simple,
// rsa-sha256, over dkimpy's default fields (From, To, Cc, Subject, Date,
// Message-ID, In-Reply-To, References, the MIME fields; From
// oversigned). The signature field is prepended; the mail is otherwise
// unchanged.
func (k *Key) Sign(t testing.TB, raw []byte) []byte {
	t.Helper()
	return k.SignWith(t, raw, Options{})
}

// Options are what a sender's server may do otherwise when it signs.
type Options struct {
	// Headers are the fields signed (h=), in order; nil: dkimpy's
	// default. A large mail provider's leaves out In-Reply-To and
	// References.
	Headers []string
	// BodyLength signs only the body's length at signing (l=): what
	// follows can be anything.
	BodyLength bool
	// Time dates the signature (t=); zero: now.
	Time time.Time
}

// SignWith signs raw as Sign does, with o.
func (k *Key) SignWith(t testing.TB, raw []byte, o Options) []byte {
	t.Helper()
	crlf := bytes.Contains(raw, []byte("\r\n"))
	in := raw
	if !crlf {
		in = bytes.ReplaceAll(raw, []byte("\n"), []byte("\r\n"))
	}
	out, err := k.signer.sign(k, in, o)
	if err != nil {
		t.Fatalf("dkimpy: %v", err)
	}
	if !crlf {
		out = bytes.ReplaceAll(out, []byte("\r\n"), []byte("\n"))
	}
	return out
}

// signScript reads requests "SELECTOR DOMAIN KEYFILE LENGTH TIME L
// HEADERS\n" + the mail (TIME 0: now; L 1: sign with l=; HEADERS "-":
// dkimpy's default, else the fields, comma-separated) and answers
// "LENGTH\n" + the signature field and the mail.
const signScript = `
import sys, time, dkim
inp, out = sys.stdin.buffer, sys.stdout.buffer
now = time.time
for line in iter(inp.readline, b""):
    sel, dom, path, n, at, length, heads = line.split()
    msg = inp.read(int(n))
    try:
        if int(at) > 0:
            time.time = lambda: float(int(at))
        kw = {}
        if heads != b"-":
            kw["include_headers"] = heads.split(b",")
        res = dkim.sign(msg, sel, dom, open(path, "rb").read(), canonicalize=(b"relaxed", b"simple"),
                        length=(length == b"1"), **kw) + msg
    except Exception as e:
        res = b"ERROR " + str(e).encode()
    finally:
        time.time = now
    out.write(b"%d\n" % len(res))
    out.write(res)
    out.flush()
`

type signer struct {
	mu  sync.Mutex
	in  io.WriteCloser
	out *bufio.Reader
}

func startSigner(t testing.TB) *signer {
	cmd := exec.Command(python, "-c", signScript)
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { in.Close(); cmd.Wait() })
	return &signer{in: in, out: bufio.NewReader(out)}
}

func (s *signer) sign(k *Key, msg []byte, o Options) ([]byte, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	at, length, heads := int64(0), 0, "-"
	if !o.Time.IsZero() {
		at = o.Time.Unix()
	}
	if o.BodyLength {
		length = 1
	}
	if len(o.Headers) > 0 {
		heads = strings.Join(o.Headers, ",")
	}
	if _, err := fmt.Fprintf(s.in, "%s %s %s %d %d %d %s\n", k.Selector, k.Domain, k.Path, len(msg), at, length, heads); err != nil {
		return nil, err
	}
	if _, err := s.in.Write(msg); err != nil {
		return nil, err
	}
	line, err := s.out.ReadString('\n')
	if err != nil {
		return nil, err
	}
	n, err := strconv.Atoi(line[:len(line)-1])
	if err != nil {
		return nil, fmt.Errorf("reading the signer: %q", line)
	}
	res := make([]byte, n)
	if _, err := io.ReadFull(s.out, res); err != nil {
		return nil, err
	}
	if bytes.HasPrefix(res, []byte("ERROR ")) {
		return nil, fmt.Errorf("%s", res)
	}
	return res, nil
}
