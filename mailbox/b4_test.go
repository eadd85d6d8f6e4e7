package mailbox

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"

	"github.com/patchbot/patchbot/internal/testenv"
)

var update = flag.Bool("update", false, "rewrite testdata/b4/*.want from what Assemble gives (then read the diff)")

// summary is what a case's .want file holds: for each series its version,
// count, completeness and cover, the cover trailers, and each patch with
// its Message-ID, whether it is corrupt, and its trailers.
func summary(series []*Series) string {
	var b strings.Builder
	for _, s := range series {
		cover := "-"
		if s.Cover != nil {
			cover = s.Cover.MessageID
		}
		fmt.Fprintf(&b, "series v%d %d/%d complete=%v cover=%s am=%s\n", s.Version, len(s.Patches), s.Total, s.Complete, cover, s.AmName())
		for _, t := range s.CoverTrailers {
			fmt.Fprintf(&b, "  cover-trailer %s\n", t)
		}
		for _, p := range s.Patches {
			id := p.MessageID
			if id == "" {
				id = "(no Message-ID)"
			}
			fmt.Fprintf(&b, "  patch %d v%d %s\n", p.Index, p.Version, id)
			if p.Corrupt != "" {
				fmt.Fprintf(&b, "    corrupt: %s\n", p.Corrupt)
			}
			for _, t := range p.Trailers {
				fmt.Fprintf(&b, "    %s\n", t)
			}
		}
	}
	return b.String()
}

// TestB4Cases: each case of testdata/b4 (made for patchbot, of the kinds
// b4's own test suite has) assembles to its .want.
func TestB4Cases(t *testing.T) {
	files, _ := filepath.Glob("../testdata/b4/*.mbox")
	if len(files) < 10 {
		t.Fatalf("found %d cases", len(files))
	}
	for _, f := range files {
		t.Run(strings.TrimSuffix(filepath.Base(f), ".mbox"), func(t *testing.T) {
			got := summary(Assemble(readFixture(t, f)))
			wantFile := strings.TrimSuffix(f, ".mbox") + ".want"
			if *update {
				if err := os.WriteFile(wantFile, []byte(got), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(wantFile)
			if err != nil {
				t.Fatal(err)
			}
			if got != string(want) {
				t.Errorf("got:\n%s\nwant:\n%s", got, want)
			}
		})
	}
}

// b4Differs lists the cases where Debian's b4 0.12 is known to give
// another answer than b4 0.17, whose rules Assemble follows.
var b4Differs = map[string]string{
	"mangled-address.mbox": "0.12 drops a trailer whose address a mail client mangled; 0.17 cleans it",
	"no-message-id.mbox":   "b4 cannot use a mail without a Message-ID; patchbot keeps it in its series",
	"naked-cover.mbox":     "0.12 takes no cover letter that has neither 0/n nor a diffstat; 0.17 takes the same sender's thread root, and its trailers",
	"trailers-single.mbox": "0.12 takes no Link: or Closes: from a follow-up; 0.17 does",
}

// TestB4Compare runs Debian's b4 (b4 am -t, which also applies the cover
// letter's trailers, as 0.17 does by default) on every case and fixture,
// and compares the patches, their order, the trailers added to each and
// the subject of each am mail (the tags b4 keeps, RFC among them, and
// undecodable bytes as U+FFFD).
func TestB4Compare(t *testing.T) {
	b4 := testenv.Tool(t, "b4")
	var files []string
	for _, pat := range []string{"../testdata/b4/*.mbox", "../testdata/mbox/*.mbox", "../testdata/mailbox/*.mbox"} {
		m, _ := filepath.Glob(pat)
		files = append(files, m...)
	}
	home := t.TempDir()
	var mu sync.Mutex
	agree := map[string]int{}
	total := map[string]int{}
	// Each b4 is a Python process of its own: two at a time on two cores.
	t.Run("cases", func(t *testing.T) {
		for _, f := range files {
			set := filepath.Base(filepath.Dir(f))
			name := filepath.Base(f)
			t.Run(set+"/"+name, func(t *testing.T) {
				t.Parallel()
				series := Assemble(readFixture(t, f))
				ours := ourAdded(series)
				theirs := b4Added(t, b4, home, f)
				if name := b4AmName(t, b4, home, f); len(series) == 1 && name != series[0].AmName() && b4Differs[filepath.Base(f)] == "" {
					t.Errorf("%s: b4 am -o names the mbox %s, AmName gives %s", f, name, series[0].AmName())
				}
				same := ours == theirs
				mu.Lock()
				total[set]++
				if same {
					agree[set]++
				}
				mu.Unlock()
				why, differs := b4Differs[name]
				switch {
				case !same && !differs:
					t.Errorf("%s: b4 0.12 gives\n%s\npatchbot gives\n%s", f, theirs, ours)
				case same && differs:
					t.Errorf("%s: listed as differing (%s) but b4 agrees", f, why)
				case !same:
					t.Logf("%s: b4 0.12 differs, as expected: %s", name, why)
				}
			})
		}
	})
	for _, set := range []string{"b4", "mbox", "mailbox"} {
		t.Logf("testdata/%s: b4 0.12 agrees on %d of %d", set, agree[set], total[set])
	}
}

// ourAdded is, per patch, the Message-ID and the trailers the am mail
// gains (those not in the patch already), sorted.
func ourAdded(series []*Series) string {
	var b strings.Builder
	for _, s := range series {
		for _, p := range s.Patches {
			var add []string
			for _, t := range p.Trailers {
				if !strings.Contains("\n"+p.Message.Body, "\n"+t.String()+"\n") {
					add = append(add, t.String())
				}
			}
			sort.Strings(add)
			am, err := ParseBytes(p.Raw)
			if err != nil {
				panic(err)
			}
			fmt.Fprintf(&b, "%s %s\n  subject %s\n", p.MessageID, strings.Join(add, " | "), am.Subject)
		}
	}
	return b.String()
}

var trailerShaped = regexp.MustCompile(`^[\w-]+: \S`)

// b4Added runs b4 am -t on a file and gives what ourAdded gives.
func b4Added(t *testing.T, b4, home, file string) string {
	t.Helper()
	orig := map[string]*Message{}
	for _, m := range readFixture(t, file) {
		orig[m.MessageID] = m
	}
	abs, err := filepath.Abs(file)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(b4, "-n", "--offline-mode", "am", "-t", "-m", abs, "-o", "-")
	cmd.Dir = home
	cmd.Env = append(os.Environ(), "HOME="+home, "XDG_CONFIG_HOME="+home, "XDG_CACHE_HOME="+home,
		"GIT_CONFIG_GLOBAL=/dev/null", "GIT_CONFIG_COUNT=2",
		"GIT_CONFIG_KEY_0=user.name", "GIT_CONFIG_VALUE_0=Test",
		"GIT_CONFIG_KEY_1=user.email", "GIT_CONFIG_VALUE_1=test@example.org")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil && stdout.Len() == 0 {
		t.Fatalf("b4 am -t %s: %v\n%s", file, err, stderr.String())
	}
	var b strings.Builder
	err = ReadMbox(&stdout, func(raw []byte, _ int64) error {
		m, err := ParseBytes(raw)
		if err != nil {
			return err
		}
		had := ""
		if o := orig[m.MessageID]; o != nil {
			had = "\n" + o.Body
		}
		msg, _, _ := strings.Cut(m.Body, "\n---\n")
		msg, _, _ = strings.Cut(msg, "\ndiff --git ")
		var add []string
		for line := range strings.Lines(msg) {
			line = strings.TrimRight(line, "\n")
			if trailerShaped.MatchString(line) && !strings.Contains(had, "\n"+line+"\n") {
				add = append(add, line)
			}
		}
		sort.Strings(add)
		fmt.Fprintf(&b, "%s %s\n  subject %s\n", m.MessageID, strings.Join(add, " | "), m.Subject)
		return nil
	})
	if err != nil {
		t.Fatalf("reading b4's output for %s: %v\n%s", file, err, stderr.String())
	}
	return b.String()
}

// b4AmName is the name b4 am -o DIR gives the mbox it writes.
func b4AmName(t *testing.T, b4, home, file string) string {
	abs, _ := filepath.Abs(file)
	out := t.TempDir()
	cmd := exec.Command(b4, "-n", "--offline-mode", "am", "-t", "-m", abs, "-o", out)
	cmd.Dir = home
	cmd.Env = append(os.Environ(), "HOME="+home, "XDG_CONFIG_HOME="+home, "XDG_CACHE_HOME="+home,
		"GIT_CONFIG_GLOBAL=/dev/null", "GIT_CONFIG_COUNT=2",
		"GIT_CONFIG_KEY_0=user.name", "GIT_CONFIG_VALUE_0=Test",
		"GIT_CONFIG_KEY_1=user.email", "GIT_CONFIG_VALUE_1=test@example.org")
	cmd.Run()
	m, _ := filepath.Glob(filepath.Join(out, "*.mbx"))
	if len(m) != 1 {
		return ""
	}
	return filepath.Base(m[0])
}

// TestCoverTrailersApplied: the cover letter's trailers are in the JSON of
// every patch and in the commits git am makes, and a corrupt patch is in
// the JSON with its reason.
func TestCoverTrailersApplied(t *testing.T) {
	s := Assemble(readFixture(t, "../testdata/b4/cover-trailers.mbox"))[0]
	data, err := s.MarshalJSON()
	if err != nil {
		t.Fatal(err)
	}
	var got struct {
		CoverTrailers []Trailer `json:"cover_trailers"`
		Patches       []struct {
			Trailers []Trailer `json:"trailers"`
		} `json:"patches"`
	}
	if err := json.Unmarshal(data, &got); err != nil {
		t.Fatal(err)
	}
	want := Trailer{Name: "Reviewed-by", Value: "Bob Reviewer <bob@example.org>", MessageID: "c-r0@demo.example"}
	if len(got.CoverTrailers) != 1 || got.CoverTrailers[0] != want {
		t.Fatalf("cover_trailers %+v in %s", got.CoverTrailers, data)
	}
	for i, p := range got.Patches {
		if !slices.Contains(p.Trailers, want) {
			t.Errorf("patch %d trailers %+v lack the cover's", i+1, p.Trailers)
		}
	}
	// And git am -3 puts the cover's trailers in both commits.
	testenv.Tools(t, "git")
	dir := demoRepo(t)
	var mbox bytes.Buffer
	if err := s.WriteMbox(&mbox); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("git", "am", "-3")
	cmd.Dir, cmd.Stdin, cmd.Env = dir, &mbox, gitEnv()
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("git am: %v\n%s", err, out)
	}
	log := git(t, dir, "log", "--format=%B%x00", "-n", "2")
	if n := strings.Count(log, want.String()); n != 2 {
		t.Errorf("the cover's trailer is in %d of 2 commits:\n%s", n, log)
	}

	path, err := s.WriteAmFile(filepath.Join(t.TempDir(), "out"))
	if err != nil || filepath.Base(path) != "v2_20261103_ada_demo_two_changes.mbx" {
		t.Fatalf("WriteAmFile: %s, %v", path, err)
	}
	if data, _ := os.ReadFile(path); strings.Count(string(data), want.String()) != 2 {
		t.Errorf("%s lacks the cover trailers:\n%s", path, data)
	}

	c := Assemble(readFixture(t, "../testdata/b4/corrupt-hunk.mbox"))[0]
	data, _ = c.MarshalJSON()
	if !c.Complete || len(c.Patches) != 2 || !strings.Contains(string(data), `"corrupt":"malformed hunk header`) ||
		!strings.Contains(c.Reason, "patch 2/2 does not apply: malformed hunk header") {
		t.Errorf("corrupt series: complete %v, %d patches, reason %q\n%s", c.Complete, len(c.Patches), c.Reason, data)
	}
}

// b4CommitsDiffer lists the fixtures whose commits differ from Debian's
// b4 0.12's, and why.
var b4CommitsDiffer = map[string]string{
	"attachment.mbox": "b4 0.12 leaves the commit message empty when the patch is an attachment; patchbot keeps the text part",
}

// TestB4SameCommits applies b4 am's mbox and patchbot's to the demo tree
// with git am, for every demo fixture whose series is whole, and compares
// the commits: author, subject, message and tree. rfc-charset.mbox has an
// RFC series whose subject is an encoded word in an unknown charset, a
// body in that charset and one said to be UTF-8 that is not: both
// decode it as U+FFFD, keep [PATCH RFC m/n], and git am applies both.
func TestB4SameCommits(t *testing.T) {
	b4 := testenv.Tool(t, "b4")
	testenv.Tools(t, "git")
	files, _ := filepath.Glob("../testdata/mailbox/*.mbox")
	home := t.TempDir()
	compared := 0
	for _, f := range files {
		all := AssembleVersions(readFixture(t, f))
		s, _, err := Choose(all, 0)
		if err != nil {
			continue // incomplete: b4 writes what it has, patchbot refuses
		}
		t.Run(filepath.Base(f), func(t *testing.T) {
			var ours bytes.Buffer
			if err := s.WriteMbox(&ours); err != nil {
				t.Fatal(err)
			}
			abs, _ := filepath.Abs(f)
			cmd := exec.Command(b4, "-n", "--offline-mode", "am", "-t", "-m", abs, "-o", "-")
			cmd.Dir = home
			cmd.Env = append(os.Environ(), "HOME="+home, "XDG_CONFIG_HOME="+home, "XDG_CACHE_HOME="+home,
				"GIT_CONFIG_GLOBAL=/dev/null", "GIT_CONFIG_COUNT=2",
				"GIT_CONFIG_KEY_0=user.name", "GIT_CONFIG_VALUE_0=Test",
				"GIT_CONFIG_KEY_1=user.email", "GIT_CONFIG_VALUE_1=test@example.org")
			theirs, err := cmd.Output()
			if err != nil && len(theirs) == 0 {
				t.Fatalf("b4 am: %v", err)
			}
			apply := func(mbox []byte) string {
				dir := demoRepo(t)
				am := exec.Command("git", "am", "-3")
				am.Dir, am.Env, am.Stdin = dir, gitEnv(), bytes.NewReader(mbox)
				if out, err := am.CombinedOutput(); err != nil {
					t.Fatalf("git am -3: %v\n%s\nmbox:\n%s", err, out, mbox)
				}
				return git(t, dir, "log", "--format=%an <%ae>%n%s%n%n%b%n--", "-n", fmt.Sprint(len(s.Patches))) +
					git(t, dir, "rev-parse", "HEAD^{tree}")
			}
			a, b := apply(theirs), apply(ours.Bytes())
			why, differs := b4CommitsDiffer[filepath.Base(f)]
			switch {
			case a != b && !differs:
				t.Errorf("b4's commits:\n%s\npatchbot's:\n%s", a, b)
			case a == b && differs:
				t.Errorf("listed as differing (%s) but b4 agrees", why)
			case differs:
				t.Logf("b4 0.12 differs, as expected: %s", why)
			}
			if strings.Contains(f, "rfc-charset") {
				am, err := ParseBytes(s.Patches[0].Raw)
				if err != nil || am.Subject != "[PATCH RFC 1/2] demo: caf\uFFFD line 3" {
					t.Errorf("the am subject is %q (%v)", am.Subject, err)
				}
				for _, want := range []string{"demo: caf\uFFFD line 3", "R\uFFFDsum\uFFFD", "Ad\uFFFD Dev <ada@example.org>", "caf\uFFFD is Latin-1"} {
					if !strings.Contains(b, want) {
						t.Errorf("commits lack %q:\n%s", want, b)
					}
				}
			}
		})
		compared++
	}
	if compared < 4 {
		t.Fatalf("compared %d fixtures", compared)
	}
}
