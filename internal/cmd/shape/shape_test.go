package main

import (
	"bytes"
	"fmt"
	"strings"
	"testing"
)

// The fixture module in testdata/mod has known answers: its exported
// names, a cycle among three files, a walk that climbs twice, and one
// run of seven identical lines beside tables that do not count.
func TestShapeOfFixture(t *testing.T) {
	m, err := load("testdata/mod")
	if err != nil {
		t.Fatal(err)
	}
	for rel, want := range map[string]api{"low": {6, 1, 3}, "top": {2, 0, 1}, "mid": {1, 0, 0}} {
		if got := exported(m.byRel[rel]); got != want {
			t.Errorf("%s: exported %+v, want %+v", rel, got, want)
		}
	}

	arrows, cyclic, back := fileArrows(m.byRel["top"])
	if len(arrows) != 4 || len(cyclic) != 4 || len(back) != 2 {
		t.Errorf("top's arrows %v, on a cycle %v, back up %v: want 4, 4 and 2", arrows, cyclic, back)
	}

	wk, err := walk(m, "top.Start:req")
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(wk.folders, " "); got != "top low mid low top" || wk.moves != 4 || wk.climbs != 2 || wk.homeEntries != 2 {
		t.Errorf("walk: folders %q, %d moves, %d climbs, home %d times; want top low mid low top, 4, 2, 2 (entered %v)",
			got, wk.moves, wk.climbs, wk.homeEntries, wk.entered)
	}
	if got := fmt.Sprint(wk.calls); got != "[low.Double mid.Work top.helper]" {
		t.Errorf("the start enters %s, want low.Double, mid.Work, top.helper (never low.Ignored: not handed req)", got)
	}
	if _, err := walk(m, "top.Start:nosuch"); err == nil {
		t.Error("a walk from a parameter that does not exist was accepted")
	}

	ds := dupes(m)
	if len(ds) != 1 || ds[0].lines != 7 || ds[0].a.file+ds[0].b.file != "low/dup1.golow/dup2.go" && ds[0].a.file+ds[0].b.file != "low/dup2.golow/dup1.go" {
		t.Errorf("dupes %v, want the one run of 7 lines in low/dup1.go and low/dup2.go", ds)
	}

	var out bytes.Buffer
	if err := report(&out, m, "top", "top.Start:req", false); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"| low | ", "top: 3 files, 4 file-to-file arrows, 4 on a cycle, 2 back up", "4 moves, 2 climbs back up",
		"production code: 1"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("report lacks %q:\n%s", want, out.String())
		}
	}
}
