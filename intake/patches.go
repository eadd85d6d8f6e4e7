package intake

import (
	"context"
	"log/slog"
	"slices"
	"strings"

	"github.com/patchbot/patchbot/mailbox"
	"github.com/patchbot/patchbot/reports"
)

// patches decides on a mail that carries a patch: each series of its
// thread that it may complete, and that touches the watched paths, is
// queued for a test, or, incomplete, waits for its missing parts. A patch
// sent to patchbot alone, not through a list, is tested only on an
// allowed sender's command.
func (t *turn) patches(ctx context.Context) error {
	if !t.Sources[t.mail.Source].ListMail() {
		t.note(slog.LevelInfo, "a patch sent to patchbot directly, not through a list, is not tested on its own; "+
			"an allowed sender can ask with #patchbot test in its thread", "sender", t.origin.Sender)
		return nil
	}
	view, err := t.thread(ctx, "", false)
	if err != nil {
		return err
	}
	for _, s := range view.series {
		log := []any{"series", s.Subject, "version", s.Version}
		if !touches(s.Files(), t.Paths) {
			t.note(slog.LevelInfo, "series touches no watched path; not tested", append(log, "files", s.Files(), "complete", s.Complete)...)
			continue
		}
		// An opt-out stops the testing of an address's series when its
		// "stop" was verified (or the config's), or the series is not: a
		// forged "stop" in a verified author's name silences the mail to
		// the address (the outbox leaves it out), not the test.
		if out, verified, err := t.authorOptedOut(ctx, s.Author); err != nil {
			return err
		} else if out && (verified || !s.Identity.Verified()) {
			t.note(slog.LevelInfo, "the series' author opted out; not tested", log...)
			continue
		} else if out {
			t.note(slog.LevelInfo, "the author's address opted out in an unverified mail: the verified series is tested, the author not mailed", log...)
		}
		if !s.Complete {
			t.note(slog.LevelInfo, "series incomplete; waiting for the rest", append(log, "missing", s.Missing, "reason", s.Reason,
				"answer_after", t.IncompleteAfter)...)
			t.waitForParts(s)
			continue
		}
		target := ReplyTarget(s)
		if target == "" {
			// A patch without a Message-ID: its reply answers the name
			// it is kept under, and starts a thread of its own.
			target = KeyOf(s.Patches[0].Message)
		}
		first := s.Patches[0].MessageID
		if first == "" {
			first = KeyOf(s.Patches[0].Message)
		}
		claim, dedupe := SeriesClaim(s), SeriesDedupe(s, first)
		log = append(log, "identity", s.Identity.String(), "candidate", first)
		req := NewRequest(s, t.Suites, target)
		if err := t.replyThread(ctx, &req.Thread, view, target); err != nil {
			return err
		}
		if req.Thread.Author == "" {
			t.note(slog.LevelInfo, "the series' author is not one address; not tested", append(log, "author", s.Author)...)
			continue
		}
		names, err := req.SuiteNames()
		if err != nil {
			t.note(slog.LevelInfo, "no suite to run for this series; not tested", append(log, "err", err)...)
			continue
		}
		others, err := t.known.DedupesWithPrefix(ctx, string(claim))
		if err != nil {
			return err
		}
		for _, j := range t.dec.Jobs {
			if strings.HasPrefix(string(j.Dedupe), string(claim)) {
				others = append(others, string(j.Dedupe))
			}
		}
		if !slices.Contains(others, string(dedupe)) { // a new candidate: said once, when it comes
			for _, o := range others {
				t.note(slog.LevelWarn, "another mail claims this series and version: both are candidates, each tested on its own",
					append(log, "other", strings.TrimPrefix(o, string(claim)))...)
			}
		}
		t.dec.Jobs = append(t.dec.Jobs, Job{Dedupe: dedupe, Trigger: "list", Source: t.mail.Source,
			Sender: mailbox.AddrOf(s.Author), Title: s.Subject, Test: req, Suites: names})
	}
	return nil
}

// waitForParts queues a check of an incomplete series once
// IncompleteAfter has passed: if the parts are still missing, the author
// is told which, and why the series was not tested.
func (t *turn) waitForParts(s *mailbox.Series) {
	if len(s.Patches) == 0 && s.Cover == nil {
		return
	}
	replyTo, subject, refs := "", s.Subject, []string(nil)
	if s.Cover != nil {
		replyTo, refs = s.Cover.MessageID, s.Cover.References
	} else {
		replyTo, subject, refs = s.Patches[0].MessageID, s.Patches[0].Subject, s.Patches[0].Message.References
	}
	c := &Check{Thread: reports.Thread{Subject: subject, MessageID: replyTo, References: refs, Author: s.Author},
		Series: Incomplete{ThreadID: t.mail.Thread, Author: mailbox.AddrOf(s.Author), Title: s.Title, Version: s.Version,
			Identity: s.Identity.Key(), Unverified: !s.Identity.Verified()}}
	t.bound(&c.Thread, nil, false)
	if c.Thread.Author == "" {
		return // nobody to tell
	}
	t.dec.Jobs = append(t.dec.Jobs, Job{Dedupe: CheckDedupe(s), Trigger: "incomplete", Source: t.mail.Source,
		Sender: mailbox.AddrOf(s.Author), Title: s.Subject, Check: c, NotBefore: t.mail.At.Add(t.IncompleteAfter)})
}

// touches says whether any file is under one of the path prefixes (all
// files count when no prefix is configured).
func touches(files, prefixes []string) bool {
	if len(prefixes) == 0 {
		return len(files) > 0
	}
	for _, f := range files {
		for _, p := range prefixes {
			if strings.HasPrefix(f, p) {
				return true
			}
		}
	}
	return false
}
