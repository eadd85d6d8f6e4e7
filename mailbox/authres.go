package mailbox

import (
	"errors"
	"fmt"
	"strings"

	"github.com/emersion/go-message/textproto"
)

// AuthResults is one Authentication-Results header field (RFC 8601): the
// server that checked the mail (its authserv-id) and what each method
// found.
type AuthResults struct {
	AuthServID string
	Results    []AuthResult
}

// AuthResult is one method's result, as in "dkim=pass header.d=linux.dev".
type AuthResult struct {
	Method string            // lower case: dkim, spf, dmarc, arc, ...
	Result string            // lower case: pass, fail, none, neutral, ...
	Props  map[string]string // "header.d" -> "linux.dev"; keys lower case, reason= included
}

// ParseAuthResults reads the value of an Authentication-Results field.
// Comments are dropped, quoted values unquoted; a method without a result
// is an error, as is an empty authserv-id.
func ParseAuthResults(v string) (AuthResults, error) {
	toks, err := authTokens(v)
	if err != nil {
		return AuthResults{}, err
	}
	var ar AuthResults
	// The first segment is the authserv-id, optionally followed by a
	// version number.
	seg, toks := nextSegment(toks)
	if len(seg) == 0 || seg[0].kind != tokWord {
		return ar, errors.New("Authentication-Results: no authserv-id")
	}
	ar.AuthServID = strings.ToLower(seg[0].text)
	for len(toks) > 0 {
		seg, toks = nextSegment(toks)
		if len(seg) == 1 && seg[0].kind == tokWord && strings.EqualFold(seg[0].text, "none") {
			continue // "no-result"
		}
		if len(seg) == 0 {
			continue
		}
		var r AuthResult
		for i := 0; i < len(seg); i += 3 {
			if i+2 >= len(seg) || seg[i].kind != tokWord || seg[i+1].kind != tokEquals || seg[i+2].kind != tokWord {
				return ar, fmt.Errorf("Authentication-Results: %q is not key=value", seg[i].text)
			}
			key, val := strings.ToLower(seg[i].text), seg[i+2].text
			if i == 0 {
				method, _, _ := strings.Cut(key, "/") // method/version
				r.Method, r.Result, r.Props = method, strings.ToLower(val), map[string]string{}
			} else {
				r.Props[key] = val
			}
		}
		ar.Results = append(ar.Results, r)
	}
	return ar, nil
}

type tokKind int

const (
	tokWord tokKind = iota
	tokEquals
	tokSemi
)

type token struct {
	kind tokKind
	text string
}

// authTokens splits a field into words, quoted strings (as words), "="
// and ";", dropping comments (nested parentheses) and blanks.
func authTokens(v string) ([]token, error) {
	var toks []token
	for i := 0; i < len(v); {
		c := v[i]
		switch {
		case c == ' ' || c == '\t' || c == '\r' || c == '\n':
			i++
		case c == '(':
			depth := 0
			for ; i < len(v); i++ {
				if v[i] == '\\' {
					i++
					continue
				}
				if v[i] == '(' {
					depth++
				} else if v[i] == ')' {
					depth--
					if depth == 0 {
						i++
						break
					}
				}
			}
			if depth != 0 {
				return nil, errors.New("Authentication-Results: unclosed comment")
			}
		case c == '"':
			var b strings.Builder
			i++
			for ; i < len(v) && v[i] != '"'; i++ {
				if v[i] == '\\' && i+1 < len(v) {
					i++
				}
				b.WriteByte(v[i])
			}
			if i >= len(v) {
				return nil, errors.New("Authentication-Results: unclosed quoted string")
			}
			i++
			toks = append(toks, token{tokWord, b.String()})
		case c == '=':
			toks = append(toks, token{tokEquals, "="})
			i++
		case c == ';':
			toks = append(toks, token{tokSemi, ";"})
			i++
		default:
			j := i
			for j < len(v) && !strings.ContainsRune(" \t\r\n()\";=", rune(v[j])) {
				j++
			}
			toks = append(toks, token{tokWord, v[i:j]})
			i = j
		}
	}
	return toks, nil
}

// nextSegment returns the tokens up to the next ";" and the rest after it.
func nextSegment(toks []token) (seg, rest []token) {
	for i, t := range toks {
		if t.kind == tokSemi {
			return toks[:i], toks[i+1:]
		}
	}
	return toks, nil
}

// TrustedAuthResults are the Authentication-Results fields of h that the
// receiving server added, as RFC 8601 has them read: only fields whose
// authserv-id is trusted, and of those only the topmost block: the first
// such field and the trusted fields after it, up to the next Received:
// field (the hop before) or From:. Everything below the block was there
// before the receiving server saw the mail: the sender's own words.
// Fields of other authserv-ids are not read at all.
func TrustedAuthResults(h textproto.Header, trusted []string) []AuthResults {
	if len(trusted) == 0 {
		return nil
	}
	var block []AuthResults
	in := false
	f := h.Fields()
	for f.Next() {
		switch strings.ToLower(f.Key()) {
		case "received", "from":
			if in {
				return block
			}
			if strings.EqualFold(f.Key(), "from") {
				return nil // below From: the sender writes
			}
		case "authentication-results":
			ar, err := ParseAuthResults(f.Value())
			if err != nil || !contains(trusted, ar.AuthServID) {
				continue
			}
			in = true
			block = append(block, ar)
		}
	}
	return block
}
