package service

import (
	"bytes"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/base64"
	"encoding/pem"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/patchbot/patchbot/internal/testenv"
)

// mx runs testdata/mx.py, a receiving server's DKIM step written with
// Debian's python3-dkim: it signs as example.org, or checks a signature
// and prepends its verdict as an Authentication-Results field.
type mx struct {
	t        *testing.T
	key, txt string
}

func newMX(t *testing.T) *mx {
	const py = "/usr/bin/python3"
	if err := exec.Command(py, "-c", "import dkim").Run(); err != nil {
		testenv.Missing(t, "python3-dkim is not installed (scripts/install-deps.sh installs it)")
	}
	k, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	pub, err := x509.MarshalPKIXPublicKey(&k.PublicKey)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	m := &mx{t: t, key: filepath.Join(dir, "key.pem"), txt: filepath.Join(dir, "s1.txt")}
	os.WriteFile(m.key, pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(k)}), 0o600)
	os.WriteFile(m.txt, []byte("v=DKIM1; k=rsa; p="+base64.StdEncoding.EncodeToString(pub)), 0o644)
	return m
}

func (m *mx) run(mode, arg string, msg []byte) []byte {
	m.t.Helper()
	cmd := exec.Command("/usr/bin/python3", "testdata/mx.py", mode, arg)
	cmd.Stdin = bytes.NewReader(msg)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		m.t.Fatalf("mx.py %s: %v\n%s", mode, err, stderr.String())
	}
	return out
}

func (m *mx) sign(msg []byte) []byte    { return m.run("sign", m.key, msg) }
func (m *mx) receive(msg []byte) []byte { return m.run("check", m.txt, msg) }

// Real signatures: a command signed with example.org's key passes the
// receiving server's check and runs; the same mail with its command
// changed after signing, or with the sender's own "pass" field, does not.
func TestCommandWithRealDKIMSignature(t *testing.T) {
	m := newMX(t)
	d := newTestDaemon(t, t.TempDir())
	d.ingestFile(t, "list", "../testdata/mbox/squashfs-thundering-herd.mbox")
	mail := func(id, body string) []byte {
		return []byte(strings.ReplaceAll(reply{id: id, from: "Maintainer <maintainer@example.org>", body: body}.raw(), "\n", "\r\n"))
	}
	signed := m.sign(mail("signed@example.org", "Please measure it.\n#patchbot help\n"))
	if !bytes.HasPrefix(signed, []byte("DKIM-Signature: v=1; a=rsa-sha256;")) {
		t.Fatalf("not signed:\n%s", signed)
	}
	tampered := bytes.Replace(m.sign(mail("tampered@example.org", "Please measure it.\n#patchbot help\n")),
		[]byte("#patchbot help"), []byte("#patchbot test"), 1)
	forged := bytes.Replace(mail("forged@example.org", "#patchbot test\n"), []byte("Subject:"), []byte("Authentication-Results: mx.patchbot.test; dkim=pass header.d=example.org\r\nSubject:"), 1)
	for _, tc := range []struct {
		id, verdict, want string
		raw               []byte
	}{
		{"signed@example.org", "dkim=pass header.d=example.org", "answered", signed}, // help: it counts, and is answered
		{"tampered@example.org", "dkim=fail", "refused", tampered},
		{"forged@example.org", "dkim=none", "dropped", forged}, // refused again: one refusal an hour
	} {
		got := m.receive(tc.raw)
		if !bytes.HasPrefix(got, []byte("Authentication-Results: mx.patchbot.test; "+tc.verdict)) {
			t.Fatalf("%s: the server's verdict is not %q:\n%s", tc.id, tc.verdict, got)
		}
		if bytes.Count(got, []byte("Authentication-Results: mx.patchbot.test")) != 1 {
			t.Errorf("%s: the server left a field claiming its name:\n%s", tc.id, got)
		}
		d.ingestRaw(t, "mail", listID+string(got))
		if o := d.outcomes(t, tc.id); len(o) != 1 || o[0] != tc.want {
			t.Errorf("%s: outcome %v, want %s", tc.id, o, tc.want)
		}
	}
	// The signed mail's "test" runs: sign one more.
	test := m.receive(m.sign(mail("signed-test@example.org", "#patchbot test cache-contention\n")))
	d.ingestRaw(t, "mail", listID+string(test))
	if o := d.outcomes(t, "signed-test@example.org"); len(o) != 1 || o[0] != "accepted" {
		t.Errorf("the signed test command: %v, want accepted", o)
	}
}
