package service

import (
	"fmt"
	"strings"
	"time"

	"github.com/patchbot/patchbot/mailbox"
)

// CommandLog remembers when each sender gave a command, so that the rate
// limit holds across restarts (the store implements it).
type CommandLog interface {
	CommandsSince(sender string, since time.Time) (int, error)
}

// Authorize decides whether sender may give an email command on a series
// written by author. It returns the reason when the answer is no; the reason
// is quoted back to the sender when the config says refused commands are
// answered.
func Authorize(cfg CommandsConfig, log CommandLog, now time.Time, sender, author string) (bool, string, error) {
	s := mailbox.AddrOf(sender)
	allowed := cfg.AllowAuthor && s != "" && s == mailbox.AddrOf(author)
	for _, a := range cfg.Allow {
		if a = mailbox.AddrOf(a); a != "" && (a == s || (strings.HasPrefix(a, "@") && strings.HasSuffix(s, a))) {
			allowed = true
		}
	}
	if !allowed {
		return false, fmt.Sprintf("%s is neither the series' author nor on this instance's allow-list", s), nil
	}
	if cfg.PerSenderPerHour > 0 {
		n, err := log.CommandsSince(s, now.Add(-time.Hour))
		if err != nil {
			return false, "", fmt.Errorf("reading the command log: %w", err)
		}
		if n >= cfg.PerSenderPerHour {
			return false, fmt.Sprintf("%s already gave %d commands in the last hour (limit %d)", s, n, cfg.PerSenderPerHour), nil
		}
	}
	return true, "", nil
}
