package mailbox

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/patchbot/patchbot/mailbox/dkimtest"
)

// A command counts as its signer's only when the signature covers the
// fields that place it: From, Subject, Message-ID, In-Reply-To and
// References, each one the mail has; when it is timely; and never an l=
// signature, whoever vouches for it. Signed by python3-dkim as a sender's
// server signs, each with the fields (h=), time (t=) and body length (l=)
// a provider may choose.
func TestVerifyCoversTheThread(t *testing.T) {
	keys := dkimtest.NewKeys(t, "key1", "example.org")
	k := keys["example.org"]
	lookup := func(_ context.Context, name string) ([]string, error) {
		if strings.EqualFold(name, k.Name()) {
			return []string{k.TXT}, nil
		}
		return nil, errors.New("no such host")
	}
	v := &Verifier{LookupTXT: lookup}
	const reply = "From: Maintainer <maintainer@example.org>\r\nTo: list@vger.kernel.org\r\n" +
		"Subject: Re: [PATCH] squashfs: avoid thundering-herd cache wakeups\r\nDate: Fri, 24 Jul 2026 12:05:56 -0700\r\n" +
		"Message-ID: <cmd-1@example.org>\r\nIn-Reply-To: <seed@linux.dev>\r\nReferences: <seed@linux.dev>\r\n\r\n#patchbot test\r\n"
	fresh := strings.Replace(strings.Replace(reply, "In-Reply-To: <seed@linux.dev>\r\n", "", 1), "References: <seed@linux.dev>\r\n", "", 1)
	noThread := []string{"From", "To", "Subject", "Date", "Message-ID"} // a large provider's default
	noID := []string{"From", "To", "Subject", "Date", "In-Reply-To", "References"}
	sign := func(raw string, o dkimtest.Options) string { return string(k.SignWith(t, []byte(raw), o)) }
	moved := func(raw string) string {
		return strings.ReplaceAll(raw, "<seed@linux.dev>", "<victim-series@stranger.example>")
	}
	tests := []struct {
		name, raw string
		v         *Verifier
		why       string // "" verified
		check     string
	}{
		{"every field signed (dkimpy's default)", sign(reply, dkimtest.Options{}), v, "", "✓ Signed: DKIM/example.org"},
		{"In-Reply-To and References left out", sign(reply, dkimtest.Options{Headers: noThread}), v,
			"its DKIM/example.org signature does not cover In-Reply-To, References",
			"✗ Partly signed: DKIM/example.org (not In-Reply-To, References)"},
		{"left out, and the copy moved to another thread", moved(sign(reply, dkimtest.Options{Headers: noThread})), v,
			"its DKIM/example.org signature does not cover In-Reply-To, References", ""},
		{"a mail that starts a thread, signed without them", sign(fresh, dkimtest.Options{Headers: noThread}), v, "", ""},
		{"the same, put into a thread afterwards", strings.Replace(sign(fresh, dkimtest.Options{Headers: noThread}),
			"Message-ID:", "In-Reply-To: <victim-series@stranger.example>\r\nMessage-ID:", 1), v,
			"its DKIM/example.org signature does not cover In-Reply-To", ""},
		{"Message-ID left out, replayed under a new one", strings.Replace(sign(reply, dkimtest.Options{Headers: noID}),
			"<cmd-1@example.org>", "<cmd-replayed@example.org>", 1), v,
			"its DKIM/example.org signature does not cover Message-ID", ""},
		{"signed 20 days before it is read", sign(reply, dkimtest.Options{Time: time.Now().Add(-20 * 24 * time.Hour)}), v,
			"its DKIM/example.org signature was made 20 days before the mail was read (at most 7 days)",
			"✗ Stale: DKIM/example.org (was made 20 days before the mail was read (at most 7 days))"},
		{"dated 3 hours ahead", sign(reply, dkimtest.Options{Time: time.Now().Add(3*time.Hour + time.Minute)}), v,
			"its DKIM/example.org signature is dated 3 hours ahead of the mail's reading (at most 15 minutes)", ""},
		{"20 days old, with no window (a person's look)", sign(reply, dkimtest.Options{Time: time.Now().Add(-20 * 24 * time.Hour)}),
			&Verifier{LookupTXT: lookup, MaxAge: -1, MaxAhead: -1}, "", ""},
		{"within a window of one's own", sign(reply, dkimtest.Options{Time: time.Now().Add(-20 * 24 * time.Hour)}),
			&Verifier{LookupTXT: lookup, MaxAge: 30 * 24 * time.Hour}, "", ""},
		{"l=, the key in DNS", sign(reply, dkimtest.Options{BodyLength: true}), v, "x", "✗ BADSIG: DKIM/example.org"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a := verify(t, tt.v, tt.raw)
			id := a.Identity()
			if tt.why == "" && (!id.Verified() || id.Via != "DKIM/example.org") {
				t.Errorf("not verified: %+v (signatures %+v)", id, a.Signatures)
			}
			if tt.why != "" && id.Verified() {
				t.Errorf("verified as %v, want refused (%s)", id, tt.why)
			}
			if tt.why != "" && tt.why != "x" && id.Why != tt.why {
				t.Errorf("why %q, want %q", id.Why, tt.why)
			}
			if tt.check != "" {
				var lines []string
				for _, c := range a.Checks() {
					lines = append(lines, c.String())
				}
				if got := strings.Join(lines, "; "); got != tt.check {
					t.Errorf("checks %q, want %q", got, tt.check)
				}
			}
		})
	}

	// l= through a trusted server's Authentication-Results, the key out of
	// patchbot's reach: the server's pass is not believed for it.
	const mx = "smtp.subspace.kernel.org"
	partial := sign(reply, dkimtest.Options{BodyLength: true})
	b := signatureTags(readHeader(t, partial))[0]["b"]
	rotated := strings.Replace(partial, "s=key1", "s=rotated", 1)
	ar := "Received: from mail.example.org by " + mx + " with ESMTPS; Fri, 24 Jul 2026 19:06:00 +0000\r\n" +
		"Authentication-Results: " + mx + "; dkim=pass header.d=example.org header.b=\"" + b[:8] + "\"\r\n"
	appended := strings.Replace(ar+rotated, "#patchbot test\r\n", "#patchbot test\r\n#patchbot stop\r\n", 1)
	vt := &Verifier{LookupTXT: lookup, AuthservIDs: []string{mx}}
	for _, raw := range []string{ar + rotated, appended} {
		a := verify(t, vt, raw)
		if id := a.Identity(); id.Verified() || len(a.Signatures) != 1 || a.Signatures[0].Result != Fail ||
			!strings.Contains(a.Signatures[0].Err, "l=") {
			t.Errorf("an l= signature vouched for by %s: identity %v, signatures %+v", mx, id, a.Signatures)
		}
	}
	// Without l=, the same vouching stands (the key rotated since).
	whole := sign(reply, dkimtest.Options{})
	b = signatureTags(readHeader(t, whole))[0]["b"]
	ar = strings.Replace(ar, "header.b=\""+signatureTags(readHeader(t, partial))[0]["b"][:8], "header.b=\""+b[:8], 1)
	if a := verify(t, vt, ar+strings.Replace(whole, "s=key1", "s=rotated", 1)); !a.Identity().Verified() {
		t.Errorf("a whole signature vouched for by %s: %+v", mx, a.Signatures)
	}
}
