package mailbox

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
)

// ReadMbox splits an mbox stream into mails and calls fn with each one's
// raw bytes (the "From " separator removed, mboxrd/mboxo ">From " escaping
// undone) and its byte offset in the stream. raw belongs to fn. A stream
// that does not start with "From " is taken as a single mail, so a bare
// .eml file reads too. An error from fn stops the read and is returned.
//
// Both variants are read as mboxrd, as public-inbox and b4 do: every
// ">From ", ">>From ", ... line loses one '>'.
func ReadMbox(r io.Reader, fn func(raw []byte, offset int64) error) error {
	br := bufio.NewReaderSize(r, 256<<10)
	var (
		cur      []byte // the mail being read; handed to fn, never reused
		curStart int64
		offset   int64
		started  bool
		prevNL   = true // the previous line was empty (or start of file)
		sizeHint = 4096 // next mail's buffer: about the size of the last
	)
	flush := func() error {
		if !started {
			return nil
		}
		// The blank line before the next separator belongs to the format.
		msg := cur
		cur = nil
		if bytes.HasSuffix(msg, []byte("\n\n")) {
			msg = msg[:len(msg)-1]
		} else if bytes.HasSuffix(msg, []byte("\r\n\r\n")) {
			msg = msg[:len(msg)-2]
		}
		if len(bytes.TrimSpace(msg)) == 0 {
			return nil
		}
		if !bytes.HasSuffix(msg, []byte("\n")) {
			msg = append(msg, '\n')
		}
		sizeHint = max(4096, len(msg)+len(msg)/4)
		return fn(msg, curStart)
	}
	for {
		line, err := br.ReadSlice('\n')
		if err == bufio.ErrBufferFull {
			// A very long line: collect it whole.
			long := append([]byte(nil), line...)
			for err == bufio.ErrBufferFull {
				line, err = br.ReadSlice('\n')
				long = append(long, line...)
			}
			line = long
		}
		if len(line) > 0 {
			switch {
			case bytes.HasPrefix(line, []byte("From ")) && prevNL:
				if e := flush(); e != nil {
					return e
				}
				cur, curStart, started = make([]byte, 0, sizeHint), offset, true
			default:
				if !started {
					started, curStart = true, offset
					cur = make([]byte, 0, sizeHint)
				}
				if int64(len(cur)) <= DefaultLimits.MaxSize {
					// Past the limit the rest is dropped: ParseBytes
					// refuses the mail for its size, with no more memory.
					cur = append(cur, unescapeFrom(line)...)
				}
			}
			offset += int64(len(line))
			prevNL = len(bytes.TrimRight(line, "\r\n")) == 0
		}
		if err == io.EOF {
			return flush()
		}
		if err != nil {
			return fmt.Errorf("reading mbox at byte %d: %w", offset, err)
		}
	}
}

// unescapeFrom turns ">From " into "From ", ">>From " into ">From ", ...
func unescapeFrom(line []byte) []byte {
	if len(line) < 6 || line[0] != '>' {
		return line
	}
	i := 0
	for i < len(line) && line[i] == '>' {
		i++
	}
	if bytes.HasPrefix(line[i:], []byte("From ")) {
		return line[1:]
	}
	return line
}

// WriteMboxEntry writes one mail in mboxrd form: a separator line, the mail
// with "From " lines (and already-escaped ones) quoted, and a blank line.
func WriteMboxEntry(w io.Writer, raw []byte) error {
	bw := bufio.NewWriter(w)
	bw.WriteString("From mboxrd@z Thu Jan  1 00:00:00 1970\n")
	for len(raw) > 0 {
		i := bytes.IndexByte(raw, '\n')
		line := raw
		if i >= 0 {
			line = raw[:i+1]
		}
		raw = raw[len(line):]
		j := 0
		for j < len(line) && line[j] == '>' {
			j++
		}
		if bytes.HasPrefix(line[j:], []byte("From ")) {
			bw.WriteByte('>')
		}
		bw.Write(line)
		if line[len(line)-1] != '\n' {
			bw.WriteByte('\n')
		}
	}
	bw.WriteByte('\n')
	return bw.Flush()
}
