package mailbox

import (
	"regexp"
	"strings"
)

// Which follow-up lines are trailers, as b4 reads them (b4 0.17's rules,
// written anew here):
//   - a line "Name: value" whose name is a word of ASCII (quoted lines,
//     "> Reviewed-by:", never match), above the "-- " signature;
//   - a person trailer names someone: its value holds an address. Any name
//     goes (Reviewed-by, Acked-by, Co-developed-by, Reported-by, ...);
//   - a few trailers name no one: Fixes (a commit hash), Link, BugLink,
//     Closes (the only ones that may hold a URL), Obsoleted-by;
//   - mail-header-like names (From, To, Cc, Subject, Date, Message-ID,
//     Base-commit, Change-ID, ...) and contact lines (Phone, Email) are not
//     trailers;
//   - an address mangled by a mail client ("Name <a@b.c<mailto:a@b.c>>")
//     is cleaned to "Name <a@b.c>";
//   - a person trailer counts only when it names the sender (the same
//     address, give or take a "+tag" or a subdomain, or the same name):
//     a trailer pasted from someone else's mail is not theirs to give.
var (
	mailtoJunk    = regexp.MustCompile(`<mailto:[^>]+>`)
	hashtagInfo   = regexp.MustCompile(`(.*\S+)(\s+#[^#]+)$`)
	wrappedFixes  = regexp.MustCompile(`(?m)^(\S+:\s+[\da-f]+\s+\([^)]+)\n([^\n]+\))`)
	wrappedPerson = regexp.MustCompile(`(?m)^(\S+:\s+[^<\n]+)\n(<[^>\n]+>)$`)
)

var (
	notTrailers  = map[string]bool{"phone": true, "mail": true, "email": true, "e-mail": true, "prerequisite-message-id": true}
	headerNames  = map[string]bool{"subject": true, "date": true, "from": true}
	linkNames    = map[string]bool{"link": true, "buglink": true, "closes": true}
	nonPerson    = map[string]bool{"link": true, "buglink": true, "closes": true, "fixes": true, "subject": true, "date": true, "obsoleted-by": true, "change-id": true, "base-commit": true}
	notFollowups = map[string]bool{"from": true, "author": true, "cc": true, "to": true, "date": true, "subject": true,
		"subscribe": true, "unsubscribe": true, "base-commit": true, "change-id": true, "message-id": true}
	utilityNames = map[string]bool{"fixes": true, "link": true, "buglink": true, "closes": true, "obsoleted-by": true,
		"message-id": true, "change-id": true, "base-commit": true, "based-on": true}
)

// findTrailers returns the trailer-shaped lines of a body, header-like
// ones (base-commit:) included: b4 takes a mail that answers another and
// has any of them for a follow-up. followupTrailers drops those.
func findTrailers(body string) []Trailer {
	var out []Trailer
	scanTrailers(body, func(t Trailer) bool {
		out = append(out, t)
		return true
	})
	return out
}

// hasTrailer says whether findTrailers would find any.
func hasTrailer(body string) bool {
	found := false
	scanTrailers(body, func(Trailer) bool {
		found = true
		return false
	})
	return found
}

// scanTrailers calls fn with each trailer of body until fn returns false.
// It is on the path of every follow-up, so the common lines are judged
// without regular expressions.
func scanTrailers(body string, fn func(Trailer) bool) {
	body, _, _ = strings.Cut(body, "\n-- \n")
	if strings.IndexByte(body, '\r') >= 0 {
		body = strings.ReplaceAll(body, "\r\n", "\n")
	}
	body = strings.TrimSpace(body)
	// Trailers wrapped by a mail client onto two lines.
	if strings.Contains(body, ")\n") {
		body = wrappedFixes.ReplaceAllString(body, "$1 $2")
	}
	if strings.Contains(body, "\n<") {
		body = wrappedPerson.ReplaceAllString(body, "$1 $2")
	}
	other := false
	for line := range strings.Lines(body) {
		line = strings.TrimRight(line, "\r\n")
		name, value, ok := trailerShape(line)
		if !ok {
			if strings.TrimSpace(line) != "" {
				other = true
			}
			continue
		}
		low := strings.ToLower(name)
		switch {
		case notTrailers[low], other && headerNames[low], !isASCII(low):
			continue
		case !hasAddress(value) && !nonPerson[low]:
			continue
		case (strings.Contains(value, "http://") || strings.Contains(value, "https://")) && !linkNames[low]:
			continue
		case low == "fixes" && !hexPrefix(value, 6):
			continue
		}
		// A " # comment" after the value stays with it, as b4 keeps it.
		info := ""
		if strings.IndexByte(value, '#') >= 0 {
			if h := hashtagInfo.FindStringSubmatch(value); h != nil {
				value, info = h[1], h[2]
			}
		}
		if !fn(Trailer{Name: name, Value: cleanTrailerValue(low, strings.TrimSpace(value)) + info}) {
			return
		}
	}
}

// trailerShape matches `^\s*(\w\S+):\s+(\S.*)`: a first word of at least
// two characters, starting with a letter, digit or '_', that ends in ':'
// and is followed by blanks and a value.
func trailerShape(line string) (name, value string, ok bool) {
	rest := strings.TrimLeft(line, " \t\f")
	end := strings.IndexAny(rest, " \t\f")
	if end < 3 || rest[end-1] != ':' {
		return "", "", false
	}
	c := rest[0]
	if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_') {
		return "", "", false
	}
	value = strings.TrimLeft(rest[end:], " \t\f")
	if value == "" {
		return "", "", false
	}
	return rest[:end-1], value, true
}

// hasAddress matches `\S+@\S+\.\S+`: an '@' inside a word, with a '.'
// later in that word that is not right after the '@' nor its last char.
func hasAddress(v string) bool {
	for i := 1; i < len(v); i++ {
		if v[i] != '@' || isSpace(v[i-1]) || i+1 >= len(v) || isSpace(v[i+1]) {
			continue
		}
		for j := i + 2; j < len(v)-1 && !isSpace(v[j]); j++ {
			if v[j] == '.' && !isSpace(v[j+1]) {
				return true
			}
		}
	}
	return false
}

func isSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' }

func hexPrefix(v string, n int) bool {
	if len(v) < n {
		return false
	}
	for i := 0; i < n; i++ {
		c := v[i]
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F') {
			return false
		}
	}
	return true
}

// cleanTrailerValue normalises a person trailer to "Name <addr>".
func cleanTrailerValue(low, v string) string {
	if utilityNames[low] || strings.Contains(v, "://") || !hasAddress(v) {
		return v
	}
	if strings.Contains(v, "<mailto:") {
		v = mailtoJunk.ReplaceAllString(v, "")
	}
	if name, addr, ok := splitNameAddr(v); ok {
		if name == "" {
			return addr
		}
		return name + " <" + addr + ">"
	}
	return strings.TrimSpace(v)
}

// splitNameAddr matches `^(.*?)\s*<([^>]+)>\s*$` and returns both groups
// trimmed.
func splitNameAddr(v string) (name, addr string, ok bool) {
	v = strings.TrimRight(v, " \t\n\r\f")
	if !strings.HasSuffix(v, ">") {
		return "", "", false
	}
	end := len(v) - 1
	k := strings.LastIndexByte(v[:end], '>')
	lt := strings.IndexByte(v[k+1:end], '<')
	if lt < 0 {
		return "", "", false
	}
	lt += k + 1
	if lt+1 >= end {
		return "", "", false
	}
	return strings.TrimSpace(v[:lt]), strings.TrimSpace(v[lt+1 : end]), true
}

// isPerson says whether a trailer names someone (and so must name the
// sender of the mail that gives it).
func (t Trailer) isPerson() bool {
	low := strings.ToLower(t.Name)
	if low == "fixes" {
		return false
	}
	return !utilityNames[low] && !strings.Contains(t.Value, "://") && hasAddress(t.Value)
}

// trailerAddr splits "Name <addr>" (or a bare address), without a
// trailing " # comment".
func trailerAddr(v string) (name, addr string) {
	if strings.IndexByte(v, '#') >= 0 {
		if h := hashtagInfo.FindStringSubmatch(v); h != nil && strings.Contains(h[1], "@") {
			v = h[1]
		}
	}
	if name, addr, ok := splitNameAddr(v); ok {
		return name, addr
	}
	return "", strings.TrimSpace(v)
}

// givenBySender says whether a person trailer names the sender, as b4
// does without --sloppy-trailers.
func givenBySender(t Trailer, fromName, fromAddr string) bool {
	name, addr := trailerAddr(t.Value)
	if sameAddr(addr, fromAddr) {
		return true
	}
	tl, hl := strings.ToLower(name), strings.ToLower(fromName)
	if tl != "" && tl == hl {
		return true
	}
	// "Last, First" in From: every part must be in the header name.
	if strings.Index(hl, ",") > 0 {
		for _, chunk := range strings.Split(hl, ",") {
			if !strings.Contains(hl, strings.TrimSpace(chunk)) {
				return false
			}
		}
		return true
	}
	return false
}

// sameAddr compares addresses as b4 does: case-insensitively, ignoring a
// "+tag" in the local part, and one domain being a subdomain of the other
// (foo@linux.intel.com is foo@intel.com).
func sameAddr(a, b string) bool {
	a, b = strings.ToLower(a), strings.ToLower(b)
	if a == b {
		return a != ""
	}
	al, ad, ok1 := strings.Cut(a, "@")
	bl, bd, ok2 := strings.Cut(b, "@")
	if !ok1 || !ok2 {
		return false
	}
	al, _, _ = strings.Cut(al, "+")
	bl, _, _ = strings.Cut(bl, "+")
	if al != bl {
		return false
	}
	if ad == bd {
		return true
	}
	dots := strings.Count(ad, ".") - strings.Count(bd, ".")
	return (dots == 1 || dots == -1) && (strings.HasSuffix(ad, "."+bd) || strings.HasSuffix(bd, "."+ad))
}

func isASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] >= 0x80 {
			return false
		}
	}
	return true
}

// fromNameAddr splits a Message's From ("Name <addr>").
func fromNameAddr(from string) (string, string) {
	name, addr := trailerAddr(from)
	if addr == "" || !strings.Contains(addr, "@") {
		return name, AddrOf(from)
	}
	if name == "" {
		name = addr
	}
	return strings.Trim(name, `"`), addr
}
