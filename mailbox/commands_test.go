package mailbox

import (
	"strings"
	"testing"
)

// base= and patches= of "#patchbot test": what is understood, and what is
// refused with a reason (a mail is hostile: no option or revision syntax
// reaches git).
func TestParseTestBaseAndPatches(t *testing.T) {
	for _, tc := range []struct {
		line        string
		base        string
		first, last int
		err         bool
	}{
		{"#patchbot test base=net-next", "net-next", 0, 0, false},
		{"#patchbot test base=1a2b3c4d5e6f cache-contention", "1a2b3c4d5e6f", 0, 0, false},
		{"#patchbot test patches=2-3", "", 2, 3, false},
		{"#patchbot test patches=2", "", 2, 2, false},
		{"#patchbot test base=vfs.fixes patches=1-2 profile=quick", "vfs.fixes", 1, 2, false},
		{"#patchbot test base=--upload-pack=x", "", 0, 0, true},
		{"#patchbot test base=HEAD~1", "", 0, 0, true},
		{"#patchbot test base=a..b", "", 0, 0, true},
		{"#patchbot test base=", "", 0, 0, true},
		{"#patchbot test patches=3-2", "", 0, 0, true},
		{"#patchbot test patches=0", "", 0, 0, true},
		{"#patchbot test patches=two", "", 0, 0, true},
	} {
		cmds := ParseCommands(&Message{Body: tc.line + "\n"})
		if len(cmds) != 1 {
			t.Fatalf("%q: %d commands", tc.line, len(cmds))
		}
		c := cmds[0]
		if (c.Err != "") != tc.err {
			t.Errorf("%q: Err = %q, want error %v", tc.line, c.Err, tc.err)
		}
		if tc.err {
			continue
		}
		if c.Base != tc.base || c.First != tc.first || c.Last != tc.last {
			t.Errorf("%q: base %q patches %d-%d, want %q %d-%d", tc.line, c.Base, c.First, c.Last, tc.base, tc.first, tc.last)
		}
	}
}

// series= names another version by a mail of it; what a sender wrote is
// kept short, however long the line.
func TestParseSeriesAndEchoBound(t *testing.T) {
	for _, tc := range []struct {
		line, series string
		err          bool
	}{
		{"#patchbot test series=<v2-1@linux.dev>", "v2-1@linux.dev", false},
		{"#patchbot test cache-contention series=v2-0@linux.dev", "v2-0@linux.dev", false},
		{"#patchbot test series=", "", true},
		{"#patchbot test series=" + strings.Repeat("x", 300), "", true},
	} {
		c := ParseCommands(&Message{Body: tc.line + "\n"})[0]
		if (c.Err != "") != tc.err || !tc.err && c.Series != tc.series {
			t.Errorf("%q: series %q, err %q; want %q, error %v", tc.line, c.Series, c.Err, tc.series, tc.err)
		}
	}
	word := "BUY-NOW-http://spam.example/" + strings.Repeat("x", 200<<10)
	c := ParseCommands(&Message{Body: "#patchbot " + word + "\n"})[0]
	if len(c.Line) > MaxLine || c.Err == "" || strings.Count(c.Err, "x") > MaxEcho {
		t.Errorf("a 200 KB word: line of %d bytes, error of %d bytes (%.100q)", len(c.Line), len(c.Err), c.Err)
	}
	if !strings.Contains(c.Err, `unknown command "BUY-NOW-http://spam.example/xxx`) {
		t.Errorf("the error does not say what was not understood: %q", c.Err)
	}
	// Two tests on different bases are two requests, not one.
	kept, ignored := FoldCommands(ParseCommands(&Message{Body: "#patchbot test base=next\n#patchbot test base=mainline\n"}), MaxCommands)
	if len(kept) != 2 || ignored != 0 {
		t.Errorf("folded to %d commands (%d ignored), want 2", len(kept), ignored)
	}
}
