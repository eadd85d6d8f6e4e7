package service

import (
	"strings"
	"testing"
	"time"
)

type fakeLog map[string]int

func (f fakeLog) CommandsSince(sender string, _ time.Time) (int, error) { return f[sender], nil }

func TestAuthorize(t *testing.T) {
	cfg := CommandsConfig{AllowAuthor: true, Allow: []string{"maint@example.org", "@trusted.org"}, PerSenderPerHour: 2}
	author := "Usama Arif <usama.arif@linux.dev>"
	tests := []struct {
		sender string
		log    fakeLog
		ok     bool
		reason string
	}{
		{sender: "Usama Arif <Usama.Arif@linux.dev>", ok: true},
		{sender: "maint@example.org", ok: true},
		{sender: "Someone <x@trusted.org>", ok: true},
		{sender: "stranger@evil.example", reason: "neither the series' author"},
		{sender: "x@untrusted.org", reason: "neither"},
		{sender: "maint@example.org", log: fakeLog{"maint@example.org": 2}, reason: "limit 2"},
	}
	for _, tt := range tests {
		log := tt.log
		if log == nil {
			log = fakeLog{}
		}
		ok, reason, err := Authorize(cfg, log, time.Now(), tt.sender, author)
		if err != nil {
			t.Fatal(err)
		}
		if ok != tt.ok || !strings.Contains(reason, tt.reason) {
			t.Errorf("Authorize(%q) = %v, %q; want %v, reason containing %q", tt.sender, ok, reason, tt.ok, tt.reason)
		}
	}
	// The author is not allowed when the config says so.
	cfg.AllowAuthor = false
	if ok, _, _ := Authorize(cfg, fakeLog{}, time.Now(), author, author); ok {
		t.Error("author allowed with allow_author: false")
	}
}
