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
  squashfs-tools qemu-system-x86 qemu-utils libvirt-daemon-system libvirt-clients
  bubblewrap  # QEMU runs in bwrap (vmrunner/jail.go)
  linux-image-amd64
  busybox-static  # the panel's harnesses' guest (scripts/panel-harness*.sh)
  # mail servers for the integration tests (public-inbox is what lore runs),
  # b4 to compare series assembly, python3-dkim to sign test mail as a
  # sender's server does, opendkim as the receiving server's DKIM milter
  dovecot-imapd postfix public-inbox b4 python3-dkim opendkim
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
echo "install-deps: all packages present"
