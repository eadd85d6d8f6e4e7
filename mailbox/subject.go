package mailbox

import (
	"strconv"
	"strings"
)

// Subject is what the bracketed tags of a patch subject say, e.g.
// "[PATCH net-next v3 2/5] foo: bar" or "Re: [RFC PATCH] baz".
type Subject struct {
	Reply   bool // "Re:", "Aw:", "Fwd:" ... before the tags
	Patch   bool // a PATCH tag (also "PATCHv2", "PATCH-next")
	RFC     bool // an RFC tag (any tag that starts with RFC, as b4 reads it)
	Resend  bool // a RESEND tag (likewise)
	Version int  // vN, 1 if none
	// Versioned: the version was tagged (v1 too), not taken as 1. b4 am
	// keeps the tag then.
	Versioned bool
	Index     int      // m of m/n, 0 if no counter (also for a cover letter)
	Total     int      // n of m/n, 0 if no counter
	Prefixes  []string // other tags, e.g. "net-next"
	Title     string   // the subject without reply markers and tags
}

// Counted reports whether the subject had an m/n counter.
func (s Subject) Counted() bool { return s.Total > 0 }

// ParseSubject reads the tags of a subject line.
func ParseSubject(subj string) Subject {
	s := Subject{Version: 1}
	rest := strings.TrimSpace(subj)
	for {
		rest = strings.TrimSpace(rest)
		if p, ok := cutReplyPrefix(rest); ok {
			s.Reply = true
			rest = p
			continue
		}
		if !strings.HasPrefix(rest, "[") {
			break
		}
		end := strings.IndexByte(rest, ']')
		if end < 0 {
			break
		}
		s.readTags(rest[1:end])
		rest = rest[end+1:]
	}
	s.Title = collapseSpace(rest)
	return s
}

// cutReplyPrefix removes one "Re:", "RE:", "Aw:", "Fwd:", "Fw:" marker.
func cutReplyPrefix(s string) (string, bool) {
	i := strings.IndexByte(s, ':')
	if i < 2 || i > 3 {
		return s, false
	}
	switch strings.ToLower(s[:i]) {
	case "re", "aw", "fwd", "fw", "sv":
		return s[i+1:], true
	}
	return s, false
}

func (s *Subject) readTags(tags string) {
	for _, tok := range strings.FieldsFunc(tags, func(r rune) bool { return r == ' ' || r == ',' || r == '\t' }) {
		low := strings.ToLower(tok)
		switch {
		case low == "patch":
			s.Patch = true
		case strings.HasPrefix(low, "rfc"):
			s.RFC = true
		case strings.HasPrefix(low, "resend"):
			s.Resend = true
		case strings.HasPrefix(low, "patch"):
			// "PATCHv2", "PATCH-v2"
			s.Patch = true
			if v, ok := version(strings.TrimLeft(low[len("patch"):], "-_")); ok {
				s.Version, s.Versioned = v, true
			} else {
				s.Prefixes = append(s.Prefixes, tok)
			}
		default:
			if v, ok := version(low); ok {
				s.Version, s.Versioned = v, true
				continue
			}
			if m, n, ok := counter(low); ok {
				s.Index, s.Total = m, n
				continue
			}
			s.Prefixes = append(s.Prefixes, tok)
		}
	}
}

// version parses "v3" (also "V3").
func version(tok string) (int, bool) {
	if len(tok) < 2 || tok[0] != 'v' {
		return 0, false
	}
	v, err := strconv.Atoi(tok[1:])
	if err != nil || v <= 0 || v > 1000 {
		return 0, false
	}
	return v, true
}

// counter parses "2/5" (also "02/15").
func counter(tok string) (m, n int, ok bool) {
	a, b, found := strings.Cut(tok, "/")
	if !found {
		return 0, 0, false
	}
	m, err1 := strconv.Atoi(a)
	n, err2 := strconv.Atoi(b)
	if err1 != nil || err2 != nil || n <= 0 || m < 0 || m > n || n > 10000 {
		return 0, 0, false
	}
	return m, n, true
}
