package mailbox

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/mail"
	"strings"

	"github.com/emersion/go-message/textproto"
)

// Origin is what a mail's own header says about where it came from and
// who sent it, read from its raw header, for deciding whom patchbot may
// answer. Everything in it is the sender's word: who sent the mail, as
// verified, is the Verifier's (dkim.go), and whether it is list mail is
// its source's (a List-Id proves nothing).
type Origin struct {
	// Sender is the one bare address of From:, lower case; "" when From:
	// does not hold exactly one address (two From: fields, an address
	// list, or an RFC 2047 encoded word that decodes to several
	// addresses), and SenderErr says why. An answer goes to Sender alone.
	Sender    string
	SenderErr error
	// ListID is the List-Id's identifier without its brackets
	// ("linux-fsdevel.vger.kernel.org"); "" for mail sent straight to
	// patchbot. ListPost is List-Post's mailto address, if any.
	ListID, ListPost string
	// AutoSubmitted: Auto-Submitted is set and not "no" (RFC 3834): a
	// machine wrote the mail, and a machine must not answer it.
	AutoSubmitted bool
	// Recipients are the To: and Cc: addresses, each exactly one address
	// ("Name <addr>"), read from the raw fields: an encoded word is
	// decoded only inside a name, never split into more addresses. An
	// entry that is not an address is left out.
	Recipients []string
}

// OriginOf reads m's origin from m.Raw.
func OriginOf(m *Message) Origin {
	var o Origin
	h, err := textproto.ReadHeader(bufio.NewReader(bytes.NewReader(m.Raw)))
	if err != nil {
		o.SenderErr = fmt.Errorf("reading the header: %w", err)
		return o
	}
	var froms, rcpt []string
	fields := h.Fields()
	for fields.Next() {
		switch strings.ToLower(fields.Key()) {
		case "from":
			froms = append(froms, fields.Value())
		case "to", "cc":
			rcpt = append(rcpt, fields.Value())
		}
	}
	for _, v := range rcpt {
		o.Recipients = append(o.Recipients, addressList(v)...)
	}
	switch len(froms) {
	case 0:
		o.SenderErr = errors.New("no From: field")
	case 1:
		o.Sender, o.SenderErr = singleAddress(froms[0])
	default:
		o.SenderErr = fmt.Errorf("%d From: fields", len(froms))
	}
	if v := h.Get("List-Id"); v != "" {
		if i := strings.LastIndexByte(v, '<'); i >= 0 {
			v = v[i+1:]
		}
		o.ListID = strings.ToLower(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), ">")))
	}
	if v := h.Get("List-Post"); v != "" {
		for _, part := range strings.Split(v, ",") {
			part = strings.Trim(strings.TrimSpace(part), "<>")
			if a, ok := strings.CutPrefix(strings.ToLower(part), "mailto:"); ok {
				a, _, _ = strings.Cut(a, "?")
				o.ListPost = a
				break
			}
		}
	}
	if v := strings.ToLower(strings.TrimSpace(h.Get("Auto-Submitted"))); v != "" && !strings.HasPrefix(v, "no") {
		o.AutoSubmitted = true
	}
	return o
}

// singleAddress is the one address of a From: value, or why there is not
// exactly one. The value is read as written and again after decoding its
// RFC 2047 words: "=?UTF-8?Q?a@x=2C_b@y?=" is one word on the wire but
// names two addresses once decoded, and a mailer that decodes before
// parsing would answer both.
func singleAddress(v string) (string, error) {
	list, err := (&mail.AddressParser{WordDecoder: &mime.WordDecoder{CharsetReader: charsetReader}}).ParseList(v)
	if err != nil {
		return "", fmt.Errorf("From: %q is not an address: %w", v, err)
	}
	if len(list) != 1 {
		return "", fmt.Errorf("From: %q names %d addresses", v, len(list))
	}
	addr := strings.ToLower(list[0].Address)
	dec, err := (&mime.WordDecoder{CharsetReader: charsetReader}).DecodeHeader(v)
	if err != nil || dec == v {
		return addr, nil
	}
	if decoded, err := mail.ParseAddressList(dec); err == nil {
		if len(decoded) != 1 {
			return "", fmt.Errorf("From: %q decodes to %d addresses", v, len(decoded))
		}
	} else if n := strings.Count(dec, "@"); n > 1 {
		return "", fmt.Errorf("From: %q decodes to text with %d addresses in it", v, n)
	}
	return addr, nil
}

// addressList reads an address list field, entry by entry when the whole
// does not parse (kernel mail has odd entries), leaving out what is not
// one address.
func addressList(v string) []string {
	p := &mail.AddressParser{WordDecoder: &mime.WordDecoder{CharsetReader: charsetReader}}
	list, err := p.ParseList(v)
	if err != nil {
		list = nil
		for _, part := range splitTopLevel(v) {
			if a, err := p.Parse(part); err == nil {
				list = append(list, a)
			}
		}
	}
	out := make([]string, 0, len(list))
	for _, a := range list {
		out = append(out, a.String()) // the name quoted or encoded: it reads back as this one address
	}
	return out
}

// splitTopLevel splits at the commas outside quotes, comments and angle
// brackets.
func splitTopLevel(v string) []string {
	var parts []string
	depth, quoted, start := 0, false, 0
	for i := 0; i < len(v); i++ {
		switch c := v[i]; {
		case c == '\\' && quoted:
			i++
		case c == '"':
			quoted = !quoted
		case quoted:
		case c == '(' || c == '<':
			depth++
		case (c == ')' || c == '>') && depth > 0:
			depth--
		case c == ',' && depth == 0:
			parts = append(parts, v[start:i])
			start = i + 1
		}
	}
	return append(parts, v[start:])
}

// charsetReader lets the decoders read the charsets kernel mail uses; an
// unknown one is an error (the field is then read as written).
func charsetReader(charset string, input io.Reader) (io.Reader, error) {
	switch strings.ToLower(charset) {
	case "utf-8", "us-ascii", "utf8":
		return input, nil
	case "iso-8859-1", "latin1", "windows-1252":
		b, err := io.ReadAll(input)
		if err != nil {
			return nil, err
		}
		out, _ := fromLatin1(b, charset)
		return bytes.NewReader(out), nil
	}
	return nil, fmt.Errorf("unknown charset %q", charset)
}

// Domain is the domain of a bare address, lower case.
func Domain(addr string) string {
	if i := strings.LastIndexByte(addr, '@'); i >= 0 {
		return strings.ToLower(addr[i+1:])
	}
	return ""
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if strings.EqualFold(strings.TrimSpace(x), s) {
			return true
		}
	}
	return false
}
