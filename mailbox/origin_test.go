package mailbox

import (
	"reflect"
	"strings"
	"testing"
)

func TestParseAuthResults(t *testing.T) {
	tests := []struct {
		in      string
		want    AuthResults
		wantErr bool
	}{
		// As lore serves kernel.org mail (smtp.subspace.kernel.org adds one
		// field per method).
		{in: "smtp.subspace.kernel.org;\n\tdkim=pass (1024-bit key) header.d=linux.dev header.i=@linux.dev header.b=\"Xk2ck1P+\"",
			want: AuthResults{AuthServID: "smtp.subspace.kernel.org", Results: []AuthResult{{Method: "dkim", Result: "pass",
				Props: map[string]string{"header.d": "linux.dev", "header.i": "@linux.dev", "header.b": "Xk2ck1P+"}}}}},
		{in: "smtp.subspace.kernel.org; dmarc=pass (p=none dis=none) header.from=linux.dev",
			want: AuthResults{AuthServID: "smtp.subspace.kernel.org", Results: []AuthResult{{Method: "dmarc", Result: "pass",
				Props: map[string]string{"header.from": "linux.dev"}}}}},
		// RFC 8601's own examples: a version, several results, "none".
		{in: "example.com 1; spf=pass smtp.mailfrom=example.net; dkim/1 = fail reason=\"bad sig\" header.d=example.org",
			want: AuthResults{AuthServID: "example.com", Results: []AuthResult{
				{Method: "spf", Result: "pass", Props: map[string]string{"smtp.mailfrom": "example.net"}},
				{Method: "dkim", Result: "fail", Props: map[string]string{"reason": "bad sig", "header.d": "example.org"}}}}},
		{in: "example.org; none", want: AuthResults{AuthServID: "example.org"}},
		{in: "(comment (nested)) mx.Example.ORG; dkim=pass header.d=x.org",
			want: AuthResults{AuthServID: "mx.example.org", Results: []AuthResult{{Method: "dkim", Result: "pass",
				Props: map[string]string{"header.d": "x.org"}}}}},
		{in: "", wantErr: true},
		{in: "mx.example.org; dkim", wantErr: true},
		{in: "mx.example.org; dkim=pass (unclosed", wantErr: true},
		{in: "mx.example.org; dkim=pass reason=\"unclosed", wantErr: true},
	}
	for _, tt := range tests {
		got, err := ParseAuthResults(tt.in)
		if (err != nil) != tt.wantErr {
			t.Errorf("ParseAuthResults(%q) error %v, want error %v", tt.in, err, tt.wantErr)
			continue
		}
		if !tt.wantErr && !reflect.DeepEqual(got, tt.want) {
			t.Errorf("ParseAuthResults(%q) = %+v, want %+v", tt.in, got, tt.want)
		}
	}
}

func TestOriginSender(t *testing.T) {
	tests := []struct {
		from    string
		want    string
		wantErr string
	}{
		{from: "Usama Arif <Usama.Arif@linux.dev>", want: "usama.arif@linux.dev"},
		{from: "=?UTF-8?Q?J=C3=B6rg_R=C3=B6del?= <joro@8bytes.org>", want: "joro@8bytes.org"},
		{from: `"Doe, John" <jd@example.org>`, want: "jd@example.org"},
		// The forgery: one encoded word on the wire, three
		// addresses once decoded.
		{from: "=?UTF-8?Q?a@evil.example=2C_b@evil.example=2C_c@evil.example?=", wantErr: "not an address"},
		{from: "=?UTF-8?B?YUBldmlsLmV4YW1wbGUsIGJAZXZpbC5leGFtcGxl?= <s@example.net>", wantErr: "decodes to"},
		{from: "=?UTF-8?Q?a@evil.example=2C_b@evil.example?= <s@example.net>", wantErr: "not an address"},
		{from: "a@example.org, b@example.org", wantErr: "names 2 addresses"},
		{from: "undisclosed-recipients:;", wantErr: "names 0 addresses"},
	}
	for _, tt := range tests {
		m := &Message{Raw: []byte("From: " + tt.from + "\r\nSubject: x\r\n\r\nbody\r\n")}
		o := OriginOf(m)
		if o.Sender != tt.want || (tt.wantErr == "") != (o.SenderErr == nil) ||
			o.SenderErr != nil && !strings.Contains(o.SenderErr.Error(), tt.wantErr) {
			t.Errorf("From: %s -> %q, %v; want %q, error containing %q", tt.from, o.Sender, o.SenderErr, tt.want, tt.wantErr)
		}
	}
	two := &Message{Raw: []byte("From: a@example.org\r\nFrom: b@example.org\r\n\r\n")}
	if o := OriginOf(two); o.Sender != "" || o.SenderErr == nil {
		t.Errorf("two From: fields gave sender %q", o.Sender)
	}
}

func TestOriginRecipients(t *testing.T) {
	m := &Message{Raw: []byte("From: a@x.org\r\nTo: Dev One <dev@x.org>\r\n" +
		"Cc: =?UTF-8?B?eEBldmlsLmV4YW1wbGUsIHlAZXZpbC5leGFtcGxl?= <z@evil.example>,\r\n \"Doe, J\" <jd@x.org>,\r\n" +
		" not an address, list@vger.kernel.org\r\n\r\n")}
	var got []string
	for _, r := range OriginOf(m).Recipients {
		got = append(got, AddrOf(r))
	}
	// The encoded name stays a name; the odd entry is left out.
	if want := "dev@x.org z@evil.example jd@x.org list@vger.kernel.org"; strings.Join(got, " ") != want {
		t.Errorf("recipients %q, want %q", got, want)
	}
}

func TestOriginListAndAutoSubmitted(t *testing.T) {
	m := &Message{Raw: []byte("From: a@x.org\r\nList-Id: Linux FS devel <linux-fsdevel.vger.kernel.org>\r\n" +
		"List-Post: <mailto:linux-fsdevel@vger.kernel.org>\r\nAuto-Submitted: auto-replied\r\n\r\n")}
	o := OriginOf(m)
	if o.ListID != "linux-fsdevel.vger.kernel.org" || o.ListPost != "linux-fsdevel@vger.kernel.org" || !o.AutoSubmitted {
		t.Errorf("origin = %+v", o)
	}
	direct := OriginOf(&Message{Raw: []byte("From: a@x.org\r\nAuto-Submitted: no\r\n\r\n")})
	if direct.ListID != "" || direct.AutoSubmitted {
		t.Errorf("direct mail origin = %+v", direct)
	}
}

func TestFoldCommands(t *testing.T) {
	body := strings.Repeat("#patchbot help\n", 50) + "#patchbot test nosuch nosuch\n#patchbot test nosuch\n" +
		"#patchbot frob\n#patchbot stop\n"
	cmds := ParseCommands(&Message{Body: body})
	if len(cmds) != 54 {
		t.Fatalf("parsed %d commands", len(cmds))
	}
	kept, ignored := FoldCommands(cmds, MaxCommands)
	var names []string
	for _, c := range kept {
		names = append(names, c.Name+":"+strings.Join(c.Suites, ","))
	}
	// help once; the two "test nosuch" are one request; frob is the third;
	// stop is past the limit.
	if strings.Join(names, " ") != "help: test:nosuch frob:" || ignored != 51 {
		t.Errorf("kept %v, ignored %d", names, ignored)
	}
}
