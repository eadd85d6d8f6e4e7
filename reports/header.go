package reports

import (
	"io"

	gomail "github.com/emersion/go-message/mail"
	"github.com/emersion/go-message/textproto"
)

func writeHeader(w io.Writer, h gomail.Header) error {
	return textproto.WriteHeader(w, h.Header.Header)
}
