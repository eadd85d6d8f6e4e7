package images

import (
	"context"
	"errors"
	"os/exec"
	"strings"
	"testing"

	"github.com/patchbot/patchbot/blame"
)

// exitErr is a real *exec.ExitError with the given status.
func exitErr(t *testing.T, status string) error {
	t.Helper()
	err := exec.Command("sh", "-c", "exit "+status).Run()
	if err == nil {
		t.Fatal("sh exited 0")
	}
	return err
}

func TestRootCause(t *testing.T) {
	withHint := func(c cause, line string) *scan {
		sc := &scan{errors: []string{"make: *** [Makefile:1: all] Error 2"}}
		sc.hints[c] = line
		return sc
	}
	compiler := &scan{errors: []string{"fs/x.c:1:1: error: 'y' undeclared"}}
	tests := []struct {
		name string
		o    outcome
		want error // a sentinel the InfraError wraps, or nil
		bad  bool  // want a *BuildError
		ok   bool  // want no error
	}{
		{name: "success", o: outcome{status: bwrapStatus{ran: true}}, ok: true},
		{name: "compiler error", o: outcome{wait: exitErr(t, "2"), status: bwrapStatus{ran: true, exit: 2}, scan: compiler}, bad: true},
		{name: "time limit", o: outcome{wait: exitErr(t, "137"), ctx: context.DeadlineExceeded, scan: compiler}, want: ErrTimeout},
		{name: "canceled", o: outcome{wait: exitErr(t, "137"), ctx: context.Canceled, scan: compiler}, want: context.Canceled},
		{name: "sandbox did not start", o: outcome{wait: exitErr(t, "1"), scan: &scan{head: []string{"bwrap: Can't mount proc"}}}},
		{name: "oom kill", o: outcome{wait: exitErr(t, "2"), status: bwrapStatus{ran: true, exit: 2}, oomKills: 1, scan: compiler}, want: ErrOutOfMemory},
		{name: "fork refused", o: outcome{wait: exitErr(t, "2"), status: bwrapStatus{ran: true, exit: 2}, pidsMax: 3, scan: compiler}, want: ErrLimit},
		{name: "disk full", o: outcome{wait: exitErr(t, "2"), status: bwrapStatus{ran: true, exit: 2}, diskFull: true, scan: compiler}, want: ErrNoSpace},
		{name: "ENOSPC in the log", o: outcome{wait: exitErr(t, "2"), status: bwrapStatus{ran: true, exit: 2},
			scan: withHint(causeNoSpace, "fs/x.o: No space left on device")}, want: ErrNoSpace},
		{name: "compiler out of memory", o: outcome{wait: exitErr(t, "2"), status: bwrapStatus{ran: true, exit: 2},
			scan: withHint(causeMemory, "cc1: out of memory allocating 65536 bytes")}, want: ErrOutOfMemory},
		{name: "compiler killed", o: outcome{wait: exitErr(t, "2"), status: bwrapStatus{ran: true, exit: 2},
			scan: withHint(causeKilled, "gcc: fatal error: Killed signal terminated program cc1")}, want: ErrKilled},
		{name: "fork failed", o: outcome{wait: exitErr(t, "2"), status: bwrapStatus{ran: true, exit: 2},
			scan: withHint(causeLimit, "make: vfork: Resource temporarily unavailable")}, want: ErrLimit},
		{name: "make killed", o: outcome{wait: exitErr(t, "137"), status: bwrapStatus{ran: true, exit: 137}, scan: compiler}, want: ErrKilled},
		{name: "make stopped without an error line", o: outcome{wait: exitErr(t, "2"), status: bwrapStatus{ran: true, exit: 2},
			scan: &scan{head: []string{"/bin/sh: 1: cd: can't cd to .out", `Makefile:199: *** failed to create output directory ".out".  Stop.`}}}},
		{name: "file size", o: outcome{wait: exitErr(t, "153"), status: bwrapStatus{ran: true, exit: 153}, scan: compiler}, want: ErrLimit},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.o.scan == nil {
				tt.o.scan = &scan{}
			}
			err := rootCause(&tt.o, "build.log")
			var be *BuildError
			var ie *InfraError
			switch {
			case tt.ok:
				if err != nil {
					t.Errorf("rootCause = %v, want nil", err)
				}
			case tt.bad:
				if !errors.As(err, &be) || blame.Of(err) != blame.Patch || be.Lines[0] != compiler.errors[0] {
					t.Errorf("rootCause = %v, want the BuildError with the compiler's line", err)
				}
			default:
				if !errors.As(err, &ie) || blame.Of(err) != blame.Infra || errors.As(err, &be) {
					t.Errorf("rootCause = %v (blame %q), want an InfraError and no BuildError", err, blame.Of(err))
				}
				if tt.want != nil && !errors.Is(err, tt.want) {
					t.Errorf("rootCause = %v, want it to wrap %v", err, tt.want)
				}
			}
		})
	}
}

func TestCauseOf(t *testing.T) {
	tests := []struct {
		line string
		want cause
		ok   bool
	}{
		{"/usr/bin/ld: final link failed: No space left on device", causeNoSpace, true},
		{"cc1: out of memory allocating 4064 bytes after a total of 2147483648 bytes", causeMemory, true},
		{"Out of memory!", causeMemory, true},
		{"make[2]: *** [scripts/Makefile.build:250: fs/x.o] Killed", causeKilled, true},
		{"gcc: fatal error: Killed signal terminated program cc1", causeKilled, true},
		{"make: vfork: Resource temporarily unavailable", causeLimit, true},
		{"sh: 1: Cannot fork", causeLimit, true},
		{"File size limit exceeded", causeLimit, true},
		{"fs/fuse/dev.c:1225:9: error: 'expires' undeclared (first use in this function)", 0, false},
		{"  CC      kernel/killed.o", 0, false},
	}
	for _, tt := range tests {
		if got, ok := causeOf(tt.line); ok != tt.ok || got != tt.want {
			t.Errorf("causeOf(%q) = %v, %v; want %v, %v", tt.line, got, ok, tt.want, tt.ok)
		}
	}
}

func TestCapText(t *testing.T) {
	long := strings.Repeat("context line\n", 1000)
	got := capText(long, maxQuotedLines, maxQuotedBytes)
	if n := strings.Count(got, "\n"); n > maxQuotedLines {
		t.Errorf("%d lines kept", n)
	}
	if !strings.HasSuffix(got, "more lines") {
		t.Errorf("does not say what it left out: %q", got[len(got)-40:])
	}
	if short := "a\nb"; capText(short, maxQuotedLines, maxQuotedBytes) != short {
		t.Errorf("a short text changed: %q", capText(short, maxQuotedLines, maxQuotedBytes))
	}
	if got := capBytes(make([]byte, 100), 10); len(got) > 60 || !strings.Contains(string(got), "90 more bytes") {
		t.Errorf("capBytes = %q", got)
	}
}
