package mailbox

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/mail"
	"net/url"
	"os"
	"os/exec"
	"strings"
	"time"
)

// SourceConfig names one mail source; exactly one kind is set. It is the
// `sources:` entry of patchbot.yaml, and what the CLI's --mbox, --maildir,
// --imap and --lore flags make.
type SourceConfig struct {
	Name    string      `yaml:"name"`
	IMAP    *IMAPConfig `yaml:"imap,omitempty"`
	Lore    string      `yaml:"lore,omitempty"` // list URL, e.g. https://lore.kernel.org/linux-fsdevel/, or a thread URL
	Mbox    string      `yaml:"mbox,omitempty"`
	Maildir string      `yaml:"maildir,omitempty"`
	// Poll is how often the source is read (IMAP: the safety net beside
	// IDLE, or the NOOP interval without it); 0 is the daemon's default,
	// 30 s.
	Poll time.Duration `yaml:"poll"`
	// List is the address of the mailing list whose mail this source
	// holds (linux-fsdevel@vger.kernel.org): its mail is list mail, and
	// replies to it Cc the list. A lore source is a list archive and needs
	// none. Mail of a source that names no list was sent to patchbot
	// directly, whatever its List-Id says.
	List string `yaml:"list,omitempty"`
	// Trusted says that every mail of this source comes from where it says
	// (a private list whose server checks senders), so its senders count
	// as verified without a DKIM signature.
	Trusted bool `yaml:"trusted"`
	// ListHears is what of a finished run the list hears, in the thread
	// of a series read from this source: ListHearsFindings (the default:
	// an improvement, a regression, a mixed result, kernel trouble, why
	// the series was not tested, or that too few rounds were run to
	// judge; a "No change" goes only to whoever asked for the run, and to
	// the dashboard) or ListHearsEverything.
	ListHears string `yaml:"list_hears,omitempty"`
	// Since is where a lore list starts on its first read (no cursor
	// yet): "now" (the default: mail the archive receives from then on),
	// a date (2006-01-02) or an RFC 3339 time (mail the archive received
	// since). Lore lists only.
	Since string `yaml:"since,omitempty"`
	// Mirror is the directory where a lore list's git epochs are
	// mirrored; the daemon's default is STATE_DIR/lore/NAME. Lore lists
	// only.
	Mirror string `yaml:"mirror,omitempty"`
	// Follow is set by the daemon, never by a config file: the source is
	// watched as it grows, so an mbox's last mail is held back while it
	// may still be being written. Off (the CLI), the end of the input is
	// the end of the last mail.
	Follow bool `yaml:"-"`
}

// What a list hears of a finished run (SourceConfig.ListHears).
const (
	ListHearsFindings   = "findings"
	ListHearsEverything = "everything"
)

// ListMail says whether the source's mail is a list's: it names the list,
// or it is a lore archive.
func (c SourceConfig) ListMail() bool { return c.List != "" || c.Lore != "" }

// IMAPConfig names an IMAP mailbox. The password is read from
// PasswordFile (mode 0600), never given inline or on a command line.
type IMAPConfig struct {
	Addr         string `yaml:"addr"` // host:port
	TLS          bool   `yaml:"tls"`
	User         string `yaml:"user"`
	PasswordFile string `yaml:"password_file"`
	Mailbox      string `yaml:"mailbox"`
}

// Kind is the source's kind: "imap", "lore", "mbox" or "maildir".
func (c SourceConfig) Kind() string {
	switch {
	case c.IMAP != nil:
		return "imap"
	case c.Lore != "":
		return "lore"
	case c.Mbox != "":
		return "mbox"
	case c.Maildir != "":
		return "maildir"
	}
	return ""
}

// Validate checks that exactly one kind is set and its fields are usable.
func (c SourceConfig) Validate() error {
	n := 0
	for _, set := range []bool{c.IMAP != nil, c.Lore != "", c.Mbox != "", c.Maildir != ""} {
		if set {
			n++
		}
	}
	if n != 1 {
		return fmt.Errorf("exactly one of imap, lore, mbox, maildir must be set (got %d)", n)
	}
	if c.IMAP != nil && (c.IMAP.Addr == "" || c.IMAP.User == "") {
		return errors.New("imap: addr and user are required")
	}
	if c.Poll < 0 {
		return errors.New("poll: negative")
	}
	// A key the source's kind would ignore is refused, not dropped.
	loreList := false
	if c.Lore != "" {
		l, err := NewLore(c.Lore)
		if err != nil {
			return err
		}
		loreList = l.MessageID == ""
	}
	if c.Since != "" {
		if !loreList {
			return fmt.Errorf("since: only a lore list has a start point (this source is %s)", c.describe())
		}
		if _, err := ParseSince(c.Since); err != nil {
			return err
		}
	}
	if c.Mirror != "" && !loreList {
		return fmt.Errorf("mirror: only a lore list is mirrored (this source is %s)", c.describe())
	}
	if c.List != "" {
		if a, err := mail.ParseAddress(c.List); err != nil || a.Name != "" || !strings.Contains(a.Address, "@") {
			return fmt.Errorf("list %q: want the list's bare address, e.g. linux-fsdevel@vger.kernel.org", c.List)
		}
	}
	switch c.ListHears {
	case "":
	case ListHearsFindings, ListHearsEverything:
		if !c.ListMail() {
			return fmt.Errorf("list_hears: only a list's source has a list to hear (this source is %s and names no list:)", c.describe())
		}
	default:
		return fmt.Errorf("list_hears %q: want %s (the default) or %s", c.ListHears, ListHearsFindings, ListHearsEverything)
	}
	return nil
}

// describe names the source's kind for an error.
func (c SourceConfig) describe() string {
	if c.Lore != "" {
		return "a lore thread"
	}
	return "of kind " + c.Kind()
}

// Open makes the source a config names. It is the one way from config (or
// flags) to a Source: the daemon and every command use it.
func Open(c SourceConfig, log *slog.Logger) (Source, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	switch {
	case c.IMAP != nil:
		s := &IMAP{Addr: c.IMAP.Addr, TLS: c.IMAP.TLS, User: c.IMAP.User, Mailbox: c.IMAP.Mailbox,
			Logger: log, PollInterval: c.Poll}
		if c.IMAP.PasswordFile != "" {
			pw, err := ReadSecret(c.IMAP.PasswordFile)
			if err != nil {
				return nil, err
			}
			s.Password = pw
		}
		return s, nil
	case c.Lore != "":
		s, err := NewLore(c.Lore)
		if err != nil {
			return nil, err
		}
		s.Logger, s.Mirror, s.Since = log, c.Mirror, c.Since
		if s.Mirror != "" {
			if s.Since == "" {
				s.Since = "now"
			}
			if _, err := exec.LookPath("git"); err != nil {
				return nil, fmt.Errorf("lore %s: following the archive's log needs git: %w", c.Lore, err)
			}
		}
		return s, nil
	case c.Mbox != "":
		return &Mbox{Path: c.Mbox, Logger: log, Follow: c.Follow}, nil
	default:
		return &Maildir{Dir: c.Maildir, Logger: log}, nil
	}
}

// ReadSecret reads a password file: its first line, without the newline.
// The file must not be readable by group or others.
func ReadSecret(path string) (string, error) {
	st, err := os.Stat(path)
	if err != nil {
		return "", fmt.Errorf("reading secret: %w", err)
	}
	if st.Mode().Perm()&0o077 != 0 {
		return "", fmt.Errorf("secret %s is readable by others (mode %04o): chmod 600 it", path, st.Mode().Perm())
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("reading secret: %w", err)
	}
	line, _, _ := strings.Cut(string(data), "\n")
	return strings.TrimRight(line, "\r"), nil
}

// Collect reads every mail of src from the beginning. Mail that does not
// parse is skipped by the source (and logged), as the daemon does.
func Collect(ctx context.Context, src Source) ([]*Message, error) {
	var msgs []*Message
	if _, err := src.Poll(ctx, "", func(m *Message, _ string) error {
		msgs = append(msgs, m)
		return nil
	}); err != nil {
		return nil, fmt.Errorf("reading mail: %w", err)
	}
	return msgs, nil
}

// SeriesIn reads every mail of src and chooses the series to test, as the
// daemon does for a command (AssembleVersions, then Choose): the newest
// complete version, or the one asked for. The notes say what a reader
// should know about the choice.
func SeriesIn(ctx context.Context, src Source, version int) (*Series, []string, error) {
	msgs, err := Collect(ctx, src)
	if err != nil {
		return nil, nil, err
	}
	// Who sent each mail, as b4 checks it (DKIM, keys from DNS): the reply
	// says it per patch, and an unverified post never hides a verified one.
	NewVerifier(DKIMConfig{MaxAge: -1, MaxAhead: -1}, nil).VerifyAll(ctx, msgs)
	return Choose(AssembleVersions(msgs), version)
}

// ThreadURL is the address of a thread on a public-inbox list (list, or
// lore.kernel.org/all/ when empty): the list's URL and the Message-ID,
// without its angle brackets.
func ThreadURL(list, messageID string) string {
	if list == "" {
		list = "https://lore.kernel.org/all/"
	}
	return strings.TrimSuffix(list, "/") + "/" + url.PathEscape(strings.Trim(messageID, "<> ")) + "/"
}

// Choose picks the series to test among those assembled from some mail,
// as b4 am does: version 0 means the newest version that is complete;
// another number asks for that version. Notes say what a reader should
// know about the choice (a newer version that is incomplete was passed
// over). An incomplete chosen version is an error naming what is missing.
//
// A verified series is never hidden by an unverified one: when any
// candidate's sender is verified, the unverified ones are passed over,
// and a note names each.
func Choose(all []*Series, version int) (*Series, []string, error) {
	fits := func(s *Series) bool { return len(s.Patches) > 0 && (version == 0 || s.Version == version) }
	var verified []*Series
	for _, s := range all {
		if fits(s) && s.Identity.Verified() {
			verified = append(verified, s)
		}
	}
	if len(verified) == 0 {
		return choose(all, version)
	}
	var notes []string
	for _, s := range all {
		if fits(s) && !s.Identity.Verified() {
			notes = append(notes, fmt.Sprintf("v%d from %s passed over: its sender is not verified", s.Version, s.Identity))
		}
	}
	best, more, err := choose(verified, version)
	return best, append(notes, more...), err
}

// ChooseOwned picks the series a command in a thread applies to. A
// command that names a mail (msgid: a patch or the cover letter) applies
// to the series holding it, whatever its version or sender. Otherwise it
// applies to the newest complete version of the owner's series, owner
// being who started the thread, as verified: another sender's post in the
// thread (a stranger's "v2") is never it. When the owner has no series
// there, Choose decides.
func ChooseOwned(all []*Series, owner Identity, msgid string) (*Series, []string, error) {
	if msgid = strings.Trim(strings.TrimSpace(msgid), "<>"); msgid != "" {
		var best *Series
		bestOwn := false
		for _, s := range all {
			p := s.patchByID(msgid)
			if p == nil && (s.Cover == nil || s.Cover.MessageID != msgid) {
				continue
			}
			// A patch a partial reroll borrowed names its own version first.
			own := p == nil || p.Version == s.Version
			if best == nil || own && !bestOwn {
				best, bestOwn = s, own
			}
		}
		switch {
		case best == nil:
			return nil, nil, fmt.Errorf("no patch series in this thread holds the mail <%s>", msgid)
		case !best.Complete:
			return nil, nil, fmt.Errorf("series %q v%d is incomplete (missing %s): %s",
				best.Subject, best.Version, indexList(best.Missing), best.Reason)
		}
		return best, nil, nil
	}
	var owned []*Series
	for _, s := range all {
		if s.Identity.Key() == owner.Key() {
			owned = append(owned, s)
		}
	}
	if owner.Address == "" || len(owned) == 0 {
		return Choose(all, 0)
	}
	best, notes, err := choose(owned, 0)
	if err != nil {
		return nil, nil, err
	}
	for _, s := range all {
		if len(s.Patches) > 0 && s.Identity.Key() != owner.Key() && s.Version >= best.Version {
			notes = append(notes, fmt.Sprintf("v%d from %s is not the thread author's: name one of its mails to test it", s.Version, s.Identity))
		}
	}
	return best, notes, nil
}

// patchByID is the patch with that Message-ID, or nil.
func (s *Series) patchByID(id string) *Patch {
	for _, p := range s.Patches {
		if p.MessageID == id {
			return p
		}
	}
	return nil
}

// choose is Choose's rule over every series given.
func choose(all []*Series, version int) (*Series, []string, error) {
	var best, newest *Series
	for _, s := range all {
		if len(s.Patches) == 0 {
			continue
		}
		if version != 0 && s.Version != version {
			continue
		}
		if newest == nil || s.Version > newest.Version || s.Version == newest.Version && s.Date.After(newest.Date) {
			newest = s
		}
		if !s.Complete {
			continue
		}
		if best == nil || s.Version > best.Version || s.Version == best.Version && s.Date.After(best.Date) {
			best = s
		}
	}
	switch {
	case best == nil && newest == nil && version != 0:
		return nil, nil, fmt.Errorf("no v%d of a patch series in the mail", version)
	case best == nil && newest == nil:
		return nil, nil, errors.New("no patch series found in the mail")
	case best == nil:
		return nil, nil, fmt.Errorf("series %q v%d is incomplete (missing %s): %s",
			newest.Subject, newest.Version, indexList(newest.Missing), newest.Reason)
	}
	var notes []string
	if newest != best && newest.Version > best.Version {
		notes = append(notes, fmt.Sprintf("v%d is incomplete (missing %s); testing v%d, the newest complete version",
			newest.Version, indexList(newest.Missing), best.Version))
	}
	return best, notes, nil
}

// ParseIMAPURL reads imap://user[:password]@host:port/MAILBOX (imaps://
// for TLS; the port defaults to 143 or 993). The password, if the URL has
// one, is returned apart: a caller that takes URLs from a command line
// refuses it, since every user of the machine can read a command line.
func ParseIMAPURL(raw string) (c *IMAPConfig, password string, err error) {
	u, err := url.Parse(raw)
	if err != nil {
		return nil, "", fmt.Errorf("parsing IMAP URL: %w", err)
	}
	c = &IMAPConfig{}
	switch u.Scheme {
	case "imap":
	case "imaps":
		c.TLS = true
	default:
		return nil, "", fmt.Errorf("IMAP URL %q: scheme must be imap or imaps", raw)
	}
	host, port := u.Hostname(), u.Port()
	if host == "" {
		return nil, "", fmt.Errorf("IMAP URL %q has no host", raw)
	}
	if port == "" {
		port = "143"
		if c.TLS {
			port = "993"
		}
	}
	c.Addr = net.JoinHostPort(host, port)
	if u.User != nil {
		c.User = u.User.Username()
		password, _ = u.User.Password()
	}
	c.Mailbox = strings.Trim(u.Path, "/")
	return c, password, nil
}
