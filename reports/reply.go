package reports

import (
	"bytes"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"errors"
	"fmt"
	"net/mail"
	"strings"
	"text/template"
	"time"
	"unicode/utf8"

	gomail "github.com/emersion/go-message/mail"

	"github.com/patchbot/patchbot/internal/inert"
	"github.com/patchbot/patchbot/judge"
	"github.com/patchbot/patchbot/vmrunner"
)

//go:embed templates/*.tmpl
var templateFS embed.FS

var replyTemplate = template.Must(template.New("reply.txt.tmpl").Funcs(template.FuncMap{
	"wrap":   func(s string) string { return wrap(s, 72) },
	"indent": indent,
	"quote":  quote,
	"short":  short,
	"join":   strings.Join,
	"shell":  shellLines,
	"url":    shortURL,
	"sub":    func(a, b int) int { return a - b },
	"field":  field,
	"list":   listLines,
	"icountNs": func(clock string) int {
		if shift, ok := vmrunner.ICountShiftOf(clock); ok {
			return 1 << shift
		}
		return 0
	},
}).ParseFS(templateFS, "templates/*.tmpl"))

// ReplyOptions are the configurable parts of a reply.
type ReplyOptions struct {
	// From is the sender, e.g. "patchbot <patchbot@example.org>".
	From string `yaml:"from"`
	// NoListCc leaves the series' mailing lists off Cc (they are Cc'd by
	// default, as a reviewer's reply would be).
	NoListCc bool `yaml:"no_list_cc"`
	// ExtraCc is added to every reply.
	ExtraCc []string `yaml:"extra_cc"`
}

// Header is the reply's envelope and threading.
type Header struct {
	From       string
	To         []string
	Cc         []string
	Subject    string
	Date       time.Time
	MessageID  string // without angle brackets
	InReplyTo  string // without angle brackets
	References []string
}

// Reply is a rendered reply mail.
type Reply struct {
	Header Header
	Body   string // plain text, LF line endings, lines <= MaxColumns
	// Folded lists the lines (1-based, as the template wrote them) that
	// were wider than MaxColumns and were folded at a space: a template
	// that forgot to wrap a value. The reply still goes out (a finished
	// run is not lost to a layout slip); tests require none.
	Folded []int `json:"-"`
	// Full is the whole body when Body had to be cut at MaxBody (kept as
	// FullReplyFile with the run); empty otherwise.
	Full string `json:"-"`
	// Finding is what the run found, for whom the reply goes to; empty
	// for a short answer.
	Finding Finding `json:"-"`
}

// ErrNotPatchFault is returned for a run that failed through no fault of
// the patch (the base kernel did not build or boot): such a run is retried
// or reported to the operator, never mailed to the author.
var ErrNotPatchFault = errors.New("the failure is not the patch's fault")

// Render composes the reply to run. It is a pure function of its inputs:
// everything it says comes from run and opt (the Message-ID is run.ReplyID,
// or derived from the run), so that rendering twice gives the same mail
// and the outbox can recognise it.
func Render(run *Run, opt ReplyOptions) (*Reply, error) {
	if run.Thread.MessageID == "" {
		return nil, errors.New("rendering reply: the run names no message to reply to")
	}
	if run.Thread.Author == "" {
		return nil, errors.New("rendering reply: the run names no author")
	}
	if run.Finished.IsZero() {
		return nil, errors.New("rendering reply: the run has no finish time (it dates the reply)")
	}
	if opt.From == "" {
		return nil, errors.New("rendering reply: no From address configured")
	}
	from, err := mail.ParseAddress(opt.From)
	if err != nil {
		return nil, fmt.Errorf("rendering reply: From %q: %w", opt.From, err)
	}
	if f := run.Failure; f != nil && f.Kernel != "" && f.Kernel != "patched" {
		return nil, fmt.Errorf("rendering reply: the %s kernel failed at %s: %w", f.Kernel, f.Stage, ErrNotPatchFault)
	}

	data := replyData{Run: run, Intro: "Hello,", Base: baseText(run), Builds: buildsText(run),
		Bisection: bisectText(run), Previous: previousText(run), Attest: attestText(run),
		WarningsLead: warningsLead(run), Warnings: warningsText(run), Exercised: exercisedText(run)}
	var finding Finding
	if run.Failure == nil {
		c, err := judge.Compare(run.Base, run.Patched, run.Options.Options)
		if err != nil {
			return nil, fmt.Errorf("rendering reply: %w", err)
		}
		finding = findingOf(run, c)
		c.AA = run.PatchedCommit == run.BaseCommit
		data.Verdict = exercisedLead(run, Verdict(c))
		data.Headline = Headline(c)
		data.Notes = Notes(c)
		data.RunsLine = RunsLine(c)
		// A regression's reply suggests the tags for the fix, Closes:
		// pointing at this reply on lore.
		data.Tags = Tags(c, from.String(), "https://lore.kernel.org/r/"+replyID(run, from.Address))
		var buf bytes.Buffer
		if err := WritePrimary(&buf, c); err != nil {
			return nil, err
		}
		data.Primary = strings.TrimRight(buf.String(), "\n")
		buf.Reset()
		commits := Commits{Base: run.BaseCommit, BaseTitle: run.BaseTitle,
			Patched: run.PatchedCommit, PatchedTitle: stripTags(run.Thread.Subject)}
		if c.AA {
			commits.PatchedTitle = "the base again: an A/A run"
		}
		if err := WriteTable(&buf, c, commits, run.Options.Noise()); err != nil {
			return nil, err
		}
		data.Table = buf.String()
		buf.Reset()
		if err := WriteGrids(&buf, c); err != nil {
			return nil, err
		}
		if err := WriteCurves(&buf, c); err != nil {
			return nil, err
		}
		data.Extra = strings.TrimRight(buf.String(), "\n")
		data.Model = modelLines(run.Model, c)
	} else {
		data.Verdict = failureVerdict(run)
		finding = findingOf(run, nil)
		if t := run.Failure.Trouble; t != nil {
			data.WarningsLead = ""
			data.Trouble, data.Bisection = troubleEvidence(t), troubleBisectText(run)
		}
	}

	var body bytes.Buffer
	if err := replyTemplate.Execute(&body, data); err != nil {
		return nil, fmt.Errorf("rendering reply: %w", err)
	}
	// Whatever a stranger's text slipped in (a subject, a tree's title),
	// no control character reaches a mail reader.
	text, folded := fold(tidy(inert.String(body.String())))
	full := ""
	if len(text) > MaxBody {
		full, text = text, cutBody(text, run.ResultsURL)
	}

	h := Header{
		From:      from.String(),
		To:        []string{run.Thread.Author},
		Subject:   ReplySubject(run.Thread.Subject),
		Date:      run.Finished.UTC(),
		InReplyTo: trimID(run.Thread.MessageID),
	}
	for _, id := range run.Thread.References {
		h.References = append(h.References, trimID(id))
	}
	if len(h.References) == 0 || h.References[len(h.References)-1] != h.InReplyTo {
		h.References = append(h.References, h.InReplyTo)
	}
	h.Cc = append(h.Cc, run.Thread.Cc...)
	if !opt.NoListCc {
		h.Cc = append(h.Cc, run.Thread.Lists...)
	}
	h.Cc = append(h.Cc, opt.ExtraCc...)
	h.Cc = dedupe(h.Cc, h.To)
	h.MessageID = replyID(run, from.Address)
	return &Reply{Header: h, Body: text, Folded: folded, Full: full, Finding: finding}, nil
}

// MaxBody caps a reply's body: what is past it is in FullReplyFile, which
// the reply names.
const MaxBody = 64 << 10

// FullReplyFile is the whole reply, in the run directory, when the mail
// had to be cut.
const FullReplyFile = "reply-full.txt"

// cutBody keeps the lines of text that fit in MaxBody with the note that
// says where the rest is.
func cutBody(text, resultsURL string) string {
	where := "in the run's directory"
	if resultsURL != "" {
		where = "with the run's files: " + resultsURL
	}
	note := fmt.Sprintf("\n[patchbot: this reply is cut at %d KiB; the whole of it (%d bytes) is %s %s]\n",
		MaxBody>>10, len(text), FullReplyFile, where)
	keep := text[:MaxBody-len(note)]
	if i := strings.LastIndexByte(keep, '\n'); i >= 0 {
		keep = keep[:i+1]
	}
	return keep + wrap(strings.TrimSpace(note), 72) + "\n"
}

// Quoted output (compiler, console, git) is capped and set off: at most
// maxQuoteLines lines and maxQuoteBytes bytes, each line behind
// quotePrefix. The "|" keeps every line inert: b4 (am -S) and other
// trailer parsers take "  Reviewed-by: x" for a trailer, leading blanks
// and all, but no line that starts with a "|".
const (
	maxQuoteLines = 80
	maxQuoteBytes = 12 << 10
	quotePrefix   = "  | "
)

// quote sets s off as quoted output: escaped, capped, each line behind
// quotePrefix, and broken to fit MaxColumns.
func quote(s string) string {
	lines := strings.Split(strings.TrimRight(inert.String(s), "\n"), "\n")
	n, size := 0, 0
	for ; n < len(lines) && n < maxQuoteLines; n++ {
		if size+len(lines[n])+1 > maxQuoteBytes {
			break
		}
		size += len(lines[n]) + 1
	}
	kept := strings.Join(lines[:n], "\n")
	if n < len(lines) {
		kept += fmt.Sprintf("\n[... %d more lines, with the run's files]", len(lines)-n)
	}
	return indent(quotePrefix, kept)
}

// replyID is the reply's Message-ID: the run's own, or one derived from
// the run.
func replyID(run *Run, from string) string {
	if id := trimID(run.ReplyID); id != "" {
		return id
	}
	return messageID(run, from)
}

type replyData struct {
	Run     *Run
	Intro   string
	Verdict string
	// Headline is the robot's opening line for the top primary change.
	Headline string
	// Primary lists each primary metric with its interval and state.
	Primary  string
	Notes    []string
	Tags     []string
	RunsLine string
	Table    string
	Extra    string
	Model    string
	// The base and the per-patch parts (perpatch.go).
	Base, Builds, Bisection, Previous string
	// Attest is who sent each patch (attest.go).
	Attest string
	// The kernel's health (health.go): the trouble's report and trace,
	// the sentence on new warnings ahead of the verdict and their list,
	// and whether the suites ran the changed code.
	Trouble, WarningsLead, Warnings, Exercised string
}

func failureVerdict(run *Run) string {
	if noBase(run) {
		return noBaseVerdict(run)
	}
	f := run.Failure
	patch := ""
	if f.Patch != "" {
		patch = " (" + f.Patch + ")"
	}
	if f.Trouble != nil {
		return troubleVerdict(run, f.Trouble, patch)
	}
	base := short(run.BaseCommit)
	if run.BaseTitle != "" {
		base += " (\"" + run.BaseTitle + "\")"
	}
	detail := "."
	if d := strings.TrimSuffix(strings.TrimSpace(f.Detail), "."); d != "" {
		detail = ": " + d + "."
	}
	switch f.Stage {
	case judge.StageBase:
		return "The series was not tested: the base asked for is unknown" + detail
	case judge.StageSeries:
		return "The series was not tested" + detail
	case judge.StageApply:
		return fmt.Sprintf("The patch%s does not apply to %s%s", patch, base, detail)
	case judge.StageBuild:
		return fmt.Sprintf("The kernel does not build with the patch%s applied to %s%s", patch, base, detail)
	case judge.StageBoot:
		return fmt.Sprintf("The kernel with the patch%s applied does not boot%s", patch, detail)
	default:
		return fmt.Sprintf("A test suite crashed in the kernel with the patch%s applied%s", patch, detail)
	}
}

// modelLines sets the reference model's predicted wake-ups per release
// beside the measured ones, per workload that measured them.
func modelLines(m *Model, c *judge.Comparison) string {
	if m == nil {
		return ""
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%-28s %10s %10s\n", "wake-ups per release", "measured", "model")
	rows := m.Rows(c)
	for _, r := range rows {
		label := fmt.Sprintf("%s, %s (%s)", r.Workload, r.Kernel, r.Policy)
		if utf8.RuneCountInString(label) > 28 {
			// A long label gets lines of its own above its numbers.
			b.WriteString(wrap(label, MaxColumns) + "\n")
			label = ""
		}
		fmt.Fprintf(&b, "%-28s %10s %10s\n", label, short3(r.Measured), r.PredictedText())
	}
	if len(rows) == 0 {
		fmt.Fprintf(&b, "(no workload measured %s)\n", m.MetricName())
	}
	if m.Check != "" {
		b.WriteString("\n" + wrap("Model checker, "+m.PatchedPolicy+" policy: "+m.Check, 72) + "\n")
	}
	return strings.TrimRight(b.String(), "\n")
}

// ReplySubject is a reply's subject: "Re: " prefixed once, its control
// characters escaped as the body's are (internal/inert), so that a
// subject's escape sequences reach no mail reader: a stranger wrote it.
func ReplySubject(s string) string {
	s = strings.TrimSpace(inert.Line(s))
	if strings.HasPrefix(strings.ToLower(s), "re:") {
		return s
	}
	return "Re: " + s
}

// stripTags drops leading "[PATCH ...]" style tags from a subject.
func stripTags(s string) string {
	s = strings.TrimSpace(s)
	for strings.HasPrefix(s, "[") {
		i := strings.Index(s, "]")
		if i < 0 {
			break
		}
		s = strings.TrimSpace(s[i+1:])
	}
	return s
}

func trimID(id string) string { return strings.Trim(strings.TrimSpace(id), "<>") }

func dedupe(list, exclude []string) []string {
	seen := map[string]bool{}
	for _, e := range exclude {
		if a, err := mail.ParseAddress(e); err == nil {
			seen[strings.ToLower(a.Address)] = true
		}
	}
	var out []string
	for _, e := range list {
		key := strings.ToLower(e)
		if a, err := mail.ParseAddress(e); err == nil {
			key = strings.ToLower(a.Address)
		}
		if !seen[key] {
			seen[key] = true
			out = append(out, e)
		}
	}
	return out
}

// messageID derives the reply's Message-ID from what the reply is about,
// so that a re-render of the same run is recognisably the same mail.
func messageID(run *Run, from string) string {
	domain := "patchbot.invalid"
	if i := strings.LastIndex(from, "@"); i >= 0 {
		domain = from[i+1:]
	}
	h := sha256.New()
	fmt.Fprintf(h, "%s\x00%s\x00%s\x00%s", trimID(run.Thread.MessageID), run.BaseCommit,
		run.PatchedCommit, run.Finished.UTC().Format(time.RFC3339Nano))
	return "patchbot-" + hex.EncodeToString(h.Sum(nil))[:24] + "@" + domain
}

// indent prefixes every line of s with prefix, hard-breaking lines that
// would pass MaxColumns (compiler and console lines can be long).
func indent(prefix, s string) string {
	var out []string
	width := MaxColumns - utf8.RuneCountInString(prefix)
	for _, line := range strings.Split(strings.TrimRight(s, "\n"), "\n") {
		line = strings.TrimRight(strings.ReplaceAll(line, "\t", "        "), " ")
		r := []rune(line)
		for len(r) > width {
			cut := width
			// Prefer breaking at a space in the second half of the line.
			for i := width; i > width/2; i-- {
				if r[i] == ' ' {
					cut = i
					break
				}
			}
			out = append(out, prefix+string(r[:cut]))
			r = r[cut:]
		}
		out = append(out, strings.TrimRight(prefix+string(r), " "))
	}
	return strings.Join(out, "\n")
}

// shortURL shortens a full commit hash at the end of a URL to 12 digits,
// which GitHub resolves as well, so that the link fits a mail line.
func shortURL(u string) string {
	i := strings.LastIndex(u, "/commit/")
	if i < 0 {
		return u
	}
	sha := u[i+len("/commit/"):]
	if len(sha) == 40 && strings.Trim(sha, "0123456789abcdef") == "" {
		return u[:i+len("/commit/")+12]
	}
	return u
}

// unbreakable reports whether a line may pass MaxColumns because it ends in
// something that cannot be broken: a URL, or a single word (a path).
// fold breaks each line wider than MaxColumns at its last space that
// fits, going on under the line's own indentation; a line that cannot be
// broken (one long word, a URL) stays whole. It returns the lines folded.
func fold(text string) (string, []int) {
	var out []string
	var folded []int
	for i, line := range strings.Split(text, "\n") {
		if utf8.RuneCountInString(line) <= MaxColumns || unbreakable(line) {
			out = append(out, line)
			continue
		}
		folded = append(folded, i+1)
		body := strings.TrimLeft(line, " ")
		pad := strings.Repeat(" ", len(line)-len(body))
		w := MaxColumns - len(pad)
		if w < 20 {
			pad, w = "", MaxColumns
		}
		out = append(out, pad+strings.ReplaceAll(wrap(body, w), "\n", "\n"+pad))
	}
	return strings.Join(out, "\n"), folded
}

func unbreakable(line string) bool {
	f := strings.Fields(strings.TrimSuffix(line, " \\")) // a shell continuation
	return len(f) == 1 || (len(f) > 0 && strings.Contains(f[len(f)-1], "://"))
}

// shellLines writes a command as "  $ cmd", continued with backslashes
// where it would pass MaxColumns, so that it can be pasted as it is.
func shellLines(cmd string) string {
	const first, cont = "  $ ", "      "
	var lines []string
	line := first
	for _, word := range shellWords(cmd) {
		if line != first && line != cont && utf8.RuneCountInString(line)+1+len(word)+2 > MaxColumns {
			lines = append(lines, line+" \\")
			line = cont
		}
		if line != first && line != cont {
			line += " "
		}
		line += word
	}
	return strings.Join(append(lines, line), "\n")
}

// shellWords splits a command line at the blanks outside single quotes
// (ShellQuote's quoting), so that a line is only ever continued between
// arguments.
func shellWords(cmd string) []string {
	var words []string
	var cur strings.Builder
	quoted := false
	for _, r := range cmd {
		switch {
		case r == '\'':
			quoted = !quoted
			cur.WriteRune(r)
		case !quoted && (r == ' ' || r == '\t'):
			if cur.Len() > 0 {
				words = append(words, cur.String())
				cur.Reset()
			}
		default:
			cur.WriteRune(r)
		}
	}
	if cur.Len() > 0 {
		words = append(words, cur.String())
	}
	return words
}

// tidy squeezes runs of blank lines (left by template conditionals) to one
// and ends the text with a single newline.
func tidy(s string) string {
	lines := strings.Split(s, "\n")
	var out []string
	blank := false
	for _, l := range lines {
		l = strings.TrimRight(l, " ")
		if l == "" {
			if !blank && len(out) > 0 {
				out = append(out, "")
			}
			blank = true
			continue
		}
		blank = false
		out = append(out, l)
	}
	for len(out) > 0 && out[len(out)-1] == "" {
		out = out[:len(out)-1]
	}
	return strings.Join(out, "\n") + "\n"
}

// Bytes is the reply as an RFC 5322 message with CRLF line endings.
func (r *Reply) Bytes() ([]byte, error) {
	var h gomail.Header
	h.SetContentType("text/plain", map[string]string{"charset": "utf-8"})
	set := func(key string, addrs []string) error {
		if len(addrs) == 0 {
			return nil
		}
		list, err := mail.ParseAddressList(strings.Join(addrs, ", "))
		if err != nil {
			return fmt.Errorf("encoding reply: %s: %w", key, err)
		}
		var out []*gomail.Address
		for _, a := range list {
			out = append(out, (*gomail.Address)(a))
		}
		h.SetAddressList(key, out)
		return nil
	}
	// go-message writes fields last-added first: add in reverse order.
	enc := "7bit"
	for _, c := range r.Body {
		if c >= 0x80 {
			enc = "8bit"
			break
		}
	}
	h.Set("Content-Transfer-Encoding", enc)
	h.Set("MIME-Version", "1.0")
	h.SetMsgIDList("References", r.Header.References)
	if r.Header.InReplyTo != "" {
		h.SetMsgIDList("In-Reply-To", []string{r.Header.InReplyTo})
	}
	h.SetMessageID(r.Header.MessageID)
	h.SetSubject(r.Header.Subject)
	if err := set("Cc", r.Header.Cc); err != nil {
		return nil, err
	}
	if err := set("To", r.Header.To); err != nil {
		return nil, err
	}
	if err := set("From", []string{r.Header.From}); err != nil {
		return nil, err
	}
	h.SetDate(r.Header.Date)
	var buf bytes.Buffer
	if err := writeHeader(&buf, h); err != nil {
		return nil, fmt.Errorf("encoding reply: %w", err)
	}
	buf.WriteString(strings.ReplaceAll(r.Body, "\n", "\r\n"))
	return buf.Bytes(), nil
}

// Recipients are the envelope recipients: To and Cc addresses.
func (r *Reply) Recipients() ([]string, error) {
	list, err := mail.ParseAddressList(strings.Join(append(append([]string{}, r.Header.To...), r.Header.Cc...), ", "))
	if err != nil {
		return nil, fmt.Errorf("reply recipients: %w", err)
	}
	var out []string
	for _, a := range list {
		out = append(out, a.Address)
	}
	return out, nil
}

// setupIndent is where a value of the reply's "Test setup" block starts
// ("  runs:      "): a long value wraps and goes on under itself.
const setupIndent = 13

// field wraps a setup value to fit MaxColumns after its label.
func field(s string) string { return hanging(s, setupIndent, MaxColumns) }

// hanging wraps s to end by column width when it starts at column col,
// and starts every further line at col: text that goes on under itself
// after a label or an indent the caller writes.
func hanging(s string, col, width int) string {
	return strings.ReplaceAll(wrap(s, width-col), "\n", "\n"+strings.Repeat(" ", col))
}
