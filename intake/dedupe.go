package intake

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"
	"time"

	"github.com/patchbot/patchbot/mailbox"
)

// Dedupe is a job's key in the queue (store.Job.Dedupe): a job whose key
// is queued already is not queued again, so that a mail read twice (a
// restart, a second source for one list) makes one job. Its forms:
//
//	series:AUTHOR:TITLE:vN:IDENTITY:FIRST   a series seen on a list
//	command:MESSAGE-ID#N                    the N-th command of a mail (from 0)
//	incomplete:AUTHOR:TITLE:vN:IDENTITY     the check of an incomplete series
//	web:HASH:NANOSECONDS                    a run asked for on the dashboard
//
// AUTHOR is the series' author's bare address and TITLE its title, as the
// mail claims them; IDENTITY is the author as verified
// (mailbox.Identity.Key: "addr/verified" or "addr/unverified"); FIRST is
// the Message-ID of the series' first patch (the mail that carries it: a
// cover letter that comes late does not make another job). A version of a
// series is tested once per sender as verified and per carrying mail: a
// reroll is a new job, and two mails that claim one series and version
// are two candidates (SeriesClaim is their shared prefix), each tested,
// so that an unverified one never takes a verified one's place.
type Dedupe string

// SeriesClaim is the part of a series job's key that every candidate for
// one series and version shares.
func SeriesClaim(s *mailbox.Series) Dedupe {
	return Dedupe(fmt.Sprintf("series:%s:%s:v%d:", mailbox.AddrOf(s.Author), s.Title, s.Version))
}

// SeriesDedupe is the key of a series' job; first is its first patch's
// Message-ID (or the name it is kept under, when it has none).
func SeriesDedupe(s *mailbox.Series, first string) Dedupe {
	return SeriesClaim(s) + Dedupe(s.Identity.Key()+":"+first)
}

// CommandDedupe is the key of the job the n-th command of a mail queues:
// also the command's key in the log of commands (store.Command.Key).
func CommandDedupe(messageID string, n int) Dedupe {
	return Dedupe(fmt.Sprintf("command:%s#%d", messageID, n))
}

// CheckDedupe is the key of an incomplete series' check.
func CheckDedupe(s *mailbox.Series) Dedupe {
	return Dedupe(fmt.Sprintf("incomplete:%s:%s:v%d:%s", mailbox.AddrOf(s.Author), s.Title, s.Version, s.Identity.Key()))
}

// WebDedupe is the key of a dashboard run: its request's hash and the
// time it was asked for, so that each submission is a job of its own.
func WebDedupe(request []byte, at time.Time) Dedupe {
	h := sha256.Sum256(request)
	return Dedupe(fmt.Sprintf("web:%s:%d", hex.EncodeToString(h[:8]), at.UnixNano()))
}

// commandKey is a command's key in the log of commands: its job's key
// without the "command:" prefix.
func commandKey(messageID string, n int) string {
	return strings.TrimPrefix(string(CommandDedupe(messageID, n)), "command:")
}
