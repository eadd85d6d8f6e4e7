#!/bin/bash
# Runs patchbot's tests. Tests start their own Dovecot, Postfix and QEMU;
# libvirtd is a system daemon, so it is started here when not running.
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

# Kernel builds are cached across runs here (and by ccache).
export PATCHBOT_CACHE="${PATCHBOT_CACHE:-/var/cache/patchbot}"
mkdir -p "$PATCHBOT_CACHE"

go vet ./...
# -count=1: the tests read kernels, VMs and servers that the Go test cache
# cannot see, so a cached pass proves nothing. -p 2: two test binaries at
# once on two cores; the kernel-building tests
# share one cached build through a file lock.
go test -count=1 -p 2 -timeout 85m "$@" ./...
