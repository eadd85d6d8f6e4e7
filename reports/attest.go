package reports

import (
	"slices"
	"strings"
)

// Attested is who signed one patch's mail, as patchbot verified it when
// the mail came: the lines b4 am prints under a patch.
type Attested struct {
	Subject string `json:"subject"`
	// Verified: a valid DKIM signature aligned with From: (or a trusted
	// source) proves the sender.
	Verified bool    `json:"verified"`
	Checks   []Check `json:"checks"`
}

// Check is one attestation line without its mark: "Signed: DKIM/linux.dev",
// "BADSIG: DKIM/linux.dev", "No signature (From: x@y)".
type Check struct {
	Pass bool   `json:"pass"`
	Text string `json:"text"`
}

// String is the line with b4's mark.
func (c Check) String() string {
	if c.Pass {
		return "✓ " + c.Text
	}
	return "✗ " + c.Text
}

// Mark is b4's mark before a patch's subject.
func (a Attested) Mark() string {
	if a.Verified {
		return "✓"
	}
	return "✗"
}

// attestText is the reply's part on who sent the series, as b4 am shows
// it: each patch with its mark, and when every patch has the same
// attestation, its lines once below "---"; otherwise each patch's own
// lines under it.
func attestText(run *Run) string {
	if len(run.Attestation) == 0 {
		return ""
	}
	same := true
	for _, a := range run.Attestation[1:] {
		same = same && slices.Equal(a.Checks, run.Attestation[0].Checks)
	}
	var b strings.Builder
	b.WriteString("Who sent it (DKIM, checked by patchbot as b4 am checks it):\n\n")
	for _, a := range run.Attestation {
		b.WriteString("  " + a.Mark() + " " + truncRunes(a.Subject, 74) + "\n")
		if !same {
			for _, c := range a.Checks {
				b.WriteString("    " + truncRunes(c.String(), 74) + "\n")
			}
		}
	}
	if same {
		b.WriteString("  ---\n")
		for _, c := range run.Attestation[0].Checks {
			b.WriteString("  " + truncRunes(c.String(), 76) + "\n")
		}
	}
	return b.String()
}
