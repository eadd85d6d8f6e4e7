package intake

import (
	"strings"
	"testing"
)

func TestAuthorize(t *testing.T) {
	cfg := CommandsConfig{AllowAuthor: true, Allow: []string{"maint@example.org", "@trusted.org"}, PerSenderPerHour: 2}
	author := "Usama Arif <usama.arif@linux.dev>"
	tests := []struct {
		asker  Asker
		ok     bool
		reason string
	}{
		{asker: Asker{"usama.arif@linux.dev", true, ""}, ok: true},
		{asker: Asker{"maint@example.org", true, ""}, ok: true},
		{asker: Asker{"x@trusted.org", true, ""}, ok: true},
		{asker: Asker{"stranger@evil.example", true, ""}, reason: "neither the series' author"},
		{asker: Asker{"x@untrusted.org", true, ""}, reason: "neither"},
		// From: is anyone's to write: without proof, the allow-list and
		// the author's address count for nothing.
		{asker: Asker{"maint@example.org", false, ""}, reason: "no valid DKIM signature aligned with example.org"},
		{asker: Asker{"usama.arif@linux.dev", false, ""}, reason: "does not prove that it comes from usama.arif@linux.dev"},
		{asker: Asker{"maint@example.org", false, "its DKIM/example.org signature does not cover In-Reply-To"},
			reason: "in this thread: its DKIM/example.org signature does not cover In-Reply-To"},
	}
	for _, tt := range tests {
		ok, reason := Authorize(cfg, tt.asker, author)
		if ok != tt.ok || !strings.Contains(reason, tt.reason) {
			t.Errorf("Authorize(%+v) = %v, %q; want %v, reason containing %q", tt.asker, ok, reason, tt.ok, tt.reason)
		}
	}
	// The author is not allowed when the config says so.
	cfg.AllowAuthor = false
	if ok, _ := Authorize(cfg, Asker{"usama.arif@linux.dev", true, ""}, author); ok {
		t.Error("author allowed with allow_author: false")
	}
}
