package mailbox

import (
	"bufio"
	"bytes"
	"context"
	"crypto"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/base64"
	"errors"
	"fmt"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/emersion/go-message/textproto"
	"github.com/emersion/go-msgauth/dkim"

	"github.com/patchbot/patchbot/mailbox/dnstest"
)

// keyring is a signer's keys and the DNS that serves them, for unit tests
// (the service's tests serve real keys over a DNS server on loopback).
type keyring struct {
	mu      sync.Mutex
	txt     map[string]string // "sel._domainkey.domain" -> record
	keys    map[string]crypto.Signer
	lookups int
}

func newKeyring() *keyring {
	return &keyring{txt: map[string]string{}, keys: map[string]crypto.Signer{}}
}

var testRSA = sync.OnceValue(func() *rsa.PrivateKey {
	k, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		panic(err)
	}
	return k
})

// add publishes a key for domain: RSA 2048 (as mail servers use), or
// Ed25519.
func (k *keyring) add(t testing.TB, domain, selector string, useRSA bool) {
	t.Helper()
	var signer crypto.Signer
	var rec string
	if useRSA {
		key := testRSA()
		pub, _ := x509.MarshalPKIXPublicKey(&key.PublicKey)
		signer, rec = key, "v=DKIM1; k=rsa; p="+base64.StdEncoding.EncodeToString(pub)
	} else {
		pub, priv, _ := ed25519.GenerateKey(rand.Reader)
		signer, rec = priv, "v=DKIM1; k=ed25519; p="+base64.StdEncoding.EncodeToString(pub)
	}
	name := selector + "._domainkey." + domain
	k.txt[name], k.keys[name] = rec, signer
}

func (k *keyring) LookupTXT(_ context.Context, name string) ([]string, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.lookups++
	if r, ok := k.txt[strings.ToLower(name)]; ok {
		return []string{r}, nil
	}
	return nil, errors.New("no such host")
}

// sign signs raw as domain with selector's key, over the fields a mailer
// signs.
func (k *keyring) sign(t testing.TB, domain, selector, raw string) string {
	t.Helper()
	var b bytes.Buffer
	err := dkim.Sign(&b, strings.NewReader(raw), &dkim.SignOptions{Domain: domain, Selector: selector,
		Signer:     k.keys[selector+"._domainkey."+domain],
		HeaderKeys: []string{"From", "To", "Cc", "Subject", "Date", "Message-ID", "In-Reply-To", "References"}})
	if err != nil {
		t.Fatal(err)
	}
	return b.String()
}

const plainMail = "From: Usama Arif <usama.arif@linux.dev>\r\nTo: linux-fsdevel@vger.kernel.org\r\n" +
	"Subject: [PATCH] squashfs: avoid thundering-herd cache wakeups\r\nDate: Fri, 24 Jul 2026 12:05:56 -0700\r\n" +
	"Message-ID: <seed@linux.dev>\r\n\r\nThe patch.\r\n"

func verify(t testing.TB, v *Verifier, raw string) *Attestation {
	t.Helper()
	m, err := ParseBytes([]byte(raw))
	if err != nil {
		t.Fatal(err)
	}
	return v.Verify(context.Background(), m)
}

func TestVerifyDKIM(t *testing.T) {
	k := newKeyring()
	k.add(t, "linux.dev", "key1", true)
	k.add(t, "gmail.com", "20251104", false)
	k.add(t, "sub.kernel.org", "s", false)
	v := &Verifier{LookupTXT: k.LookupTXT}
	signed := k.sign(t, "linux.dev", "key1", plainMail)
	fromAt := func(addr, raw string) string {
		return strings.Replace(raw, "Usama Arif <usama.arif@linux.dev>", addr, 1)
	}
	tests := []struct {
		name   string
		raw    string
		via    string // the identity's, "" unverified
		checks string
	}{
		{"signed by the From: domain", signed, "DKIM/linux.dev", "✓ Signed: DKIM/linux.dev"},
		{"LF line ends, as an mbox keeps them", strings.ReplaceAll(signed, "\r\n", "\n"), "DKIM/linux.dev", "✓ Signed: DKIM/linux.dev"},
		// DMARC's relaxed alignment: the organizational domains agree.
		{"From: a subdomain", k.sign(t, "linux.dev", "key1", fromAt("x@lists.linux.dev", plainMail)), "DKIM/linux.dev", "✓ Signed: DKIM/linux.dev"},
		{"signed by a subdomain", k.sign(t, "sub.kernel.org", "s", fromAt("m@kernel.org", plainMail)), "DKIM/sub.kernel.org", "✓ Signed: DKIM/sub.kernel.org"},
		{"signed by another domain", k.sign(t, "gmail.com", "20251104", plainMail), "",
			"✓ Signed: DKIM/gmail.com (From: usama.arif@linux.dev)"},
		{"unsigned", plainMail, "", "✗ No signature (From: usama.arif@linux.dev)"},
		{"body changed after signing", strings.Replace(signed, "The patch.", "Another patch.", 1), "", "✗ BADSIG: DKIM/linux.dev"},
		{"Subject: changed after signing", strings.Replace(signed, "[PATCH]", "[PATCH v2]", 1), "", "✗ BADSIG: DKIM/linux.dev"},
		// The verifier reads the bottom-most Subject:, a reader the topmost.
		{"an unsigned Subject: put on top", "Subject: [PATCH v9] squashfs: avoid thundering-herd cache wakeups\r\n" + signed, "",
			"✗ BADSIG: DKIM/linux.dev"},
		{"an unsigned From: put on top", "From: Mallory <usama.arif@linux.dev>\r\n" + signed, "", "✗ BADSIG: DKIM/linux.dev"},
		{"no key in DNS", strings.Replace(signed, "s=key1", "s=gone", 1), "",
			"✗ No key: DKIM/linux.dev"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a := verify(t, v, tt.raw)
			id := a.Identity()
			if id.Via != tt.via || id.Verified() != (tt.via != "") {
				t.Errorf("identity %v, want via %q (signatures %+v)", id, tt.via, a.Signatures)
			}
			var lines []string
			for _, c := range a.Checks() {
				lines = append(lines, c.String())
			}
			if got := strings.Join(lines, "; "); got != tt.checks {
				t.Errorf("checks %q, want %q", got, tt.checks)
			}
		})
	}
	// Keys are kept: the patches of one series cost one lookup.
	k.lookups = 0
	for i := 0; i < 5; i++ {
		verify(t, v, signed)
	}
	if k.lookups != 0 {
		t.Errorf("%d lookups for a key looked up before", k.lookups)
	}
}

// Five hundred signatures cost MaxSignatures verifications.
func TestVerifyBoundsSignatures(t *testing.T) {
	k := newKeyring()
	k.add(t, "linux.dev", "key1", false)
	signed := k.sign(t, "linux.dev", "key1", plainMail)
	sig := signed[:strings.Index(signed, "\r\nFrom: ")+2]
	raw := strings.Repeat(strings.Replace(sig, "s=key1", "s=other", 1), 500) + signed
	a := verify(t, &Verifier{LookupTXT: k.LookupTXT}, raw)
	if len(a.Signatures) != MaxSignatures || a.Identity().Verified() {
		t.Errorf("%d signatures checked, identity %v; want %d, and the valid one past them not reached", len(a.Signatures), a.Identity(), MaxSignatures)
	}
}

// A trusted server's Authentication-Results stand in for a key patchbot
// cannot get (rotated since), for that very signature, from the topmost
// block only.
func TestVerifyTrustedAuthResults(t *testing.T) {
	k := newKeyring()
	k.add(t, "linux.dev", "key1", true)
	signed := k.sign(t, "linux.dev", "key1", plainMail)
	rotated := strings.Replace(signed, "s=key1", "s=rotated", 1) // no key in DNS any more; the mail unchanged
	b := signatureTags(readHeader(t, rotated))[0]["b"]
	const mx = "smtp.subspace.kernel.org"
	v := &Verifier{LookupTXT: k.LookupTXT, AuthservIDs: []string{mx}}
	pass := "Authentication-Results: " + mx + ";\r\n dkim=pass (2048-bit key) header.d=linux.dev header.i=@linux.dev header.b=\"" + b[:8] + "\"\r\n"
	received := "Received: from mail.linux.dev by " + mx + " with ESMTPS; Fri, 24 Jul 2026 19:06:00 +0000\r\n"
	tests := []struct {
		name, raw, via string
	}{
		{"the server's pass for this signature", received + pass + rotated, "DKIM/linux.dev"},
		{"the server's fields split by method, as kernel.org writes them", received +
			"Authentication-Results: " + mx + "; arc=none smtp.client-ip=95.215.58.1\r\n" +
			"ARC-Seal: i=1; a=rsa-sha256; d=subspace.kernel.org; s=arc; cv=none; b=x\r\n" +
			"Authentication-Results: " + mx + "; dmarc=pass (p=none dis=none) header.from=linux.dev\r\n" + pass + rotated, "DKIM/linux.dev"},
		{"an untrusted server's pass", received + strings.Replace(pass, mx, "mx.evil.example", 1) + rotated, ""},
		{"a pass for another signature of the domain", received + strings.Replace(pass, b[:8], "AAAAAAAA", 1) + rotated, ""},
		{"a pass but no signature in the mail", received + pass + plainMail, ""},
		// The forgery: the server said none; the sender's own
		// field, written with the server's name, claims a pass.
		{"a pass under the server's none", received + "Authentication-Results: " + mx + "; dkim=none\r\n" + pass + rotated, ""},
		{"a pass under the server's fail", received + strings.Replace(pass, "dkim=pass", "dkim=fail", 1) + pass + rotated, ""},
		// Below the next Received: the hop before wrote it (or the sender).
		{"a pass below the block", received + "Authentication-Results: " + mx + "; spf=pass smtp.mailfrom=linux.dev\r\n" +
			"Received: from [10.0.0.1] by mail.linux.dev; Fri, 24 Jul 2026 19:05:59 +0000\r\n" + pass + rotated, ""},
		{"a pass below From:", strings.Replace(rotated, "To:", strings.TrimSuffix(pass, "\r\n")+"\r\nTo:", 1), ""},
		// Never against patchbot's own check: the key is there and the
		// mail changed.
		{"a pass for a mail that changed", received + pass + strings.Replace(signed, "The patch.", "Other.", 1), ""},
	}
	for _, tt := range tests {
		a := verify(t, v, tt.raw)
		if got := a.Identity().Via; got != tt.via {
			t.Errorf("%s: identity via %q, want %q (%+v)", tt.name, got, tt.via, a.Signatures)
		}
	}
	a := verify(t, v, received+pass+rotated)
	if c := a.Checks(); len(c) != 1 || c[0].String() != "✓ Signed: DKIM/linux.dev (checked by "+mx+")" {
		t.Errorf("checks %v", c)
	}
	if a := verify(t, &Verifier{LookupTXT: k.LookupTXT}, received+pass+rotated); a.Identity().Verified() {
		t.Error("a pass counted with no trusted authserv-id configured")
	}
}

func readHeader(t testing.TB, raw string) textproto.Header {
	h, err := textproto.ReadHeader(bufio.NewReader(strings.NewReader(raw)))
	if err != nil {
		t.Fatal(err)
	}
	return h
}

func TestTrustedAuthResults(t *testing.T) {
	trusted := []string{"mx.example.org"}
	tests := []struct {
		name, head string
		want       []string // each field's first result, as method=result
	}{
		{"topmost block", "Authentication-Results: mx.example.org; dkim=pass header.d=a.org\r\n" +
			"Authentication-Results: mx.example.org; spf=pass smtp.mailfrom=a.org\r\n" +
			"Received: by relay\r\nAuthentication-Results: mx.example.org; dkim=pass header.d=b.org\r\n", []string{"dkim=pass", "spf=pass"}},
		{"untrusted fields are not read", "Authentication-Results: mx.evil.example; dkim=pass header.d=b.org\r\n" +
			"Authentication-Results: mx.example.org; dkim=fail header.d=a.org\r\n", []string{"dkim=fail"}},
		{"after Received: above it", "Received: by mx.example.org\r\nAuthentication-Results: mx.example.org; dkim=pass header.d=a.org\r\n" +
			"Received: by relay\r\n", []string{"dkim=pass"}},
		{"below From:", "From: a@a.org\r\nAuthentication-Results: mx.example.org; dkim=pass header.d=a.org\r\n", nil},
		{"a malformed field is skipped", "Authentication-Results: mx.example.org; dkim\r\nAuthentication-Results: mx.example.org; dkim=none\r\n", []string{"dkim=none"}},
	}
	for _, tt := range tests {
		h := readHeader(t, tt.head+"Subject: x\r\n\r\n")
		var got []string
		for _, ar := range TrustedAuthResults(h, trusted) {
			r := ar.Results[0]
			got = append(got, r.Method+"="+r.Result)
		}
		if fmt.Sprint(got) != fmt.Sprint(tt.want) {
			t.Errorf("%s: %v, want %v", tt.name, got, tt.want)
		}
	}
	if TrustedAuthResults(readHeader(t, "Authentication-Results: mx.example.org; dkim=pass\r\n\r\n"), nil) != nil {
		t.Error("fields read with nothing trusted")
	}
}

func TestOrgDomainAlignment(t *testing.T) {
	tests := []struct {
		d, from string
		want    bool
	}{
		{"linux.dev", "linux.dev", true},
		{"linux.dev", "lists.linux.dev", true},
		{"mail.kernel.org", "kernel.org", true},
		{"a.kernel.org", "b.kernel.org", true},
		{"dev", "evillinux.dev", false}, // a public suffix aligns with nothing
		{"linux.dev", "evillinux.dev", false},
		{"example.co.uk", "other.co.uk", false},
		{"alice.github.io", "bob.github.io", false}, // a private suffix too
		{"gmail.com", "linux.dev", false},
		{"", "", false},
	}
	for _, tt := range tests {
		if got := aligned(tt.d, tt.from); got != tt.want {
			t.Errorf("aligned(d=%s, From: %s) = %v, want %v", tt.d, tt.from, got, tt.want)
		}
	}
}

// The configured DNS server is asked, over the network, for a key longer
// than one TXT string (a 2048-bit RSA key is 392 characters of base64).
func TestVerifyOverDNS(t *testing.T) {
	k := newKeyring()
	k.add(t, "linux.dev", "key1", true)
	dns := dnstest.Start(t)
	dns.SetTXT("key1._domainkey.linux.dev", k.txt["key1._domainkey.linux.dev"])
	v := NewVerifier(DKIMConfig{DNS: dns.Addr}, nil)
	signed := k.sign(t, "linux.dev", "key1", plainMail)
	if a := verify(t, v, signed); !a.Identity().Verified() {
		t.Fatalf("not verified over DNS: %+v", a.Signatures)
	}
	if n := dns.Queries("key1._domainkey.linux.dev"); n != 1 {
		t.Errorf("%d queries, want 1", n)
	}
	// A key gone from DNS (rotated) is no key, and a missing name is
	// remembered briefly, not asked for at every mail.
	dns.SetTXT("key1._domainkey.linux.dev")
	v = NewVerifier(DKIMConfig{DNS: dns.Addr}, nil)
	for i := 0; i < 3; i++ {
		if a := verify(t, v, signed); a.Identity().Verified() || a.Signatures[0].Result != NoKey {
			t.Fatalf("a key gone from DNS: %+v", a.Signatures)
		}
	}
	if n := dns.Queries("key1._domainkey.linux.dev"); n != 2 {
		t.Errorf("%d queries in all, want 2", n)
	}
}

// What verifying one mail costs: the seed patch (7 KB) as its author's
// server signs it, the key already kept (as for every patch of a series
// after the first), looked up over DNS on loopback each time, and an
// unsigned mail (the check finds nothing to verify).
//
//	go test ./mailbox -run XXX -bench VerifyDKIM -benchtime 2000x -cpu 1
func BenchmarkVerifyDKIM(b *testing.B) {
	seed := readFixture(b, "../testdata/mbox/squashfs-thundering-herd.mbox")[0]
	raw := strings.ReplaceAll(string(seed.Raw), "\n", "\r\n")
	k := newKeyring()
	k.add(b, "linux.dev", "rsa", true)
	k.add(b, "linux.dev", "ed", false)
	dns := dnstest.Start(b)
	dns.SetTXT("rsa._domainkey.linux.dev", k.txt["rsa._domainkey.linux.dev"])
	for _, bc := range []struct {
		name string
		raw  string
		v    *Verifier
	}{
		{"rsa2048-key-kept", k.sign(b, "linux.dev", "rsa", raw), &Verifier{LookupTXT: k.LookupTXT}},
		{"ed25519-key-kept", k.sign(b, "linux.dev", "ed", raw), &Verifier{LookupTXT: k.LookupTXT}},
		{"rsa2048-dns-lookup", k.sign(b, "linux.dev", "rsa", raw), &Verifier{LookupTXT: NewVerifier(DKIMConfig{DNS: dns.Addr}, nil).LookupTXT, KeyTTL: time.Nanosecond}},
		{"unsigned", raw, &Verifier{LookupTXT: k.LookupTXT}},
	} {
		m, err := ParseBytes([]byte(bc.raw))
		if err != nil {
			b.Fatal(err)
		}
		want := bc.name != "unsigned"
		b.Run(bc.name, func(b *testing.B) {
			b.SetBytes(int64(len(bc.raw)))
			b.ReportAllocs()
			// The process's CPU time as well as the wall clock: on a shared
			// host the wall clock is mostly waiting for a core.
			cpu0 := cpuTime()
			for b.Loop() {
				if bc.v.Verify(context.Background(), m).Identity().Verified() != want {
					b.Fatal("wrong verdict")
				}
			}
			b.ReportMetric(float64((cpuTime()-cpu0).Nanoseconds())/float64(b.N), "cpu-ns/op")
		})
	}
}

// cpuTime is the user and system time the process used so far.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
