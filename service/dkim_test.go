package service

import (
	"bytes"
	"strings"
	"testing"

	"github.com/patchbot/patchbot/mailbox"
	"github.com/patchbot/patchbot/mailbox/dkimtest"
	"github.com/patchbot/patchbot/mailbox/dnstest"
)

// Real signatures, checked the way the daemon checks them in production:
// a command signed by example.org's server (python3-dkim, an RSA 2048
// key) is verified against the key the domain publishes, here on a DNS
// server on loopback; the same mail changed after signing, or carrying a
// pass its sender wrote, is not.
func TestCommandWithRealDKIMSignature(t *testing.T) {
	dns := dnstest.Start(t)
	key := dkimtest.NewKeys(t, "key1", "example.org")["example.org"]
	key.Publish(dns)
	d := newTestDaemon(t, t.TempDir())
	d.Verifier = mailbox.NewVerifier(mailbox.DKIMConfig{DNS: dns.Addr}, d.Config.Commands.AuthservIDs)
	d.ingestFile(t, "list", "../testdata/mbox/squashfs-thundering-herd.mbox")
	mail := func(id, body string) []byte {
		return []byte(strings.ReplaceAll(reply{id: id, from: "Maintainer <maintainer@example.org>", body: body}.raw(), "\n", "\r\n"))
	}
	signed := key.Sign(t, mail("signed@example.org", "Please measure it.\n#patchbot help\n"))
	if !bytes.HasPrefix(signed, []byte("DKIM-Signature: v=1; a=rsa-sha256; c=relaxed/simple; d=example.org;")) {
		t.Fatalf("not signed:\n%s", signed)
	}
	tampered := bytes.Replace(key.Sign(t, mail("tampered@example.org", "Please measure it.\n#patchbot help\n")),
		[]byte("#patchbot help"), []byte("#patchbot test"), 1)
	forged := bytes.Replace(mail("forged@example.org", "#patchbot test\n"), []byte("Subject:"),
		[]byte("Authentication-Results: "+testAuthserv+"; dkim=pass header.d=example.org\r\nSubject:"), 1)
	test := key.Sign(t, mail("signed-test@example.org", "#patchbot test cache-contention\n"))
	for _, tc := range []struct {
		id, want string
		raw      []byte
	}{
		{"signed@example.org", "answered", signed}, // help: it counts, and is answered
		{"tampered@example.org", "refused", tampered},
		{"forged@example.org", "dropped", forged}, // unverified again: one answer a day
		{"signed-test@example.org", "accepted", test},
	} {
		d.ingestRaw(t, "mail", listID+string(tc.raw))
		if o := d.outcomes(t, tc.id); len(o) != 1 || o[0] != tc.want {
			t.Errorf("%s: outcome %v, want %s", tc.id, o, tc.want)
		}
	}
	if n := dns.Queries(key.Name()); n != 1 {
		t.Errorf("the key was asked for %d times, want once (kept for the next mails)", n)
	}
}
