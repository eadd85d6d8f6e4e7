package reports

import (
	"strings"
	"testing"
)

// Patches signed alike are listed with one attestation below them, as b4
// am lists them; patches signed differently each get their own lines.
func TestAttestText(t *testing.T) {
	signed := []Check{{Pass: true, Text: "Signed: DKIM/linux.dev"}}
	run := &Run{Attestation: []Attested{
		{Subject: "[PATCH 1/2] one", Verified: true, Checks: signed},
		{Subject: "[PATCH 2/2] two", Verified: true, Checks: signed},
	}}
	want := "Who sent it (DKIM, checked by patchbot as b4 am checks it):\n\n" +
		"  ✓ [PATCH 1/2] one\n  ✓ [PATCH 2/2] two\n  ---\n  ✓ Signed: DKIM/linux.dev\n"
	if got := attestText(run); got != want {
		t.Errorf("alike:\n%s\nwant:\n%s", got, want)
	}
	run.Attestation[1] = Attested{Subject: "[PATCH 2/2] two", Checks: []Check{{Text: "BADSIG: DKIM/linux.dev"}}}
	want = "Who sent it (DKIM, checked by patchbot as b4 am checks it):\n\n" +
		"  ✓ [PATCH 1/2] one\n    ✓ Signed: DKIM/linux.dev\n  ✗ [PATCH 2/2] two\n    ✗ BADSIG: DKIM/linux.dev\n"
	if got := attestText(run); got != want {
		t.Errorf("different:\n%s\nwant:\n%s", got, want)
	}
	if attestText(&Run{}) != "" {
		t.Error("a run without attestation says who sent it")
	}
	long := &Run{Attestation: []Attested{{Subject: strings.Repeat("x", 200), Checks: signed}}}
	for _, l := range strings.Split(attestText(long), "\n") {
		if len([]rune(l)) > MaxColumns {
			t.Errorf("line of %d columns", len([]rune(l)))
		}
	}
}
