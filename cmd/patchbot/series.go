package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"

	"github.com/patchbot/patchbot/mailbox"
)

func init() {
	register(command{
		name:  "series",
		usage: "print the patch series found in mail (--mbox, --maildir, --imap, --lore)",
		run: func(ctx context.Context, args []string) error {
			return runSeries(ctx, args, os.Stdout, os.Stderr)
		},
	})
}

func runSeries(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("series", flag.ContinueOnError)
	fs.SetOutput(stderr)
	mboxPath := fs.String("mbox", "", "read an mbox `file` (- for stdin)")
	maildir := fs.String("maildir", "", "read a Maildir `dir`")
	imapURL := fs.String("imap", "", "read an IMAP mailbox: imap://user:password@host:port (imaps:// for TLS)")
	imapBox := fs.String("mailbox", "INBOX", "IMAP mailbox `name`")
	loreURL := fs.String("lore", "", "read a public-inbox thread (https://host/list/msgid/) or a list's new mail (https://host/list/)")
	asJSON := fs.Bool("json", false, "print JSON instead of text")
	if err := fs.Parse(args); err != nil {
		return exitError{2}
	}
	src, err := seriesSourceLog(stderr, *mboxPath, *maildir, *imapURL, *imapBox, *loreURL)
	if err != nil {
		fmt.Fprintln(stderr, "patchbot series:", err)
		fs.Usage()
		return exitError{2}
	}
	var msgs []*mailbox.Message
	if _, err := src.Poll(ctx, "", func(m *mailbox.Message, _ string) error {
		msgs = append(msgs, m)
		return nil
	}); err != nil {
		return fmt.Errorf("reading mail: %w", err)
	}
	series := mailbox.Assemble(msgs)
	if *asJSON {
		return writeSeriesJSON(stdout, series)
	}
	writeSeriesText(stdout, series)
	return nil
}

// seriesSource makes the mail source the flags name (exactly one of them),
// logging skipped mail to standard error. "patchbot run" shares it.
func seriesSource(mboxPath, maildir, imapURL, imapBox, loreURL string) (mailbox.Source, error) {
	return seriesSourceLog(os.Stderr, mboxPath, maildir, imapURL, imapBox, loreURL)
}

func seriesSourceLog(stderr io.Writer, mboxPath, maildir, imapURL, imapBox, loreURL string) (mailbox.Source, error) {
	logger := slog.New(slog.NewTextHandler(stderr, nil))
	var srcs []mailbox.Source
	if mboxPath != "" {
		srcs = append(srcs, &mailbox.Mbox{Path: mboxPath, Logger: logger})
	}
	if maildir != "" {
		srcs = append(srcs, &mailbox.Maildir{Dir: maildir, Logger: logger})
	}
	if imapURL != "" {
		s, err := mailbox.NewIMAP(imapURL, imapBox)
		if err != nil {
			return nil, err
		}
		s.Logger = logger
		srcs = append(srcs, s)
	}
	if loreURL != "" {
		s, err := mailbox.NewLore(loreURL)
		if err != nil {
			return nil, err
		}
		s.Logger = logger
		srcs = append(srcs, s)
	}
	switch len(srcs) {
	case 0:
		return nil, errors.New("give one of --mbox, --maildir, --imap, --lore")
	case 1:
		return srcs[0], nil
	}
	return nil, errors.New("give only one of --mbox, --maildir, --imap, --lore")
}

func writeSeriesJSON(w io.Writer, series []*mailbox.Series) error {
	if series == nil {
		series = []*mailbox.Series{}
	}
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	return enc.Encode(series)
}

func writeSeriesText(w io.Writer, series []*mailbox.Series) {
	if len(series) == 0 {
		fmt.Fprintln(w, "no patch series found")
		return
	}
	for _, s := range series {
		state := "complete"
		if !s.Complete {
			state = "incomplete: " + s.Reason
		} else if s.Reason != "" {
			state = "complete (" + s.Reason + ")"
		}
		fmt.Fprintf(w, "v%d %d patch(es), %s: %s\n", s.Version, s.Total, state, s.Subject)
		if s.Cover != nil {
			fmt.Fprintf(w, "  cover <%s>\n", s.Cover.MessageID)
		}
		for _, p := range s.Patches {
			fmt.Fprintf(w, "  %d/%d <%s> %s\n", p.Index, s.Total, p.MessageID, p.Subject)
			fmt.Fprintf(w, "       files: %s\n", strings.Join(p.Files, " "))
			for _, t := range p.Trailers {
				fmt.Fprintf(w, "       %s\n", t)
			}
		}
	}
}
