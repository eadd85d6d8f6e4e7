package reports

import (
	"os/exec"
	"strings"
	"testing"

	"github.com/patchbot/patchbot/internal/testenv"
)

// Hostile Message-IDs and suite names must come out of a shell as the
// very arguments they were: never a second command.
func TestReproCommandsAreShellSafe(t *testing.T) {
	testenv.Tools(t, "sh")
	for _, id := range []string{
		"<20261201.123@example.org>",
		"<a'; touch /tmp/pwned; echo '@x>",
		"<$(reboot)@x>",
		"<`id`@x>",
		"<a\"b\\c@x>",
		"<a b\tc@x>",
		"<!x&y|z;w>",
		"<'''@x>",
	} {
		r := Repro{MessageID: id, Suites: []string{"locks;rm -rf /", "x y"}, Profile: "quick", Runs: 5, CPUs: 2, MemMiB: 1024}
		line := r.Commands()[0]
		// printf each argument on its own line: what a shell makes of it.
		out, err := exec.Command("sh", "-c", "set -- "+strings.TrimPrefix(line, "patchbot ")+`; for a; do printf '%s\n' "$a"; done`).Output()
		if err != nil {
			t.Fatalf("%s: sh: %v", line, err)
		}
		got := strings.Split(strings.TrimSuffix(string(out), "\n"), "\n")
		want := []string{"run", "--msgid", strings.Trim(id, "<>"), "--suites", "locks;rm -rf /,x y",
			"--profile", "quick", "--runs", "5", "--cpus", "2", "--mem", "1024"}
		if strings.Join(got, "\x00") != strings.Join(want, "\x00") {
			t.Errorf("%s\nthe shell saw %q\nwant %q", line, got, want)
		}
	}
}

func TestShellQuoteLeavesPlainWordsAlone(t *testing.T) {
	for in, want := range map[string]string{
		"cache-contention": "cache-contention",
		"20261201.1@x.org": "20261201.1@x.org",
		"":                 "''",
		"it's":             `'it'\''s'`,
		"a b":              "'a b'",
		"--base=v6.1":      "--base=v6.1",
		"~root":            "'~root'",
	} {
		if got := ShellQuote(in); got != want {
			t.Errorf("ShellQuote(%q) = %s, want %s", in, got, want)
		}
	}
}

// A reply continues a long command only between arguments: pasted, the
// lines are the same command.
func TestShellLinesKeepQuotedArgumentsWhole(t *testing.T) {
	id := "<a very long message id with spaces in it that is " + strings.Repeat("x", 40) + "@example.org>"
	line := Repro{MessageID: id, Profile: "quick", Runs: 5, CPUs: 2, MemMiB: 1024}.Commands()[0]
	text := shellLines(line)
	pasted := strings.ReplaceAll(strings.ReplaceAll(text, "  $ ", ""), " \\\n      ", " ")
	if pasted != line {
		t.Errorf("continued lines do not paste back to the command:\n%s\nwant\n%s", text, line)
	}
	out, err := exec.Command("sh", "-c", "set -- "+strings.ReplaceAll(strings.TrimPrefix(text, "  $ patchbot "), "\n      ", "\n")+`; printf '%s\n' "$3"`).Output()
	if err != nil || strings.TrimSpace(string(out)) != strings.Trim(id, "<>") {
		t.Errorf("the shell read the continued lines' Message-ID as %q (%v)", out, err)
	}
}

// The boot path is said only when it is not the default, as --base is.
func TestReproSaysANonDefaultBootPath(t *testing.T) {
	for boot, want := range map[string]bool{"": false, "legacy": false, "pvh": true} {
		line := Repro{MessageID: "<a@b>", CPUs: 2, MemMiB: 1024, Boot: boot}.Commands()[0]
		if got := strings.Contains(line, " --boot pvh"); got != want {
			t.Errorf("boot %q: %s", boot, line)
		}
	}
}
