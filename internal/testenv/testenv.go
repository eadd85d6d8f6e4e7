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
//
// Tests of either tier ask for what they need here too (Tools, Tool,
// Root, Files), never with exec.LookPath or testing.Short of their own:
// TestEveryHeavyTestIsGated reads every test file of the module and fails
// on a heavy test that no gate guards, or on a skip of its own.
package testenv

import (
	"fmt"
	"os"
	"os/exec"
	"testing"
)

// FullTierEnv is set to 1 by scripts/test.sh: the machine has every tool
// installs-deps installs, so a test that cannot find one fails.
const FullTierEnv = "PATCHBOT_FULL_TIER"

// DebianSourceTarball is the default base tree as Debian's linux-source-6.1
// installs it; every kernel a test builds is built from it.
const DebianSourceTarball = "/usr/src/linux-source-6.1.tar.xz"

// FullTier reports whether this is the full tier (PATCHBOT_FULL_TIER=1):
// the machine was prepared by scripts/install-deps.sh.
func FullTier() bool { return os.Getenv(FullTierEnv) == "1" }

// Missing ends t for want of something this machine lacks: a skip with
// the reason, or in the full tier a failure. For what Tools, Root and
// Files cannot name: a system user, a device, a kernel feature.
func Missing(t testing.TB, format string, args ...any) {
	t.Helper()
	msg := fmt.Sprintf(format, args...)
	if FullTier() {
		t.Fatalf("%s, and this is the full tier (%s=1: scripts/install-deps.sh prepares the machine)", msg, FullTierEnv)
	}
	t.Skip(msg)
}

// Sized returns full, or fast in the fast tier (-short): for a test that
// runs in both tiers and only does less in the fast one (fewer simulated
// sequences, the same checks with a wider error).
func Sized(full, fast int) int {
	if testing.Short() {
		return fast
	}
	return full
}

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
		Tool(t, tool)
	}
}

// Tool is Tools for one command, and returns its path.
func Tool(t testing.TB, tool string) string {
	t.Helper()
	p, err := exec.LookPath(tool)
	if err != nil {
		Missing(t, "%s is not installed (scripts/install-deps.sh installs it)", tool)
	}
	return p
}

// Root skips t (or, in the full tier, fails it) unless the test runs as
// root: starting Postfix, Dovecot with its own users, mounts.
func Root(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		Missing(t, "not root (the test starts servers or mounts as root does)")
	}
}

// Files skips t (or, in the full tier, fails it) when one of the paths
// named does not exist.
func Files(t testing.TB, paths ...string) {
	t.Helper()
	for _, p := range paths {
		if _, err := os.Stat(p); err != nil {
			Missing(t, "%s is missing (scripts/install-deps.sh installs it)", p)
		}
	}
}

// kernelTools are what a kernel build needs besides the compiler: the
// build runs in bwrap under prlimit, as its own user (unshare, setpriv),
// behind ccache.
var kernelTools = []string{"make", "gcc", "ccache", "flex", "bison", "bc", "perl", "bwrap", "prlimit", "unshare", "setpriv", "git"}

// NeedsKernel gates a test that builds (or reads a cached build of) a
// kernel, or imports the default tree: never in the fast tier, and only
// with the build tools and Debian's kernel source.
func NeedsKernel(t testing.TB) {
	t.Helper()
	if testing.Short() {
		t.Skip("builds a kernel: not in the fast tier (-short)")
	}
	Tools(t, kernelTools...)
	Files(t, DebianSourceTarball)
}

// NeedsVM gates a test that boots a VM (QEMU, under TCG here), or starts
// QEMU at all: never in the fast tier, and only with QEMU installed.
func NeedsVM(t testing.TB) {
	t.Helper()
	if testing.Short() {
		t.Skip("boots a VM: not in the fast tier (-short)")
	}
	Tools(t, "qemu-system-x86_64")
}

// browsers are where NeedsBrowser looks, in order.
var browsers = []string{"/usr/lib/chromium/chromium", "chromium", "chromium-browser", "google-chrome"}

// NeedsBrowser gates a test that drives Chromium, and returns the
// browser's path: Debian's binary itself rather than its wrapper script,
// when it is there.
func NeedsBrowser(t testing.TB) string {
	t.Helper()
	if testing.Short() {
		t.Skip("drives a browser: not in the fast tier (-short)")
	}
	for _, p := range browsers {
		if path, err := exec.LookPath(p); err == nil {
			return path
		}
	}
	Tools(t, "chromium")
	return ""
}
