package mailbox

import (
	"context"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

func TestChoose(t *testing.T) {
	v1 := &Series{Subject: "v1", Version: 1, Complete: true, Patches: []*Patch{{Index: 1}}}
	v2 := &Series{Subject: "v2", Version: 2, Complete: true, Patches: []*Patch{{Index: 1}}}
	v3 := &Series{Subject: "v3", Version: 3, Total: 2, Missing: []int{2}, Reason: "patch 2 never came",
		Patches: []*Patch{{Index: 1}}}
	cover := &Series{Subject: "only a cover", Version: 4}
	for _, tc := range []struct {
		name    string
		all     []*Series
		version int
		want    string
		note    string
		err     string
	}{
		{"newest complete", []*Series{v1, v2}, 0, "v2", "", ""},
		{"newer incomplete is passed over, and said", []*Series{v1, v2, v3}, 0, "v2", "v3 is incomplete (missing patch 2)", ""},
		{"asked version", []*Series{v1, v2, v3}, 1, "v1", "", ""},
		{"asked version is incomplete", []*Series{v1, v3}, 3, "", "", "missing patch 2"},
		{"asked version absent", []*Series{v1}, 7, "", "", "no v7"},
		{"nothing but a cover", []*Series{cover}, 0, "", "", "no patch series"},
		{"only incomplete", []*Series{v3}, 0, "", "", "incomplete"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, notes, err := Choose(tc.all, tc.version)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err = %v, want one saying %q", err, tc.err)
				}
				return
			}
			if err != nil || s.Subject != tc.want {
				t.Fatalf("Choose = %v, %v; want %s", s, err, tc.want)
			}
			if got := strings.Join(notes, "; "); !strings.Contains(got, tc.note) || (tc.note == "" && got != "") {
				t.Errorf("notes = %q, want %q", got, tc.note)
			}
		})
	}
}

func TestOpenAndCollect(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("..", "testdata", "mbox", "squashfs-thundering-herd.mbox"))
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "x.mbox")
	os.WriteFile(path, data, 0o644)
	src, err := Open(SourceConfig{Mbox: path}, nil)
	if err != nil {
		t.Fatal(err)
	}
	msgs, err := Collect(context.Background(), src)
	if err != nil || len(msgs) != 3 {
		t.Fatalf("Collect = %d mails, %v; want 3", len(msgs), err)
	}
	if _, err := Open(SourceConfig{Mbox: path, Maildir: "x"}, nil); err == nil {
		t.Error("Open with two kinds set succeeded")
	}
}

func TestReadSecret(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "pw")
	os.WriteFile(p, []byte("s3cret\nignored\n"), 0o600)
	if s, err := ReadSecret(p); err != nil || s != "s3cret" {
		t.Errorf("ReadSecret = %q, %v", s, err)
	}
	os.Chmod(p, 0o644)
	if _, err := ReadSecret(p); err == nil || !strings.Contains(err.Error(), "readable by others") {
		t.Errorf("ReadSecret of a 0644 file: %v", err)
	}
}

// TestChooseVersions: with every version assembled, -v N picks N, and by
// default the newest complete version wins over a newer incomplete one.
func TestChooseVersions(t *testing.T) {
	msgs := readFixture(t, "../testdata/mailbox/reroll.mbox")
	all := AssembleVersions(msgs)
	var vs []int
	for _, s := range all {
		vs = append(vs, s.Version)
	}
	if !reflect.DeepEqual(vs, []int{1, 2}) {
		t.Fatalf("versions %v", vs)
	}
	if s, notes, err := Choose(all, 1); err != nil || s.Version != 1 || len(notes) != 0 || s.Patches[0].MessageID != "v1-1@demo.example" {
		t.Fatalf("-v 1: %v %v %v", s, notes, err)
	}
	if s, _, err := Choose(all, 0); err != nil || s.Version != 2 {
		t.Fatalf("default: %v %v", s, err)
	}
	var partial []*Message
	for _, m := range msgs {
		if m.MessageID != "v2-3@demo.example" {
			partial = append(partial, m)
		}
	}
	s, notes, err := Choose(AssembleVersions(partial), 0)
	if err != nil || s.Version != 1 || len(notes) != 1 || !strings.Contains(notes[0], "v2 is incomplete (missing patch 3)") {
		t.Fatalf("v2 incomplete: %v %q %v", s, notes, err)
	}
	if _, _, err := Choose(AssembleVersions(partial), 2); err == nil || !strings.Contains(err.Error(), "missing patch 3") {
		t.Fatalf("-v 2 incomplete: %v", err)
	}
}
