package mailbox

import (
	"fmt"
	"strings"
	"testing"
)

// mailOf is a patch mail (or, with no diff, a reply) from one sender,
// verified as via says ("" unverified).
func mailOf(id, from, via, subject, inReplyTo string, diff bool) *Message {
	var b strings.Builder
	fmt.Fprintf(&b, "From: %s\nSubject: %s\nMessage-ID: <%s>\nDate: Mon, 3 Aug 2026 12:00:00 +0000\n", from, subject, id)
	if inReplyTo != "" {
		fmt.Fprintf(&b, "In-Reply-To: <%s>\nReferences: <%s>\n", inReplyTo, inReplyTo)
	}
	b.WriteString("\nA change.\n")
	if diff {
		b.WriteString("---\ndiff --git a/fs/squashfs/cache.c b/fs/squashfs/cache.c\n--- a/fs/squashfs/cache.c\n+++ b/fs/squashfs/cache.c\n" +
			"@@ -1,1 +1,1 @@\n-old " + id + "\n+new " + id + "\n")
	}
	m, err := ParseBytes([]byte(b.String()))
	if err != nil {
		panic(err)
	}
	a := &Attestation{From: AddrOf(from)}
	if via != "" {
		a.Signatures = []Signature{{Domain: strings.TrimPrefix(via, "DKIM/"), Result: Pass, Aligned: true}}
	}
	m.Attestation = a
	return m
}

const author = "Usama Arif <usama.arif@linux.dev>"

// The attacks on ownership, in mailbox's terms: who sent a series,
// as verified, is part of what it is.
func TestIdentityDecidesOwnership(t *testing.T) {
	v1 := mailOf("v1@linux.dev", author, "DKIM/linux.dev", "[PATCH] squashfs: avoid wakeups", "", true)
	// A stranger's v2 in the author's thread, in the author's name, unsigned.
	forged := mailOf("v2@evil.example", author, "", "[PATCH v2] squashfs: avoid wakeups", "v1@linux.dev", true)
	// Another stranger's, in his own name.
	stranger := mailOf("v2@stranger.example", "Stranger <s@stranger.example>", "DKIM/stranger.example",
		"[PATCH v2] squashfs: avoid wakeups", "v1@linux.dev", true)
	owner := v1.Identity()

	all := AssembleVersions([]*Message{v1, forged, stranger})
	if len(all) != 3 {
		t.Fatalf("%d series, want 3 candidates (the author's v1, the forged v2, the stranger's v2)", len(all))
	}
	for _, s := range Assemble([]*Message{v1, forged, stranger}) {
		if s.Identity.Key() == owner.Key() && s.Version != 1 {
			t.Errorf("the author's series is v%d", s.Version)
		}
	}
	if n := len(Assemble([]*Message{v1, forged, stranger})); n != 3 {
		t.Errorf("Assemble hid a candidate: %d series", n)
	}
	s, notes, err := ChooseOwned(all, owner, "")
	if err != nil || s.Patches[0].MessageID != "v1@linux.dev" {
		t.Fatalf("a command in the thread chose %v (%v), want the author's v1", s, err)
	}
	if len(notes) != 2 {
		t.Errorf("notes %q: want both later v2s named", notes)
	}
	// Named by Message-ID, the other version is chosen.
	if s, _, err := ChooseOwned(all, owner, "<v2@stranger.example>"); err != nil || s.Identity.Address != "s@stranger.example" {
		t.Errorf("series=v2@stranger.example chose %v, %v", s, err)
	}
	if _, _, err := ChooseOwned(all, owner, "nosuch@x"); err == nil {
		t.Error("a Message-ID no series holds was accepted")
	}
	// Without an owner, a verified series is never hidden by an unverified one.
	s, notes, _ = Choose(AssembleVersions([]*Message{v1, forged}), 0)
	if s.Version != 1 || len(notes) != 1 || !strings.Contains(notes[0], "not verified") {
		t.Errorf("Choose took v%d (notes %q), want v1 and a note for the forged v2", s.Version, notes)
	}

	// Squatting: a forged v2 in a thread of its own, sent first, then the
	// author's. Both are candidates; neither supersedes the other.
	squat := mailOf("squat@evil.example", author, "", "[PATCH v2] squashfs: avoid wakeups", "", true)
	real := mailOf("real-v2@linux.dev", author, "DKIM/linux.dev", "[PATCH v2] squashfs: avoid wakeups", "", true)
	got := Assemble([]*Message{squat, real})
	if len(got) != 2 || got[0].Identity.Verified() || !got[1].Identity.Verified() {
		t.Errorf("squat then real: %d series", len(got))
	}
	// But the author's own v3 in a new thread still supersedes the v2.
	v3 := mailOf("v3@linux.dev", author, "DKIM/linux.dev", "[PATCH v3] squashfs: avoid wakeups", "", true)
	got = Assemble([]*Message{real, v3})
	if len(got) != 1 || got[0].Version != 3 {
		t.Errorf("the author's v3 did not supersede the v2: %d series", len(got))
	}
	// A forged v3 does not supersede the verified v2.
	if got = Assemble([]*Message{real, mailOf("v3@evil.example", author, "", "[PATCH v3] squashfs: avoid wakeups", "", true)}); len(got) != 2 {
		t.Errorf("a forged v3 superseded the verified v2: %d series", len(got))
	}

	// A forged 1/2 sent before the real one does not take its slot.
	cover := mailOf("c@linux.dev", author, "DKIM/linux.dev", "[PATCH 0/2] two", "", false)
	fake1 := mailOf("f1@evil.example", author, "", "[PATCH 1/2] one", "c@linux.dev", true)
	p1 := mailOf("p1@linux.dev", author, "DKIM/linux.dev", "[PATCH 1/2] one", "c@linux.dev", true)
	p2 := mailOf("p2@linux.dev", author, "DKIM/linux.dev", "[PATCH 2/2] two", "c@linux.dev", true)
	for _, s := range Assemble([]*Message{cover, fake1, p1, p2}) {
		if s.Identity.Verified() && (!s.Complete || s.Patches[0].MessageID != "p1@linux.dev") {
			t.Errorf("the verified series is %v with 1/2 %s", s.Complete, s.Patches[0].MessageID)
		}
	}
}
