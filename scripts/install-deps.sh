#!/bin/bash
# Installs what patchbot needs on a fresh Debian 12 machine: the VM stack,
# the mail servers its tests start, the kernel build tools, and Debian's
# linux-source-6.1 (the default base tree). Safe to run again.
set -euo pipefail

export DEBIAN_FRONTEND=noninteractive
pkgs=(
  # kernel builds
  build-essential bc flex bison libelf-dev libssl-dev ccache cpio kmod rsync xz-utils zstd
  bubblewrap  # every build runs in bwrap (images/sandbox.go)
  linux-source-6.1
  # guest images and VMs
  # (QEMU and libvirt come from bookworm-backports, below)
  squashfs-tools
  bubblewrap  # QEMU runs in bwrap (vmrunner/jail.go)
  linux-image-amd64
  busybox-static  # the panel's harnesses' guest (scripts/panel-harness*.sh)
  # mail servers for the integration tests (public-inbox is what lore runs),
  # b4 to compare series assembly, python3-dkim to sign test mail as a
  # sender's server does, opendkim as the receiving server's DKIM milter
  dovecot-imapd postfix public-inbox b4 python3-dkim opendkim
  # a real DNS forwarder (the binary alone, no service) for the verifier's
  # budget: signing domains whose name server never answers
  dnsmasq-base
  # the fleet's queue (tests start a throwaway cluster of their own)
  postgresql
  # the dashboard's browser test (web), and the fonts its plots name
  chromium fonts-liberation
  git ca-certificates iproute2 util-linux
)

missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "install-deps: installing ${missing[*]}"
  echo "postfix postfix/main_mailer_type select Local only" | debconf-set-selections
  echo "postfix postfix/mailname string patchbot.localdomain" | debconf-set-selections
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# The VM stack from bookworm-backports (QEMU 10.0, libvirt 11.3): the
# suites measure under TCG with instruction-counted time (-icount,
# docs/vmrunner.md), and bookworm's QEMU 7.2 never brings up a guest's
# second vCPU under -icount (the boot CPU runs on, the second spins at its
# first wait, for ever). bookworm's libvirt 9.0 starts a QEMU 10 microvm
# with -no-acpi, an option QEMU 9 removed, so libvirt comes along.
# Debian's own backports archive, for these packages alone.
vm_stack=(qemu-system-x86 qemu-system-common qemu-system-data qemu-utils seabios libvirt-daemon-system libvirt-clients)
version() { dpkg-query -W -f='${Version}' "$1" 2>/dev/null; }
if ! dpkg --compare-versions "$(version qemu-system-x86)" ge 1:10.0 ||
  ! dpkg --compare-versions "$(version libvirt-daemon-system)" ge 11.0; then
  src=/etc/apt/sources.list.d/bookworm-backports.sources
  if [ ! -e "$src" ]; then
    cat > "$src" <<'SRC'
Types: deb
URIs: http://deb.debian.org/debian
Suites: bookworm-backports
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
SRC
  fi
  echo "install-deps: installing QEMU and libvirt from bookworm-backports"
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends -t bookworm-backports "${vm_stack[@]}" >/dev/null
fi
echo "install-deps: all packages present ($(qemu-system-x86_64 --version | head -1), $(libvirtd --version))"
