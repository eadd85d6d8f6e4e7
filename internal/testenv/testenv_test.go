package testenv

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// helperEnv names the gate a re-executed test binary calls in
// TestHelperGate.
const helperEnv = "PATCHBOT_TESTENV_HELPER"

// noTools is the PATH of a child that finds no tools.
const noTools = "/nonexistent"

// TestHelperGate is not a test of its own: TestGates re-executes the test
// binary to run it, with the gate to call in helperEnv.
func TestHelperGate(t *testing.T) {
	gate := os.Getenv(helperEnv)
	switch gate {
	case "":
		t.Skip("run by TestGates")
	case "Long":
		Long(t)
	case "NeedsKernel":
		NeedsKernel(t)
	case "NeedsVM":
		NeedsVM(t)
	case "NeedsBrowser":
		if os.Getenv("PATH") == noTools {
			browsers = slices.DeleteFunc(browsers, filepath.IsAbs) // what PATH does not find
		}
		NeedsBrowser(t)
	case "Tools":
		Tools(t, "sh", "patchbot-no-such-tool")
	case "Tool":
		if p := Tool(t, "sh"); !strings.HasSuffix(p, "/sh") {
			t.Fatalf("Tool(sh) = %q", p)
		}
	case "Root":
		Root(t)
	case "Files":
		Files(t, "/nonexistent/patchbot-testenv")
	default:
		t.Fatalf("%s=%q: no such gate", helperEnv, gate)
	}
	t.Log("GATE-PASSED")
}

// The gates decide by the tier: every heavy gate skips in the fast tier,
// even on a machine prepared for the full one; a missing tool or file is a
// skip outside the full tier and a failure inside it.
func TestGates(t *testing.T) {
	type want int
	const (
		pass want = iota
		skip
		fail
	)
	root := os.Geteuid() == 0
	rootWant := func(full bool) want {
		switch {
		case root:
			return pass
		case full:
			return fail
		}
		return skip
	}
	for _, tc := range []struct {
		gate  string
		short bool
		full  bool
		path  string // PATH for the child; "" keeps this one
		want  want
	}{
		{gate: "Long", short: true, full: true, want: skip},
		{gate: "Long", want: pass},
		{gate: "NeedsKernel", short: true, full: true, want: skip},
		{gate: "NeedsVM", short: true, full: true, want: skip},
		{gate: "NeedsBrowser", short: true, full: true, want: skip},
		// No tools at all on PATH: outside -short the heavy gates ask for them.
		{gate: "NeedsKernel", path: noTools, want: skip},
		{gate: "NeedsKernel", path: noTools, full: true, want: fail},
		{gate: "NeedsVM", path: noTools, full: true, want: fail},
		{gate: "NeedsBrowser", path: noTools, full: true, want: fail},
		{gate: "NeedsBrowser", path: noTools, want: skip},
		// Tools and Files hold in both tiers, -short or not.
		{gate: "Tools", short: true, want: skip},
		{gate: "Tools", short: true, full: true, want: fail},
		{gate: "Tool", short: true, full: true, want: pass},
		{gate: "Files", want: skip},
		{gate: "Files", full: true, want: fail},
		{gate: "Root", full: true, want: rootWant(true)},
		{gate: "Root", want: rootWant(false)},
	} {
		name := tc.gate
		if tc.short {
			name += "/short"
		}
		if tc.full {
			name += "/full"
		}
		if tc.path != "" {
			name += "/no-tools"
		}
		t.Run(name, func(t *testing.T) {
			args := []string{"-test.run=^TestHelperGate$", "-test.v"}
			if tc.short {
				args = append(args, "-test.short")
			}
			cmd := exec.Command(os.Args[0], args...)
			env := []string{helperEnv + "=" + tc.gate}
			if tc.full {
				env = append(env, FullTierEnv+"=1")
			}
			for _, kv := range os.Environ() {
				if strings.HasPrefix(kv, FullTierEnv+"=") || strings.HasPrefix(kv, helperEnv+"=") {
					continue
				}
				if tc.path != "" && strings.HasPrefix(kv, "PATH=") {
					continue
				}
				env = append(env, kv)
			}
			if tc.path != "" {
				env = append(env, "PATH="+tc.path)
			}
			cmd.Env = env
			out, err := cmd.CombinedOutput()
			var got want
			switch {
			case strings.Contains(string(out), "--- SKIP: TestHelperGate"):
				got = skip
			case err == nil && strings.Contains(string(out), "GATE-PASSED"):
				got = pass
			case err != nil && strings.Contains(string(out), "--- FAIL: TestHelperGate"):
				got = fail
			default:
				t.Fatalf("the child neither passed, skipped nor failed (%v):\n%s", err, out)
			}
			names := map[want]string{pass: "pass", skip: "skip", fail: "fail"}
			if got != tc.want {
				t.Errorf("%s: %s, want %s:\n%s", name, names[got], names[tc.want], out)
			}
		})
	}
}
