#!/usr/bin/env bash
# Installs the Debian packages vgpu-host's build, tests, lab and benchmarks need, and only
# those that are missing, so re-running it is fast. Needs root (apt-get) on Debian 12.
set -euo pipefail
pkgs=(
  # build: cgo bindings for libvirt.org/go/libvirt
  build-essential pkg-config libvirt-dev
  # names for inspect, peers for the benchmarks
  pci.ids pciutils jq hyperfine
  # libvirt's schema validator virt-xml-validate needs xmllint
  libxml2-utils
  # a real libvirtd and QEMU for the integration tests (domain type qemu/TCG here)
  libvirt-daemon-system libvirt-clients libvirt-daemon-driver-qemu qemu-system-x86 qemu-utils ovmf
  # the real-kernel lab: Debian's kernel, its headers and source for the mdev sample drivers
  linux-image-amd64 linux-headers-amd64 linux-source-6.1 busybox-static kmod cpio xz-utils
  # peers users know
  mdevctl driverctl
  # tools the tests use: isoinfo (seed ISO), systemd-analyze (restore unit), pgrep, unshare
  genisoimage systemd procps util-linux
)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi
if [ "$(id -u)" != 0 ]; then
  echo "deps: missing Debian packages: ${missing[*]}; run 'make deps' as root (or: sudo apt-get install ${missing[*]})" >&2
  exit 1
fi
echo "deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
