package mailbox

import "testing"

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
