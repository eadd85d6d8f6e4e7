package store

import (
	"fmt"
	"reflect"
	"strings"
	"unicode/utf8"
)

// Text is a string as the store keeps it in a text column: s itself when
// it is valid UTF-8 without a NUL byte, else s with each NUL and each byte
// that is not UTF-8 written as \xHH. PostgreSQL refuses both in a text
// value, and a mail's Message-ID, References or Subject can hold either:
// kept as they came, one such mail would fail the transaction that keeps
// it, at every read of its source. SQLite would keep them, so both
// engines keep Text's form: a key is the same key on either.
//
// Every string a query is given passes through Text (the runner's
// arguments), so that a lookup with the raw value finds what was kept.
// Text(Text(s)) is Text(s); two raw values can share a kept form (a
// literal "\xff" and the byte 0xff), which gives a stranger nothing: a
// Message-ID is the sender's word either way.
func Text(s string) string {
	if utf8.ValidString(s) && strings.IndexByte(s, 0) < 0 {
		return s
	}
	var b strings.Builder
	b.Grow(len(s) + 8)
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		if r == 0 || r == utf8.RuneError && n == 1 {
			fmt.Fprintf(&b, `\x%02x`, s[i])
		} else {
			b.WriteString(s[i : i+n])
		}
		i += n
	}
	return b.String()
}

// textArgs are a query's arguments with every string (of any string type)
// in its kept form (Text); args itself when none changes.
func textArgs(args []any) []any {
	var out []any
	for i, a := range args {
		var s string
		switch v := a.(type) {
		case string:
			s = v
		case nil, []byte, int, int64, bool, float64:
			continue
		default:
			rv := reflect.ValueOf(a)
			if rv.Kind() != reflect.String {
				continue
			}
			s = rv.String()
		}
		t := Text(s)
		if t == s {
			continue
		}
		if out == nil {
			out = append([]any(nil), args...)
		}
		out[i] = t
	}
	if out == nil {
		return args
	}
	return out
}
