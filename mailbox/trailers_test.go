package mailbox

import (
	"math/rand/v2"
	"regexp"
	"strings"
	"testing"
)

// TestTrailerShapeIsTheRegexp: the hand-written matchers on the hot path
// agree with the regular expressions b4 uses, on every line of every
// fixture and on random lines made of the characters that matter.
func TestTrailerShapeIsTheRegexp(t *testing.T) {
	line := regexp.MustCompile(`^\s*(\w\S+):\s+(\S.*)`)
	addr := regexp.MustCompile(`\S+@\S+\.\S+`)
	nameAddr := regexp.MustCompile(`^(.*?)\s*<([^>]+)>\s*$`)
	var lines []string
	for _, raw := range fixtureMails(t) {
		for l := range strings.Lines(string(raw)) {
			lines = append(lines, strings.TrimRight(l, "\r\n"))
		}
	}
	r := rand.New(rand.NewPCG(1, 2))
	alphabet := []byte("ab_1:@. \t\f<>#-x")
	for range 200000 {
		b := make([]byte, r.IntN(12))
		for i := range b {
			b[i] = alphabet[r.IntN(len(alphabet))]
		}
		lines = append(lines, string(b))
	}
	for _, l := range lines {
		name, value, ok := trailerShape(l)
		m := line.FindStringSubmatch(l)
		if ok != (m != nil) || ok && (name != m[1] || value != m[2]) {
			t.Fatalf("trailerShape(%q) = %q %q %v, regexp %q", l, name, value, ok, m)
		}
		na := nameAddr.FindStringSubmatch(l)
		if n, a, ok := splitNameAddr(l); ok != (na != nil) || ok && (n != strings.TrimSpace(na[1]) || a != strings.TrimSpace(na[2])) {
			t.Fatalf("splitNameAddr(%q) = %q %q %v, regexp %q", l, n, a, ok, na)
		}
		if hasAddress(l) != addr.MatchString(l) {
			t.Fatalf("hasAddress(%q) = %v, regexp %v", l, hasAddress(l), addr.MatchString(l))
		}
	}
}

func TestParseHunkHeaderIsTheRegexp(t *testing.T) {
	re := regexp.MustCompile(`^@@ -\d+(?:,(\d+))? \+\d+(?:,(\d+))? @@`)
	r := rand.New(rand.NewPCG(3, 4))
	alphabet := []byte("@ -+,0123 ")
	cases := []string{"@@ -1,3 +1,4 @@ fn", "@@ -1 +1 @@", "@@@ -1,1 +1,1 @@@", "@@ -a +1 @@", "@@ -1, +1 @@", "@@ -1,2 +3,4 @@"}
	for range 200000 {
		b := make([]byte, 4+r.IntN(14))
		for i := range b {
			b[i] = alphabet[r.IntN(len(alphabet))]
		}
		cases = append(cases, "@@ -"+string(b))
	}
	for _, c := range cases {
		o, n, ok := parseHunkHeader(c)
		m := re.FindStringSubmatch(c)
		if ok != (m != nil) {
			t.Fatalf("parseHunkHeader(%q) ok %v, regexp %q", c, ok, m)
		}
		if ok {
			want := func(s string) int {
				if s == "" {
					return 1
				}
				return atoiOr(s)
			}
			if o != want(m[1]) || n != want(m[2]) {
				t.Fatalf("parseHunkHeader(%q) = %d %d, regexp %q", c, o, n, m)
			}
		}
	}
}

func atoiOr(s string) int {
	n := 0
	for _, c := range s {
		n = n*10 + int(c-'0')
	}
	return n
}
