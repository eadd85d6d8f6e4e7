package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"
)

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
		var out, errOut bytes.Buffer
		if err := runSeries(context.Background(), []string{"--mbox", tt.file, "--json"}, &out, &errOut); err != nil {
			t.Fatalf("%s: %v\n%s", tt.file, err, errOut.String())
		}
		var got []struct {
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
		}
		if err := json.Unmarshal(out.Bytes(), &got); err != nil {
			t.Fatalf("%s: output is not the documented JSON: %v\n%s", tt.file, err, out.String())
		}
		if len(got) != 1 || got[0].Subject != tt.subject || got[0].Version != 1 || got[0].Total != 1 ||
			!got[0].Complete || got[0].Missing == nil || len(got[0].Patches) != 1 ||
			!reflect.DeepEqual(got[0].Patches[0].Files, tt.files) || got[0].Patches[0].Trailers == nil {
			t.Errorf("%s: got %+v", tt.file, got)
		}
		if !strings.Contains(out.String(), `"author": "`) || strings.Contains(out.String(), `\u003c`) {
			t.Errorf("%s: addresses are escaped:\n%s", tt.file, out.String())
		}
		// Keys are spelled as documented.
		for _, key := range []string{`"subject"`, `"version"`, `"total"`, `"complete"`, `"missing"`, `"cover"`,
			`"patches"`, `"index"`, `"message_id"`, `"author"`, `"files"`, `"trailers"`} {
			if !strings.Contains(out.String(), key) {
				t.Errorf("%s: no %s in output", tt.file, key)
			}
		}
	}

	// A reply quoting a patch: an empty array, not null.
	var out bytes.Buffer
	if err := runSeries(context.Background(), []string{"--json", "--mbox", "../../testdata/seeds/003_33782ee12e9f287c.txt"}, &out, &bytes.Buffer{}); err != nil {
		t.Fatal(err)
	}
	if strings.TrimSpace(out.String()) != "[]" {
		t.Errorf("seed 003: %s", out.String())
	}

	// Text output names the patch and its files.
	out.Reset()
	if err := runSeries(context.Background(), []string{"--mbox", "../../testdata/mailbox/missing-part.mbox"}, &out, &bytes.Buffer{}); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "incomplete: missing patch 2 of 3") {
		t.Errorf("text output:\n%s", out.String())
	}

	// No source, or two: a usage error.
	for _, args := range [][]string{{}, {"--mbox", "a", "--maildir", "b"}, {"--imap", "http://x"}} {
		err := runSeries(context.Background(), args, &bytes.Buffer{}, &bytes.Buffer{})
		var ee exitError
		if !errors.As(err, &ee) || ee.code != 2 {
			t.Errorf("args %q: error %v, want exit status 2", args, err)
		}
	}
	// A missing file is an error that says what was being read.
	err := runSeries(context.Background(), []string{"--mbox", "/nonexistent.mbox"}, &bytes.Buffer{}, &bytes.Buffer{})
	if err == nil || !strings.Contains(err.Error(), "opening mbox") {
		t.Errorf("missing file: %v", err)
	}
}
