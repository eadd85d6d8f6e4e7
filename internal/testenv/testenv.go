// Package testenv is the one gate between patchbot's two tiers of tests.
//
// The fast tier is `go test -short ./...`: unit tests, fakes, and the real
// servers that start in seconds (Dovecot, Postfix, public-inbox,
// PostgreSQL, bubblewrap, git). It needs no kernel, no VM and no browser.
// The full tier is the README's test command (scripts/test.sh) and CI: it
// runs everything, heavy cases included.
//
// Every heavy test asks here first, so that none can forget -short: a test
// that builds a kernel calls NeedsKernel, one that boots a VM NeedsVM, one
// that drives Chromium NeedsBrowser, and any other case that takes more
// than a few seconds (a long real-server scenario, many processes) Long.
// Each also checks that the tools it names are installed. Where one is
// missing the test is skipped with the reason, unless PATCHBOT_FULL_TIER=1
// (set by scripts/test.sh) says this machine was prepared for the full
// tier: there a missing tool is a failure, not a silent skip.
package testenv

import (
	"os"
	"os/exec"
	"testing"
)

// FullTierEnv is set to 1 by scripts/test.sh: the machine has every tool
// installs-deps installs, so a test that cannot find one fails.
const FullTierEnv = "PATCHBOT_FULL_TIER"

// Long skips t in the fast tier (-short): the test takes more than a few
// seconds, or starts many processes.
func Long(t testing.TB) {
	t.Helper()
	if testing.Short() {
		t.Skip("long test: not in the fast tier (-short)")
	}
}

// Tools skips t (or, in the full tier, fails it) when one of the commands
// named is not on PATH.
func Tools(t testing.TB, tools ...string) {
	t.Helper()
	for _, tool := range tools {
		if _, err := exec.LookPath(tool); err != nil {
			if os.Getenv(FullTierEnv) == "1" {
				t.Fatalf("%s is not installed, and this is the full tier (run scripts/install-deps.sh)", tool)
			}
			t.Skipf("%s is not installed (scripts/install-deps.sh installs it)", tool)
		}
	}
}

// kernelTools are what a kernel build needs besides the compiler.
var kernelTools = []string{"make", "gcc", "flex", "bison", "bc", "bwrap", "git"}

// NeedsKernel gates a test that builds (or reads a cached build of) a
// kernel: never in the fast tier, and only with the build tools.
func NeedsKernel(t testing.TB) {
	t.Helper()
	if testing.Short() {
		t.Skip("builds a kernel: not in the fast tier (-short)")
	}
	Tools(t, kernelTools...)
}

// NeedsVM gates a test that boots a VM (QEMU, under TCG here): never in
// the fast tier, and only with QEMU installed.
func NeedsVM(t testing.TB) {
	t.Helper()
	if testing.Short() {
		t.Skip("boots a VM: not in the fast tier (-short)")
	}
	Tools(t, "qemu-system-x86_64")
}

// NeedsBrowser gates a test that drives Chromium, and returns the
// browser's path.
func NeedsBrowser(t testing.TB) string {
	t.Helper()
	if testing.Short() {
		t.Skip("drives a browser: not in the fast tier (-short)")
	}
	for _, p := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if path, err := exec.LookPath(p); err == nil {
			return path
		}
	}
	Tools(t, "chromium")
	return ""
}
