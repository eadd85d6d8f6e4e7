package mailbox

import (
	"io"
	"mime"
	"strings"
	"unicode/utf8"

	// Registers the charsets of golang.org/x/text with go-message, for
	// bodies and header words (ISO-8859-*, Windows-125x, KOI8, Shift JIS,
	// GB 2312, ...), as Python's codecs give them to b4.
	gmcharset "github.com/emersion/go-message/charset"
)

// Text is decoded as b4 decodes it: by its charset when that is known,
// else as UTF-8 (b4 catches Python's LookupError and reads UTF-8), and
// every byte that does not decode becomes U+FFFD (errors='replace'). So
// what patchbot hands to git am is always valid UTF-8, and a mail in an
// odd charset still applies.

// textCharsetReader converts from a known charset; an unknown one is
// read as it is, to be cleaned by validUTF8.
func textCharsetReader(charset string, input io.Reader) (io.Reader, error) {
	if r, err := gmcharset.Reader(charset, input); err == nil {
		return r, nil
	}
	return input, nil
}

var headerDecoder = &mime.WordDecoder{CharsetReader: textCharsetReader}

// decodeHeaderText decodes the RFC 2047 words of a header field. A word
// that does not decode (a broken encoding) is kept as written; the result
// is valid UTF-8. changed says that bytes were replaced.
func decodeHeaderText(v string) (text string, replaced bool) {
	d, err := headerDecoder.DecodeHeader(v)
	if err != nil {
		d = v
	}
	return validUTF8(d)
}

// validUTF8 replaces each byte that is not part of valid UTF-8 with
// U+FFFD.
func validUTF8(s string) (string, bool) {
	if utf8.ValidString(s) {
		return s, false
	}
	var b strings.Builder
	b.Grow(len(s) + 16)
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && n == 1 {
			b.WriteRune(utf8.RuneError)
		} else {
			b.WriteString(s[i : i+n])
		}
		i += n
	}
	return b.String(), true
}
