package mailbox

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"mime"
	"net/mail"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"
	"unicode"
)

// Series is one posted version of a patch series, as b4 would apply it.
// An incomplete series is still returned: Complete is false, Missing holds
// the absent indexes and Reason says why, so that the caller can answer
// "patch 2/3 never arrived" instead of failing.
type Series struct {
	Subject  string   // the cover letter's subject, else the first patch's
	Title    string   // Subject without reply markers and tags
	Version  int      // vN, 1 if untagged
	Total    int      // n of m/n; 1 for a single untagged patch
	Complete bool     // every patch 1..Total is present
	Missing  []int    // absent indexes, ascending
	Cover    *Message // the 0/n mail, nil if none
	Patches  []*Patch // in index order, only those present
	Reason   string   // why the series is incomplete or was patched up; empty if neither
	Author   string   // sender of the cover letter or of the first patch
	// Identity is that sender as verified (Message.Identity): every patch
	// of a series has the same identity's key, since Assemble keys series
	// by it.
	Identity Identity
	Date     time.Time // of the cover letter or of the first patch
	To, Cc   []string  // recipients of the cover letter or first patch: the lists to answer on
	Base     string    // base-commit given in the cover letter or a patch, if any
	// ThreadID is the Message-ID that starts the thread the series lives in.
	ThreadID string
	// CoverTrailers were given in replies to the cover letter. As b4 am
	// (0.13 and later) does, they are also in every patch's Trailers.
	CoverTrailers []Trailer
	// PartialReroll: some patches come from an earlier version, because the
	// newest version resent only the changed ones.
	PartialReroll bool
}

// Patch is one mail of a series that carries a diff.
type Patch struct {
	Index     int       `json:"index"`
	Subject   string    `json:"subject"`
	MessageID string    `json:"message_id"`
	Author    string    `json:"author"`
	Files     []string  `json:"files"`
	Trailers  []Trailer `json:"trailers"`
	// Version differs from the series' version when a partial reroll took
	// this patch from an earlier version.
	Version int `json:"version"`
	// Corrupt says why the diff cannot apply as it stands (a malformed
	// hunk header, hunk lines that do not match its counts), or is empty.
	// Such a patch stays in the series: it did arrive, and the author is
	// to be told it does not apply, and why.
	Corrupt string `json:"corrupt,omitempty"`
	// Attestation is who signed the patch's mail, as b4 am shows it under
	// the patch ("✓ Signed: DKIM/linux.dev"); empty when the mail was not
	// verified.
	Attestation []Check  `json:"attestation,omitempty"`
	Diff        string   `json:"-"`
	Raw         []byte   `json:"-"` // a mail git am accepts, follow-up trailers included
	Message     *Message `json:"-"`
}

// Trailer is a "Reviewed-by: A <a@b>" line from a follow-up reply.
type Trailer struct {
	Name  string `json:"name"`
	Value string `json:"value"`
	// MessageID of the reply that gave it.
	MessageID string `json:"message_id"`
}

func (t Trailer) String() string { return t.Name + ": " + t.Value }

// MarshalJSON writes the series in the form `patchbot series --json`
// documents: the cover letter as its Message-ID.
func (s *Series) MarshalJSON() ([]byte, error) {
	cover := ""
	if s.Cover != nil {
		cover = s.Cover.MessageID
	}
	missing := s.Missing
	if missing == nil {
		missing = []int{}
	}
	patches := s.Patches
	if patches == nil {
		patches = []*Patch{}
	}
	coverTrailers := s.CoverTrailers
	if coverTrailers == nil {
		coverTrailers = []Trailer{}
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false) // keep "Name <addr>" readable
	err := enc.Encode(struct {
		Subject  string   `json:"subject"`
		Title    string   `json:"title"`
		Version  int      `json:"version"`
		Total    int      `json:"total"`
		Complete bool     `json:"complete"`
		Missing  []int    `json:"missing"`
		Cover    string   `json:"cover"`
		Patches  []*Patch `json:"patches"`
		Reason   string   `json:"reason,omitempty"`
		Author   string   `json:"author"`
		Verified string   `json:"verified,omitempty"` // how the author was verified: "DKIM/linux.dev"
		ThreadID string   `json:"thread_id"`
		To       []string `json:"to,omitempty"`
		Cc       []string `json:"cc,omitempty"`
		Base     string   `json:"base_commit,omitempty"`
		// Also in each patch's trailers, as b4 am applies them.
		CoverTrailers []Trailer `json:"cover_trailers"`
	}{s.Subject, s.Title, s.Version, s.Total, s.Complete, missing, cover, patches,
		s.Reason, s.Author, s.Identity.Via, s.ThreadID, s.To, s.Cc, s.Base, coverTrailers})
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), err
}

// AmName is the file name b4 am -o gives the series' mbox:
// [vN_]YYYYMMDD_local_title.mbx, from the date and sender of the cover
// letter (else of the first patch), the local part of the sender's
// address and the title, every run of other than letters, digits and
// '_' made one '_', lower case, at most 100 characters before ".mbx".
func (s *Series) AmName() string {
	head := s.Cover
	if head == nil && len(s.Patches) > 0 {
		head = s.Patches[0].Message
	}
	if head == nil {
		return "undefined.mbx"
	}
	local, _, _ := strings.Cut(AddrOf(head.From), "@")
	date := head.Date
	if date.IsZero() {
		date = time.Now()
	}
	var b strings.Builder
	gap := false
	for _, r := range date.Format("20060102") + "_" + local + "_" + ParseSubject(head.Subject).Title {
		if r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r) {
			if gap && b.Len() > 0 {
				b.WriteByte('_')
			}
			gap = false
			b.WriteRune(unicode.ToLower(r))
			continue
		}
		gap = true
	}
	slug := strings.Trim(b.String(), "_")
	if s.Version != 1 {
		slug = fmt.Sprintf("v%d_%s", s.Version, slug)
	}
	if r := []rune(slug); len(r) > 100 {
		slug = string(r[:100])
	}
	return slug + ".mbx"
}

// WriteAmFile writes the am-ready mbox (trailers applied, as b4 am -o
// does) into dir, made if need be, as AmName, and returns its path.
func (s *Series) WriteAmFile(dir string) (string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("writing the series mbox: %w", err)
	}
	path := filepath.Join(dir, s.AmName())
	var buf bytes.Buffer
	if err := s.WriteMbox(&buf); err != nil {
		return "", err
	}
	if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
		return "", fmt.Errorf("writing the series mbox: %w", err)
	}
	return path, nil
}

// Files lists every file the series touches, sorted, each once.
func (s *Series) Files() []string {
	seen := map[string]bool{}
	var out []string
	for _, p := range s.Patches {
		for _, f := range p.Files {
			if !seen[f] {
				seen[f] = true
				out = append(out, f)
			}
		}
	}
	sort.Strings(out)
	return out
}

// WriteMbox writes the series' patches, in order, as an mboxrd file that
// `git am -3` applies.
func (s *Series) WriteMbox(w io.Writer) error {
	return WriteMbox(w, s.Mails())
}

// Mails are the series' patches as the mails git am applies, in order.
func (s *Series) Mails() [][]byte {
	out := make([][]byte, len(s.Patches))
	for i, p := range s.Patches {
		out[i] = p.Raw
	}
	return out
}

// WriteMbox writes mails, in order, as an mboxrd file (what git am and
// patchbot run --mbox read).
func WriteMbox(w io.Writer, mails [][]byte) error {
	for i, m := range mails {
		if err := WriteMboxEntry(w, m); err != nil {
			return fmt.Errorf("writing mail %d of %d: %w", i+1, len(mails), err)
		}
	}
	return nil
}

// SaveMbox keeps mails, in order, as an mboxrd file at path, readable by
// patchbot alone: a run directory's series.mbox.
func SaveMbox(path string, mails [][]byte) error {
	var buf bytes.Buffer
	if err := WriteMbox(&buf, mails); err != nil {
		return err
	}
	if err := os.WriteFile(path, buf.Bytes(), 0o600); err != nil {
		return fmt.Errorf("writing %s: %w", filepath.Base(path), err)
	}
	return nil
}

// Tags are the tags of the series' subjects (the cover letter's, then the
// first patch's) that are neither PATCH, RFC, vN nor m/n: "net-next",
// "vfs.fixes". A tag may name the tree the series is for.
func (s *Series) Tags() []string {
	subjects := []string{s.Subject}
	if len(s.Patches) > 0 {
		subjects = append(subjects, s.Patches[0].Subject)
	}
	var out []string
	seen := map[string]bool{}
	for _, subj := range subjects {
		for _, t := range ParseSubject(subj).Prefixes {
			if k := strings.ToLower(t); !seen[k] {
				seen[k] = true
				out = append(out, t)
			}
		}
	}
	return out
}

// Subjects are the patches' subjects as posted, in order.
func (s *Series) Subjects() []string {
	out := make([]string, len(s.Patches))
	for i, p := range s.Patches {
		out[i] = p.Subject
	}
	return out
}

// Titles are the subjects' titles, without reply markers and tags, in
// order: "" where a subject has none.
func Titles(subjects []string) []string {
	out := make([]string, len(subjects))
	for i, s := range subjects {
		out[i] = ParseSubject(s).Title
	}
	return out
}

// amMail builds the mail git am gets for a patch: a clean single-part
// UTF-8 text with the author in From:, follow-up trailers inserted before
// the "---" line, and an attached diff inlined. Its subject is the one b4
// am writes: [PATCH], RFC when the subject had it, vN when the subject
// tagged a version (or the patch came from an earlier version in a
// partial reroll: the series' version), m/n when it had a counter; other
// tags (RESEND, a tree's name) are left out, as b4 leaves them.
func amMail(m *Message, sub Subject, version int, rerolled bool, trailers []Trailer) []byte {
	body := dropInBodyFrom(m.Body)
	if m.DiffAttached {
		if !strings.HasSuffix(body, "\n") && body != "" {
			body += "\n"
		}
		if !strings.Contains(body, "\n---\n") && !strings.HasPrefix(body, "---\n") {
			body += "---\n"
		}
		body += m.Diff
	}
	if len(trailers) > 0 {
		body = insertTrailers(body, trailers)
	}
	// The tags as the mail gave them (assembly numbers an untagged patch
	// 1/1 and may give it its cover letter's version: b4 writes neither).
	given := ParseSubject(m.Subject)
	tag := "PATCH"
	if given.RFC {
		tag += " RFC"
	}
	switch {
	case rerolled:
		tag += fmt.Sprintf(" v%d", version)
	case given.Versioned:
		tag += fmt.Sprintf(" v%d", given.Version)
	}
	if given.Counted() {
		tag += fmt.Sprintf(" %d/%d", given.Index, given.Total)
	}
	var b strings.Builder
	b.Grow(len(body) + 512)
	b.WriteString("From: " + encodeAddr(m.Author) + "\n")
	if !m.Date.IsZero() {
		b.WriteString("Date: " + m.Date.Format(time.RFC1123Z) + "\n")
	}
	b.WriteString("Subject: " + encodeWord("["+tag+"] "+sub.Title) + "\n")
	if m.MessageID != "" {
		b.WriteString("Message-ID: <" + m.MessageID + ">\n")
	}
	b.WriteString("MIME-Version: 1.0\nContent-Type: text/plain; charset=UTF-8\nContent-Transfer-Encoding: 8bit\n\n")
	b.WriteString(body)
	if !strings.HasSuffix(body, "\n") {
		b.WriteByte('\n')
	}
	return []byte(b.String())
}

func encodeAddr(s string) string {
	if a, err := mail.ParseAddress(s); err == nil {
		return a.String() // RFC 2047-encodes a non-ASCII name
	}
	return encodeWord(s)
}

func encodeWord(s string) string {
	for i := 0; i < len(s); i++ {
		if s[i] >= 0x80 {
			return mime.QEncoding.Encode("utf-8", s)
		}
	}
	return s
}

// dropInBodyFrom removes the leading "From:" line (and the blank after it)
// that format-patch adds when sender and author differ; the author goes to
// the From: header instead.
func dropInBodyFrom(body string) string {
	trimmed := strings.TrimLeft(body, "\n")
	if !strings.HasPrefix(trimmed, "From:") {
		return body
	}
	_, rest, _ := strings.Cut(trimmed, "\n")
	return strings.TrimLeft(rest, "\n")
}

// insertTrailers puts trailer lines at the end of the commit message: before
// the first "---" line, or before the diff if there is none.
func insertTrailers(body string, trailers []Trailer) string {
	cut := -1
	pos := 0
	for line := range strings.Lines(body) {
		l := strings.TrimRight(line, "\r\n")
		if l == "---" || strings.HasPrefix(l, "diff --git ") {
			cut = pos
			break
		}
		pos += len(line)
	}
	if cut < 0 {
		cut = len(body)
	}
	var add strings.Builder
	msg := body[:cut]
	if !strings.HasSuffix(msg, "\n") && msg != "" {
		add.WriteByte('\n')
	}
	for _, t := range trailers {
		line := t.String()
		if strings.Contains(msg, "\n"+line+"\n") || strings.HasPrefix(msg, line+"\n") {
			continue // already there
		}
		add.WriteString(line + "\n")
	}
	return msg + add.String() + body[cut:]
}
