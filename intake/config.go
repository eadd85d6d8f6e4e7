package intake

import (
	"fmt"
	"net/mail"
	"time"

	"github.com/patchbot/patchbot/mailbox"
	"github.com/patchbot/patchbot/mailbox/outbox"
	"github.com/patchbot/patchbot/suites"
)

// Config is the front desk's part of patchbot.yaml (top-level keys: the
// daemon's config holds it inline): which series are tested, who may ask
// by command, and how much mail patchbot writes.
type Config struct {
	// Paths: a series is tested only when it touches one of these prefixes.
	Paths  []string     `yaml:"paths"`
	Suites SuitesConfig `yaml:"suites"`
	// Commands controls who may ask for a run with "#patchbot test".
	Commands CommandsConfig `yaml:"commands"`
	// Limits bound the mail patchbot sends, whoever asks.
	Limits LimitsConfig `yaml:"limits"`
	// IncompleteAfter is how long a series may wait for its missing parts
	// before patchbot answers that it could not test it, and why.
	IncompleteAfter time.Duration `yaml:"incomplete_after"`
}

// SuitesConfig is how much a job measures by default.
type SuitesConfig struct {
	Profile string `yaml:"profile"`
	// Runs per kernel, interleaved: 0 runs as many as the evidence needs
	// (the sequential rule: 3 to 10 a side, stopping when every primary
	// metric is settled), N runs exactly N.
	Runs int `yaml:"runs"`
}

// CommandsConfig controls email commands.
type CommandsConfig struct {
	// AllowAuthor lets a series' author ask for its test; Allow lists the
	// other addresses (or "@domain") that may. Either counts only for an
	// authenticated mail: see AuthservIDs.
	AllowAuthor bool     `yaml:"allow_author"`
	Allow       []string `yaml:"allow"`
	// AuthservIDs are the receiving servers whose Authentication-Results
	// fields patchbot reads (RFC 8601), e.g. smtp.subspace.kernel.org for
	// mail read from lore: only the topmost block of such fields, and only
	// to vouch for a signature in the mail whose key patchbot cannot get
	// itself (a key rotated since). A sender is verified by a valid DKIM
	// signature aligned with From: (checked by patchbot), such a vouched
	// one, or a source trusted as a whole (sources[].trusted).
	AuthservIDs []string `yaml:"authserv_ids"`
	// PerSenderPerHour is how many commands one sender may give an hour:
	// every command that made a job or a mail counts (help, refusals and
	// malformed commands too).
	PerSenderPerHour int `yaml:"per_sender_per_hour"`
	// AnswerRefused answers a refused command with the reason, at most
	// once per sender an hour; when false refused commands are ignored
	// silently.
	AnswerRefused bool `yaml:"answer_refused"`
}

// LimitsConfig bounds the mail patchbot sends, whoever asks: the
// `limits:` part of patchbot.yaml.
type LimitsConfig struct {
	// MaxRecipients caps To and Cc of every mail. A job's reply keeps its
	// author, then the lists, then the other people Cc'd, up to the cap;
	// the outbox refuses anything above it.
	MaxRecipients int `yaml:"max_recipients"`
	// PerThreadPerDay is how many mails patchbot writes into one thread in
	// 24 hours (answers and replies). Past it, answers are dropped and
	// test commands ignored.
	PerThreadPerDay int `yaml:"per_thread_per_day"`
	// PerHour is how many mails patchbot writes in an hour in all. Past
	// it, answers are dropped and test commands ignored; the replies of
	// jobs already accepted still go out.
	PerHour int `yaml:"per_hour"`
	// OptOut are addresses never mailed, as if each had sent
	// "#patchbot stop".
	OptOut []string `yaml:"opt_out"`

	// Answers to unverified senders (no aligned DKIM signature, no trusted
	// source) come from a budget of their own, which never reduces the
	// quotas above: a stranger in anyone's name can neither silence
	// patchbot for verified senders nor use it to mail many addresses
	// that never wrote. UnverifiedPerSenderPerDay bounds the answers to
	// one address, UnverifiedPerHour those to all of them.
	UnverifiedPerSenderPerDay int `yaml:"unverified_per_sender_per_day"`
	UnverifiedPerHour         int `yaml:"unverified_per_hour"`
}

// DefaultConfig is the front desk's part of the embedded default: the
// seed's paths, the standard profile with as many rounds as the evidence
// needs, a series' author and authenticated senders may ask, and the
// default limits.
func DefaultConfig() Config {
	return Config{
		Paths: []string{"fs/squashfs/", "fs/fuse/", "mm/readahead.c", "fs/locks.c"},
		// Runs 0: the sequential rule decides, from 3 to 6 a side.
		Suites:          SuitesConfig{Profile: suites.DefaultProfile},
		Commands:        CommandsConfig{AllowAuthor: true, PerSenderPerHour: 4, AnswerRefused: true},
		Limits:          DefaultLimits(),
		IncompleteAfter: 6 * time.Hour,
	}
}

// DefaultLimits: the seed series' reply (the author and 12 Cc's) fits
// under the recipient cap; an unverified sender gets one answer a day.
func DefaultLimits() LimitsConfig {
	return LimitsConfig{MaxRecipients: outbox.DefaultMaxRecipients, PerThreadPerDay: 10, PerHour: 30,
		UnverifiedPerSenderPerDay: 1, UnverifiedPerHour: 10}
}

// Validate checks ranges; it returns each problem found.
func (c Config) Validate() []string {
	var errs []string
	if c.Suites.Runs < 0 || c.Suites.Runs > 100 {
		errs = append(errs, fmt.Sprintf("suites.runs %d: want 0 (as the evidence needs) or 1..100", c.Suites.Runs))
	}
	if c.IncompleteAfter <= 0 {
		errs = append(errs, "incomplete_after: want a positive duration")
	}
	if c.Commands.PerSenderPerHour < 1 {
		errs = append(errs, "commands.per_sender_per_hour: want at least 1")
	}
	l := c.Limits
	if l.MaxRecipients < 1 || l.MaxRecipients > 100 {
		errs = append(errs, fmt.Sprintf("limits.max_recipients %d: want 1..100", l.MaxRecipients))
	}
	if l.PerThreadPerDay < 1 {
		errs = append(errs, "limits.per_thread_per_day: want at least 1")
	}
	if l.PerHour < 1 {
		errs = append(errs, "limits.per_hour: want at least 1")
	}
	if l.UnverifiedPerSenderPerDay < 0 || l.UnverifiedPerHour < 0 {
		errs = append(errs, "limits.unverified_per_sender_per_day, limits.unverified_per_hour: want 0 (never answer) or more")
	}
	for _, a := range l.OptOut {
		if _, err := mail.ParseAddress(a); err != nil {
			errs = append(errs, fmt.Sprintf("limits.opt_out %q: %v", a, err))
		}
	}
	return errs
}

// OptOutAddrs are the config's opt-outs as bare addresses, for the
// outbox's last filter.
func (l LimitsConfig) OptOutAddrs() []string {
	var out []string
	for _, a := range l.OptOut {
		out = append(out, mailbox.AddrOf(a))
	}
	return out
}

// optedOut says whether the config lists the bare address.
func (l LimitsConfig) optedOut(addr string) bool {
	for _, a := range l.OptOut {
		if mailbox.AddrOf(a) == addr {
			return true
		}
	}
	return false
}
