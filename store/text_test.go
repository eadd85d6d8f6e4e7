package store

import (
	"context"
	"strings"
	"testing"
	"time"
)

func TestText(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"", ""},
		{"20260724190556.1950693-1-usama.arif@linux.dev", "20260724190556.1950693-1-usama.arif@linux.dev"},
		{"ünïcode ✓ and a tab\t", "ünïcode ✓ and a tab\t"},
		{"a\x00b@x", `a\x00b@x`},
		{"\xff\xfe@evil", `\xff\xfe@evil`},
		{"half \xe2\x9c ok ✓", `half \xe2\x9c ok ✓`},
		{`already \xff kept`, `already \xff kept`},
	} {
		got := Text(tc.in)
		if got != tc.want {
			t.Errorf("Text(%q) = %q, want %q", tc.in, got, tc.want)
		}
		if Text(got) != got {
			t.Errorf("Text(Text(%q)) = %q, want it unchanged", tc.in, Text(got))
		}
	}
}

// A mail's Message-ID, thread, subject and sender may hold a NUL or bytes
// that are not UTF-8: every text the daemon keeps of such a mail is kept,
// on both engines, and found again by the raw value.
func TestHostileTextIsKept(t *testing.T) {
	const id, thread, addr = "evil\x00\xff@example.net", "root\xfe\x00@example.net", "s\xff@example.net"
	const title = "[PATCH] \xc3(\x00 title"
	eachEngine(t, func(t *testing.T, e engine) {
		s, _ := e.open(t)
		ctx := context.Background()
		in, err := s.BeginIngest(ctx, id)
		if err != nil || in.Attempts != 1 {
			t.Fatalf("BeginIngest = %+v, %v", in, err)
		}
		if err := s.FailIngest(ctx, id, "failed on \x00\xff"); err != nil {
			t.Fatal(err)
		}
		if in, err = s.BeginIngest(ctx, id); err != nil || in.Attempts != 2 || in.Failures != 1 || in.Deaths() != 0 ||
			in.LastError != `failed on \x00\xff` {
			t.Fatalf("second BeginIngest = %+v, %v", in, err)
		}
		err = s.Update(ctx, func(tx *Tx) error {
			if fresh, err := tx.SaveMessage(ctx, "list\xff", id, thread, []byte("raw \x00\xff bytes")); err != nil || !fresh {
				t.Errorf("SaveMessage = %v, %v", fresh, err)
			}
			if err := tx.SetAttestation(ctx, id, []byte(`{"from":"s\u0000"}`)); err != nil {
				return err
			}
			if err := tx.SetCursor(ctx, "list\xff", "cursor\x00"); err != nil {
				return err
			}
			if _, err := tx.LogCommand(ctx, Command{Key: id + "#0", Sender: addr, ThreadID: thread, At: time.Now(),
				Outcome: CommandAnswered, Unverified: true}); err != nil {
				return err
			}
			if _, err := tx.OptOut(ctx, addr, "#patchbot stop in "+id, false); err != nil {
				return err
			}
			if _, _, err := tx.AddJob(ctx, Job{Dedupe: "series:" + addr + ":" + title + ":v1:x", Trigger: "list", Title: title,
				Request: []byte("{}"), Source: "list\xff", Sender: addr}); err != nil {
				return err
			}
			if _, _, err := tx.Enqueue(ctx, OutboxMessage{MessageID: "answer@patchbot", From: "bot@x", Recipients: []string{"a@b"},
				Raw: []byte("x"), ThreadID: thread, Budget: BudgetUnverified}); err != nil {
				return err
			}
			return tx.SetAside(ctx, id, "set aside: "+title)
		})
		if err != nil {
			t.Fatal(err)
		}
		err = s.Update(ctx, func(tx *Tx) error {
			if th, err := tx.ThreadOf(ctx, []string{id}); err != nil || th != Text(thread) {
				t.Errorf("ThreadOf = %q, %v; want %q", th, err, Text(thread))
			}
			if ms, err := tx.Thread(ctx, thread); err != nil || len(ms) != 1 || ms[0].MessageID != Text(id) ||
				string(ms[0].Raw) != "raw \x00\xff bytes" {
				t.Errorf("Thread = %+v, %v", ms, err)
			}
			if c, err := tx.CommandCounts(ctx, addr, false, time.Now().Add(-time.Hour)); err != nil || c.Counted != 1 {
				t.Errorf("CommandCounts = %+v, %v", c, err)
			}
			if out, verified, err := tx.OptOutOf(ctx, addr); err != nil || !out || verified {
				t.Errorf("OptOutOf = %v, %v, %v", out, verified, err)
			}
			if ds, err := tx.DedupesWithPrefix(ctx, "series:"+addr+":"+title); err != nil || len(ds) != 1 {
				t.Errorf("DedupesWithPrefix = %q, %v", ds, err)
			}
			if n, err := tx.OutboxSince(ctx, thread, BudgetUnverified, time.Now().Add(-time.Hour)); err != nil || n != 1 {
				t.Errorf("OutboxSince = %d, %v", n, err)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		if cur, err := s.Cursor(ctx, "list\xff"); err != nil || cur != `cursor\x00` {
			t.Errorf("Cursor = %q, %v", cur, err)
		}
		if ok, err := s.HasMessage(ctx, id); err != nil || !ok {
			t.Errorf("HasMessage = %v, %v", ok, err)
		}
		if aside, err := s.SetAsideMail(ctx); err != nil || len(aside) != 1 || aside[0].MessageID != Text(id) {
			t.Errorf("SetAsideMail = %+v, %v", aside, err)
		}
	})
}

// A job's stage and error are cut to their sizes in the form they are
// kept in: a failure's text of bytes that are not UTF-8 (a patch's output
// quoted in it) must not grow past what PostgreSQL's functions take when
// each byte becomes \xHH, which would fail the job's end at every try.
func TestEndJobCutsKeptText(t *testing.T) {
	eachEngine(t, func(t *testing.T, e engine) {
		s, _ := e.open(t)
		ctx := context.Background()
		if _, _, err := s.AddJob(ctx, Job{Dedupe: "a", Request: []byte("{}")}); err != nil {
			t.Fatal(err)
		}
		j, err := s.ClaimJob(ctx, Claim{Worker: "w", Lease: time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		j.State, j.Blame = JobFailed, "patch"
		j.Stage = strings.Repeat("\x00", MaxStage)
		j.Error = strings.Repeat("\xff", MaxJobError)
		if err := s.EndJob(ctx, j, nil); err != nil {
			t.Fatalf("ending a job whose error is %d bytes that are not UTF-8: %v", MaxJobError, err)
		}
		got, err := s.Job(ctx, j.ID)
		if err != nil {
			t.Fatal(err)
		}
		if got.State != JobFailed || len(got.Error) > MaxJobError || len(got.Stage) > MaxStage ||
			!strings.HasPrefix(got.Error, `\xff\xff`) || !strings.HasPrefix(got.Stage, `\x00`) {
			t.Errorf("kept %s, stage %d bytes, error %d bytes starting %.16q", got.State, len(got.Stage), len(got.Error), got.Error)
		}
	})
}

// A try taken back (the daemon was stopped while acting on the mail) is
// neither a failure nor a death.
func TestStopIngest(t *testing.T) {
	eachEngine(t, func(t *testing.T, e engine) {
		s, _ := e.open(t)
		ctx := context.Background()
		const id = "stopped@example.org"
		for i := 0; i < 3; i++ {
			if _, err := s.BeginIngest(ctx, id); err != nil {
				t.Fatal(err)
			}
			if err := s.StopIngest(ctx, id); err != nil {
				t.Fatal(err)
			}
		}
		if in, err := s.BeginIngest(ctx, id); err != nil || in.Attempts != 1 || in.Deaths() != 0 {
			t.Errorf("after three stops: %+v, %v; want a first try", in, err)
		}
		s.FailIngest(ctx, id, "x")
		s.StopIngest(ctx, id) // a failed try is not taken back
		if in, _ := s.BeginIngest(ctx, id); in.Attempts != 2 || in.Failures != 1 || in.Deaths() != 0 {
			t.Errorf("after a failure: %+v", in)
		}
	})
}
