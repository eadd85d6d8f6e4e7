package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// run runs the CLI as a user would and returns its exit status and output.
func run(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var out, errOut bytes.Buffer
	code := runMain(context.Background(), args, &out, &errOut)
	return code, out.String(), errOut.String()
}

func TestSeriesCommand(t *testing.T) {
	tests := []struct {
		file    string
		subject string
		files   []string
	}{
		{"../../testdata/mbox/squashfs-thundering-herd.mbox", "[PATCH] squashfs: avoid thundering-herd cache wakeups", []string{"fs/squashfs/cache.c"}},
		{"../../testdata/mbox/fuse-waitq-rfc.mbox", "RFC fuse waitq latency", []string{"fs/fuse/dev.c"}},
	}
	for _, tt := range tests {
		code, out, errOut := run(t, "series", "--mbox", tt.file, "--json")
		if code != 0 {
			t.Fatalf("%s: exit %d\n%s", tt.file, code, errOut)
		}
		var got struct {
			Schema int `json:"schema"`
			Series []struct {
				Subject  string `json:"subject"`
				Version  int    `json:"version"`
				Total    int    `json:"total"`
				Complete bool   `json:"complete"`
				Missing  []int  `json:"missing"`
				Cover    string `json:"cover"`
				Patches  []struct {
					Index     int      `json:"index"`
					Subject   string   `json:"subject"`
					MessageID string   `json:"message_id"`
					Author    string   `json:"author"`
					Files     []string `json:"files"`
					Trailers  []any    `json:"trailers"`
				} `json:"patches"`
			} `json:"series"`
		}
		if err := json.Unmarshal([]byte(out), &got); err != nil {
			t.Fatalf("%s: output is not the documented JSON: %v\n%s", tt.file, err, out)
		}
		s := got.Series
		if got.Schema != 1 || len(s) != 1 || s[0].Subject != tt.subject || s[0].Version != 1 || s[0].Total != 1 ||
			!s[0].Complete || s[0].Missing == nil || len(s[0].Patches) != 1 ||
			!reflect.DeepEqual(s[0].Patches[0].Files, tt.files) || s[0].Patches[0].Trailers == nil {
			t.Errorf("%s: got %+v", tt.file, got)
		}
		if !strings.Contains(out, `"author": "`) || strings.Contains(out, `\u003c`) {
			t.Errorf("%s: addresses are escaped:\n%s", tt.file, out)
		}
	}

	// A reply quoting a patch: an empty array, not null.
	if _, out, _ := run(t, "series", "--json", "--mbox", "../../testdata/seeds/003_33782ee12e9f287c.txt"); !strings.Contains(out, `"series": []`) {
		t.Errorf("seed 003: %s", out)
	}
	// Text output names the patch and its files.
	if _, out, _ := run(t, "series", "--mbox", "../../testdata/mailbox/missing-part.mbox"); !strings.Contains(out, "incomplete: missing patch 2 of 3") {
		t.Errorf("text output:\n%s", out)
	}
	// A missing file is an error that says what was being read.
	if code, _, errOut := run(t, "series", "--mbox", "/nonexistent.mbox"); code != exitInfra || !strings.Contains(errOut, "opening mbox") {
		t.Errorf("missing file: exit %d, %s", code, errOut)
	}
}

// -o writes the series to test as an mbox git am takes, and -o - to stdout.
func TestSeriesWritesAmMbox(t *testing.T) {
	dir := t.TempDir()
	code, _, errOut := run(t, "series", "--mbox", "../../testdata/mbox/squashfs-thundering-herd.mbox", "-o", dir)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	files, _ := filepath.Glob(filepath.Join(dir, "*.mbx"))
	if len(files) != 1 || !strings.HasPrefix(filepath.Base(files[0]), "20260724_usama_arif_squashfs") {
		t.Fatalf("-o wrote %v", files)
	}
	data, _ := os.ReadFile(files[0])
	_, out, _ := run(t, "series", "--mbox", "../../testdata/mbox/squashfs-thundering-herd.mbox", "-o", "-")
	if out != string(data) || !strings.Contains(out, "diff --git a/fs/squashfs/cache.c") {
		t.Errorf("-o - differs from the file -o DIR wrote, or holds no diff")
	}
	if code, _, errOut := run(t, "series", "--mbox", "../../testdata/mbox/squashfs-thundering-herd.mbox", "-o", "-", "-v", "3"); code != exitInfra || !strings.Contains(errOut, "no v3") {
		t.Errorf("-v 3 of a v1 series: exit %d, %s", code, errOut)
	}
}

// What the command line prints on stderr is escaped: here a file name
// with an escape sequence in the error. (Stdout into a pipe or a file is
// data and stays byte for byte; on a terminal it is escaped too.)
func TestStderrIsInert(t *testing.T) {
	name := filepath.Join(t.TempDir(), "no\x1b]0;pwned\x07such\u009b2J.mbox")
	code, _, errOut := run(t, "series", "--mbox", name)
	if code == 0 {
		t.Fatal("a missing mbox was read")
	}
	if strings.ContainsAny(errOut, "\x1b\x07\u009b") {
		t.Errorf("stderr carries a control character: %q", errOut)
	}
	if !strings.Contains(errOut, `no\x1b]0;pwned\x07such\u009b2J.mbox`) {
		t.Errorf("stderr does not name the file, escaped: %q", errOut)
	}
}
