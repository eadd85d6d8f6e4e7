package reports

import (
	"os"
	"path/filepath"
	"testing"
)

// A re-rendered reply replaces the old one whole, stays the bot's own, and
// leaves no temporary file beside it for the dashboard to list.
func TestSaveReplyReplacesWhole(t *testing.T) {
	dir := t.TempDir()
	if err := SaveReply(dir, []byte("Subject: first\r\n\r\nold body, longer than the new one\r\n")); err != nil {
		t.Fatal(err)
	}
	want := "Subject: second\r\n\r\nnew\r\n"
	if err := SaveReply(dir, []byte(want)); err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(filepath.Join(dir, ReplyFile))
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != want {
		t.Errorf("reply.eml = %q, want %q", got, want)
	}
	fi, err := os.Stat(filepath.Join(dir, ReplyFile))
	if err != nil {
		t.Fatal(err)
	}
	if m := fi.Mode().Perm(); m != 0o600 {
		t.Errorf("reply.eml mode %v, want 0600", m)
	}
	ents, _ := os.ReadDir(dir)
	if len(ents) != 1 {
		var names []string
		for _, e := range ents {
			names = append(names, e.Name())
		}
		t.Errorf("run directory holds %v, want only %s", names, ReplyFile)
	}
	if err := SaveReply(filepath.Join(dir, "missing"), []byte(want)); err == nil {
		t.Error("saving into a directory that does not exist did not fail")
	}
}
