#!/bin/bash
# Runs patchbot's full tier of tests, as CI does: everything, heavy cases
# included (kernel builds, QEMU and libvirt VMs, Chromium, the end-to-end
# test). The fast tier is `go test -short ./...`: no kernel, VM or browser.
#
# Tests start their own Dovecot, Postfix, PostgreSQL and QEMU; libvirtd is
# a system daemon, so it is started here when not running.
set -euo pipefail
cd "$(dirname "$0")/.."

# A daemon started here outlives the tests, so it must not keep what this
# script inherited: run under flock, virtlogd would hold the lock for good.
daemon() {
  (
    for fd in /proc/self/fd/*; do
      n=${fd##*/}
      if ((n > 2)); then eval "exec $n>&-"; fi
    done
    exec "$@"
  )
}
if command -v libvirtd >/dev/null; then
  pgrep -x virtlogd >/dev/null || daemon virtlogd -d
  pgrep -x libvirtd >/dev/null || daemon libvirtd -d
fi

# Kernel builds are cached across runs here (and by ccache); every package
# that needs the default kernel shares the one build, behind a file lock.
export PATCHBOT_CACHE="${PATCHBOT_CACHE:-/var/cache/patchbot}"
mkdir -p "$PATCHBOT_CACHE"

# This machine was prepared by scripts/install-deps.sh: a test that finds a
# tool missing fails instead of skipping (internal/testenv).
export PATCHBOT_FULL_TIER=1

# The module's requirements are what its imports need, no more, no less:
# a module imported directly but marked indirect (or one no longer used)
# fails here, before any test runs.
go mod tidy -diff
go vet ./...
# -count=1: the tests read kernels, VMs and servers that the Go test cache
# cannot see, so a cached pass proves nothing. -p 2: two test binaries at
# once on two cores. The longest packages are named first, so that they
# start first and the short ones fill the other slot beside them.
go test -count=1 -p 2 -timeout 40m "$@" ./e2e ./images ./e2e/fleet ./vmrunner ./service ./...
