package service

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"strings"
	"sync"
	"testing"

	"github.com/emersion/go-msgauth/dkim"
)

// signAs starts a line that asks the ingest helpers to sign the mail with
// that domain's key; the line is removed before signing.
const signAs = "X-Test-Sign-As: "

// keys are the test domains' DKIM keys, made on first use, and the
// resolver that serves them (selector "test"). The real-server tests
// serve python3-dkim's keys over DNS instead.
type keys struct {
	mu   sync.Mutex
	priv map[string]ed25519.PrivateKey
}

var testKeys = &keys{priv: map[string]ed25519.PrivateKey{}}

func (k *keys) key(domain string) ed25519.PrivateKey {
	k.mu.Lock()
	defer k.mu.Unlock()
	if p, ok := k.priv[domain]; ok {
		return p
	}
	_, p, _ := ed25519.GenerateKey(rand.Reader)
	k.priv[domain] = p
	return p
}

func (k *keys) LookupTXT(_ context.Context, name string) ([]string, error) {
	domain, ok := strings.CutPrefix(strings.ToLower(name), "test._domainkey.")
	if !ok {
		return nil, errors.New("no such host")
	}
	pub := k.key(domain).Public().(ed25519.PublicKey)
	return []string{"v=DKIM1; k=ed25519; p=" + base64.StdEncoding.EncodeToString(pub)}, nil
}

// sign signs raw with the key of each domain its signAs lines name, as
// that domain's mail server would; a mail without such a line is returned
// as it is.
func (k *keys) sign(t testing.TB, raw []byte) []byte {
	t.Helper()
	var domains []string
	var kept [][]byte
	head, body, _ := bytes.Cut(raw, []byte("\n\n"))
	for _, line := range bytes.SplitAfter(head, []byte("\n")) {
		if d, ok := bytes.CutPrefix(line, []byte(signAs)); ok {
			domains = append(domains, strings.TrimSpace(string(d)))
			continue
		}
		kept = append(kept, line)
	}
	if len(domains) == 0 {
		return raw
	}
	out := append(bytes.Join(kept, nil), append([]byte("\n\n"), body...)...)
	for _, d := range domains {
		var b bytes.Buffer
		if err := dkim.Sign(&b, bytes.NewReader(out), &dkim.SignOptions{Domain: d, Selector: "test", Signer: k.key(d),
			HeaderKeys: []string{"From", "To", "Cc", "Subject", "Date", "Message-ID", "In-Reply-To", "References"}}); err != nil {
			t.Fatal(err)
		}
		out = b.Bytes()
	}
	return out
}
