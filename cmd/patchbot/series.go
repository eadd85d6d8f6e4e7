package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"strings"

	"github.com/patchbot/patchbot/internal/inert"
	"github.com/patchbot/patchbot/mailbox"
)

func init() {
	register(&command{
		name:    "series",
		summary: "print the patch series found in mail, or write the one to test as an am-ready mbox",
		usage:   "series (--mbox FILE | --maildir DIR | --imap URL | --lore URL | --msgid ID) [-v N] [-o DIR|-] [--json]",
		desc: `Assembles patch series from the mail as b4 does (versions, cover letters,
trailers from follow-ups, partial rerolls) and prints each, complete or not.
With -o, writes the series that would be tested (the newest complete version,
or -v N) as an mbox that git am applies, trailers included, as b4 am -o does.`,
		example: `patchbot series --mbox testdata/mbox/squashfs-thundering-herd.mbox
patchbot series --msgid 20260724190556.1950693-1-usama.arif@linux.dev -o - | git am -3`,
		flags: func(fs *flag.FlagSet) func(context.Context, []string) error {
			var src sourceFlags
			src.declare(fs)
			asJSON := fs.Bool("json", false, "print JSON (schema 1) instead of text")
			version := fs.Int("v", 0, "with -o: the version `N` to write (default: the newest complete one)")
			outDir := fs.String("o", "", "write the series to test as an am-ready mbox into `dir` (- for standard output)")
			return func(ctx context.Context, args []string) error {
				sc, err := src.config()
				if err != nil {
					return err
				}
				if *version < 0 {
					return usagef("-v %d: want a version number", *version)
				}
				return runSeries(ctx, sc, *version, *outDir, *asJSON, stdout, dataOut, stderr)
			}
		},
	})
}

// runSeries lists the series of a source on stdout, or writes the one to
// test as an mbox into outDir, or to data (git am's input, byte for byte)
// when outDir is "-".
func runSeries(ctx context.Context, sc mailbox.SourceConfig, version int, outDir string, asJSON bool, stdout, data, stderr io.Writer) error {
	if outDir != "" {
		s, err := seriesToTest(ctx, sc, version, stderr)
		if err != nil {
			return err
		}
		if outDir == "-" {
			return s.WriteMbox(data)
		}
		path, err := s.WriteAmFile(outDir)
		if err != nil {
			return err
		}
		fmt.Fprintf(stderr, "wrote %s (v%d, %d patch(es)); apply it with: git am -3 %s\n", path, s.Version, len(s.Patches), path)
		return nil
	}
	src, err := mailbox.Open(sc, slog.New(slog.NewTextHandler(stderr, nil)))
	if err != nil {
		return err
	}
	msgs, err := mailbox.Collect(ctx, src)
	if err != nil {
		return err
	}
	mailbox.NewVerifier(mailbox.DKIMConfig{MaxAge: -1, MaxAhead: -1}, nil).VerifyAll(ctx, msgs)
	series := mailbox.Assemble(msgs)
	if asJSON {
		return writeJSON(stdout, struct {
			Schema int               `json:"schema"`
			Series []*mailbox.Series `json:"series"`
		}{schemaVersion, append([]*mailbox.Series{}, series...)})
	}
	writeSeriesText(stdout, series)
	return nil
}

// writeJSON writes v indented, with "Name <addr>" kept readable.
// writeJSON writes v as indented JSON in which no control character is
// raw: encoding/json escapes C0 but leaves DEL and the C1 controls (U+009B
// is a CSI), which inert.JSON escapes as \u00XX: still the same JSON.
func writeJSON(w io.Writer, v any) error {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(v); err != nil {
		return err
	}
	_, err := w.Write(inert.JSON(b.Bytes()))
	return err
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
		for _, t := range s.CoverTrailers {
			fmt.Fprintf(w, "  cover trailer %s\n", t)
		}
		for _, p := range s.Patches {
			fmt.Fprintf(w, "  %d/%d <%s> %s\n", p.Index, s.Total, p.MessageID, p.Subject)
			fmt.Fprintf(w, "       files: %s\n", strings.Join(p.Files, " "))
			for _, c := range p.Attestation {
				fmt.Fprintf(w, "       %s\n", c) // as b4 am shows who signed it
			}
			for _, t := range p.Trailers {
				fmt.Fprintf(w, "       %s\n", t)
			}
		}
	}
}
