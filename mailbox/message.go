// Package mailbox reads kernel mail from mbox files, Maildirs, IMAP and
// public-inbox (lore) archives, parses it, assembles patch series the way
// b4 does, and finds the commands people send to patchbot in replies.
//
// Parsing and assembly are pure: bytes in, values out, no disk or network.
package mailbox

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/mail"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/emersion/go-message"
	gomail "github.com/emersion/go-message/mail"
	"github.com/emersion/go-message/textproto"
)

// Message is one parsed mail.
type Message struct {
	MessageID  string   // without angle brackets
	InReplyTo  string   // first Message-ID of In-Reply-To, without brackets
	References []string // oldest first
	Subject    string   // decoded (RFC 2047)
	From       string   // "Name <addr>" as in the From: header
	Author     string   // From:, or the in-body "From:" line of a forwarded patch
	Date       time.Time
	To         []string
	Cc         []string

	// Body is the decoded text the author wrote (text/plain parts, not
	// attachments), including an inline diff.
	Body string
	// Diff is the patch carried by the mail: the inline diff in Body or a
	// text/x-patch / text/x-diff / *.patch attachment. Empty if none.
	Diff string
	// DiffAttached says the diff came from an attachment, not Body.
	DiffAttached bool
	BaseCommit   string // from a "base-commit: SHA" line

	Raw []byte // the mail as read, headers and all

	// Attestation is who sent the mail, as patchbot verified it
	// (Verifier.Verify), set by the caller that verified it or kept the
	// result; nil: not verified. Parsing never sets it.
	Attestation *Attestation

	// Warnings are soft problems: the message is still usable (unknown
	// charset kept as raw bytes, undecodable header word, ...).
	Warnings []string
}

// Identity is the mail's sender as verified: the attestation's, else the
// From: address, unverified.
func (m *Message) Identity() Identity {
	if m.Attestation != nil {
		if id := m.Attestation.Identity(); id.Address != "" {
			return id
		}
	}
	return Identity{Address: AddrOf(m.From)}
}

// ErrNotMail is returned for input that has no mail header at all.
var ErrNotMail = errors.New("not a mail: no header fields")

// Parse reads one RFC 5322 message. It never touches disk or network.
// A message with a broken part is still returned, with a warning, as long
// as its header can be read.
func Parse(r io.Reader) (*Message, error) {
	raw, err := io.ReadAll(r)
	if err != nil {
		return nil, fmt.Errorf("reading mail: %w", err)
	}
	return ParseBytes(raw)
}

// readers are reused across mails: a bufio.Reader is a 4 KiB buffer, and
// a 50,000-mail mbox would otherwise allocate that much per mail.
var readers = sync.Pool{New: func() any { return bufio.NewReaderSize(nil, 4096) }}

// ParseBytes is Parse for a mail already in memory; m.Raw aliases raw.
//
// A mail over DefaultLimits is refused with a *LimitError before it costs
// more than a scan.
func ParseBytes(raw []byte) (m *Message, err error) {
	if err := DefaultLimits.check(raw); err != nil {
		return nil, err
	}
	defer func() {
		// A parser bug met by hostile mail is that mail's error, not the
		// daemon's end.
		if r := recover(); r != nil {
			m, err = nil, fmt.Errorf("parsing mail: internal error: %v", r)
		}
	}()
	src := bytes.NewReader(raw)
	br := readers.Get().(*bufio.Reader)
	br.Reset(src)
	defer func() { br.Reset(nil); readers.Put(br) }()

	th, err := textproto.ReadHeader(br)
	if err != nil {
		return nil, fmt.Errorf("parsing mail header: %w", err)
	}
	if th.Len() == 0 {
		return nil, ErrNotMail
	}
	header := message.Header{Header: th}
	m = &Message{Raw: raw}
	m.readHeader(gomail.Header{Header: header})
	bodyStart := len(raw) - src.Len() - br.Buffered()
	if !m.readPlainBody(header, raw[bodyStart:]) {
		if mt, params, _ := header.ContentType(); strings.HasPrefix(mt, "multipart/") {
			if err := DefaultLimits.checkParts(raw[bodyStart:], params["boundary"]); err != nil {
				return nil, err
			}
		}
		ent, err := message.New(header, br)
		if ent == nil {
			return nil, fmt.Errorf("parsing mail body: %w", err)
		}
		if err := m.readBody(ent, err); err != nil {
			return nil, err
		}
	}
	m.Author = m.From
	if f := inBodyFrom(m.Body); f != "" {
		m.Author = f
	}
	m.BaseCommit = baseCommit(m.Body)
	return m, nil
}

func (m *Message) warn(format string, args ...any) {
	m.Warnings = append(m.Warnings, fmt.Sprintf(format, args...))
}

// dateLayout is what git send-email and most mailers write; other forms go
// through net/mail's slower list of layouts.
const dateLayout = "Mon, 2 Jan 2006 15:04:05 -0700"

func (m *Message) readHeader(h gomail.Header) {
	if id, err := h.MessageID(); err == nil {
		m.MessageID = id
	} else {
		m.MessageID = trimID(h.Get("Message-Id"))
		m.warn("Message-ID: %v", err)
	}
	if ids := msgIDs(h.Get("In-Reply-To")); len(ids) > 0 {
		m.InReplyTo = ids[0]
	}
	m.References = msgIDs(h.Get("References"))

	subj, replaced := decodeHeaderText(h.Get("Subject"))
	if replaced {
		m.warn("Subject: bytes that do not decode were replaced with U+FFFD")
	}
	m.Subject = collapseSpace(subj)

	m.From = decodeAddr(m, h, "From")
	if d, err := time.Parse(dateLayout, h.Get("Date")); err == nil {
		m.Date = d // the common form, without net/mail's many layouts
	} else if d, err := h.Date(); err == nil {
		m.Date = d
	} else if h.Has("Date") {
		m.warn("Date: %v", err)
	}
	m.To = decodeAddrList(m, h, "To")
	m.Cc = decodeAddrList(m, h, "Cc")
}

// readPlainBody is the fast path for most kernel mail: a single text/plain
// part in UTF-8 or ASCII without transfer encoding, where the body is the
// raw bytes after the header.
func (m *Message) readPlainBody(h message.Header, body []byte) bool {
	if v := h.Get("Content-Transfer-Encoding"); v != "" && !strings.EqualFold(v, "7bit") && !strings.EqualFold(v, "8bit") {
		return false
	}
	if ct := h.Get("Content-Type"); ct != "" {
		mediaType, params, err := h.ContentType()
		if err != nil || mediaType != "text/plain" {
			return false
		}
		if cs := strings.ToLower(params["charset"]); cs != "" && cs != "utf-8" && cs != "us-ascii" {
			return false
		}
	}
	if d := h.Get("Content-Disposition"); d != "" {
		if disp, _, _ := h.ContentDisposition(); disp == "attachment" {
			return false
		}
	}
	if utf8.Valid(body) {
		m.Body = string(body)
	} else {
		m.Body, _ = validUTF8(string(body))
		m.warn("body: bytes that are not UTF-8 were replaced with U+FFFD")
	}
	if bytes.IndexByte(body, '\r') >= 0 {
		m.Body = strings.ReplaceAll(m.Body, "\r\n", "\n")
	}
	m.Diff = findDiff(m.Body)
	return true
}

// readBody walks the MIME tree: text/plain parts that are not attachments
// make up Body; the first patch-looking attachment becomes Diff. Only a
// nesting deeper than DefaultLimits.MaxDepth is an error; a broken part
// is a warning.
func (m *Message) readBody(ent *message.Entity, rootErr error) error {
	var body strings.Builder
	var attached string
	var walk func(path []int, part *message.Entity, err error) error
	walk = func(path []int, part *message.Entity, err error) error {
		if err != nil && !message.IsUnknownCharset(err) && !message.IsUnknownEncoding(err) {
			m.warn("part %v: %v", path, err)
			return nil
		}
		if mr := part.MultipartReader(); mr != nil {
			if len(path) >= DefaultLimits.MaxDepth {
				return &LimitError{Limit: "MIME depth", Max: int64(DefaultLimits.MaxDepth), Got: int64(len(path) + 1)}
			}
			for i := 0; ; i++ {
				p, err := mr.NextPart()
				if err == io.EOF {
					return nil
				}
				if p == nil {
					m.warn("part %v: %v", append(path, i), err)
					return nil
				}
				if err := walk(append(path[:len(path):len(path)], i), p, err); err != nil {
					return err
				}
			}
		}
		mediaType, params, _ := part.Header.ContentType()
		if mediaType == "" {
			mediaType = "text/plain"
		}
		disp, dparams, _ := part.Header.ContentDisposition()
		name := dparams["filename"]
		if name == "" {
			name = params["name"]
		}
		isAttachment := disp == "attachment" || name != ""
		text, rerr := io.ReadAll(part.Body)
		if rerr != nil {
			m.warn("part %v: reading body: %v", path, rerr)
		}
		if err != nil {
			if conv, ok := fromLatin1(text, params["charset"]); ok && message.IsUnknownCharset(err) {
				text = conv
			} else {
				m.warn("part %v: %v (read as UTF-8)", path, err)
			}
		}
		if !utf8.Valid(text) {
			s, _ := validUTF8(string(text))
			text = []byte(s)
			m.warn("part %v: bytes that do not decode were replaced with U+FFFD", path)
		}
		patchLike := mediaType == "text/x-patch" || mediaType == "text/x-diff" ||
			strings.HasSuffix(name, ".patch") || strings.HasSuffix(name, ".diff")
		switch {
		case patchLike || (isAttachment && strings.HasPrefix(mediaType, "text/") && findDiff(string(text)) != ""):
			if attached == "" {
				attached = string(text)
			}
		case mediaType == "text/plain" && !isAttachment:
			if body.Len() > 0 && !strings.HasSuffix(body.String(), "\n") {
				body.WriteByte('\n')
			}
			body.Write(text)
		}
		return nil
	}
	if err := walk(nil, ent, rootErr); err != nil {
		return err
	}
	m.Body = strings.ReplaceAll(body.String(), "\r\n", "\n")
	m.Diff = findDiff(m.Body)
	if m.Diff == "" && attached != "" {
		attached = strings.ReplaceAll(attached, "\r\n", "\n")
		if d := findDiff(attached); d != "" {
			m.Diff, m.DiffAttached = d, true
		}
	}
	return nil
}

// fromLatin1 turns ISO-8859-1 and Windows-1252 text into UTF-8 (the two
// charsets besides UTF-8 that kernel mail still uses). Any other unknown
// charset is kept as raw bytes; the caller has already warned.
func fromLatin1(b []byte, charset string) ([]byte, bool) {
	switch strings.ToLower(charset) {
	case "iso-8859-1", "latin1", "iso_8859-1", "windows-1252", "cp1252", "iso-8859-15":
	default:
		return b, false
	}
	if utf8.Valid(b) {
		return b, true
	}
	out := make([]rune, 0, len(b))
	for _, c := range b {
		out = append(out, rune(c))
	}
	return []byte(string(out)), true
}

func decodeAddr(m *Message, h gomail.Header, key string) string {
	list := decodeAddrList(m, h, key)
	if len(list) == 0 {
		return ""
	}
	return list[0]
}

func decodeAddrList(m *Message, h gomail.Header, key string) []string {
	v := h.Get(key)
	if v == "" {
		return nil
	}
	if list, ok := simpleAddrList(v); ok {
		return list
	}
	addrs, err := h.AddressList(key)
	if err != nil || len(addrs) == 0 {
		// Kernel mail often has odd addresses ("a @ b . c"); keep the text.
		v, _ := decodeHeaderText(h.Get(key))
		v = collapseSpace(v)
		if v == "" {
			return nil
		}
		if err != nil {
			m.warn("%s: %v", key, err)
		}
		return []string{v}
	}
	out := make([]string, 0, len(addrs))
	for _, a := range addrs {
		name, _ := validUTF8(a.Name)
		out = append(out, formatAddr(name, a.Address))
	}
	return out
}

// simpleAddrList splits the common "Name <a@b>, c@d" form without the
// full RFC 5322 parser (a third of header parsing time on a big mbox). It
// declines anything with quotes, comments, groups or encoded words.
func simpleAddrList(v string) ([]string, bool) {
	if strings.ContainsAny(v, "\"()\\;:[]") || strings.Contains(v, "=?") {
		return nil, false
	}
	for i := 0; i < len(v); i++ {
		if v[i] >= 0x80 {
			return nil, false
		}
	}
	n := strings.Count(v, ",") + 1
	out := make([]string, 0, n)
	for part := range strings.SplitSeq(v, ",") {
		part = collapseSpace(part)
		if part == "" {
			continue
		}
		lt := strings.IndexByte(part, '<')
		switch {
		case lt < 0:
			if strings.ContainsAny(part, " <>") || strings.Count(part, "@") != 1 {
				return nil, false
			}
		case lt == 0:
			// "<a@b>" is written "a@b", as net/mail would.
			if !strings.HasSuffix(part, ">") || strings.Count(part, "<") != 1 {
				return nil, false
			}
			part = part[1 : len(part)-1]
		default:
			if !strings.HasSuffix(part, ">") || strings.Count(part, "<") != 1 || part[lt-1] != ' ' ||
				strings.Count(part[lt:], "@") != 1 || strings.ContainsAny(part[:lt], "@.<>") {
				return nil, false
			}
		}
		out = append(out, part)
	}
	return out, len(out) > 0
}

func formatAddr(name, addr string) string {
	if name == "" {
		return addr
	}
	return name + " <" + addr + ">"
}

// AddrOf returns the bare lower-case address of "Name <addr>" or "addr".
func AddrOf(s string) string {
	if a, err := mail.ParseAddress(s); err == nil {
		return strings.ToLower(a.Address)
	}
	if i := strings.LastIndexByte(s, '<'); i >= 0 {
		s = s[i+1:]
		if j := strings.IndexByte(s, '>'); j >= 0 {
			s = s[:j]
		}
	}
	return strings.ToLower(strings.TrimSpace(s))
}

// msgIDs extracts every <id> from a References or In-Reply-To header. It is
// lenient: headers in the wild carry comments and missing brackets.
func msgIDs(v string) []string {
	var ids []string
	for {
		i := strings.IndexByte(v, '<')
		if i < 0 {
			break
		}
		j := strings.IndexByte(v[i:], '>')
		if j < 0 {
			break
		}
		if id := strings.TrimSpace(v[i+1 : i+j]); id != "" {
			ids = append(ids, id)
		}
		v = v[i+j+1:]
	}
	if len(ids) == 0 {
		if f := strings.Fields(v); len(f) == 1 && strings.Contains(f[0], "@") {
			ids = append(ids, f[0])
		}
	}
	return ids
}

func trimID(s string) string {
	s = strings.TrimSpace(s)
	s = strings.TrimPrefix(s, "<")
	return strings.TrimSuffix(s, ">")
}

func collapseSpace(s string) string {
	return strings.Join(strings.Fields(s), " ")
}

// inBodyFrom returns the author given by a "From:" line at the very top of
// the body, as git format-patch writes it when the sender is not the author.
func inBodyFrom(body string) string {
	for body != "" {
		line, rest, _ := strings.Cut(body, "\n")
		line = strings.TrimRight(line, "\r ")
		if line == "" {
			body = rest
			continue
		}
		if v, ok := strings.CutPrefix(line, "From:"); ok {
			v, _ = decodeHeaderText(strings.TrimSpace(v))
			return collapseSpace(v)
		}
		return ""
	}
	return ""
}

func baseCommit(body string) string {
	for line := range strings.Lines(body) {
		if v, ok := strings.CutPrefix(line, "base-commit:"); ok {
			if f := strings.Fields(v); len(f) > 0 {
				return f[0]
			}
		}
	}
	return ""
}
