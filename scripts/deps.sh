#!/usr/bin/env bash
# Installs the Debian packages a Make target needs, and only those that are missing, so
# re-running it is fast. Usage: scripts/deps.sh GROUP...; each Make target names its groups:
#
#   helper  the cgo libvirt helper bin/vgpu-host-libvirt (libvirt.org/go/libvirt): a C toolchain,
#           pkg-config, libvirt's headers, libxml2's (it validates domains against libvirt's schema). bin/vgpu-host itself is static pure Go: it needs none.
#   test    the Go tests: a real libvirtd and QEMU (TCG), libvirt's schema validator, pci.ids,
#           the tools the tests call, groff and man for the man pages, bash-completion for the
#           completion test, dpkg for the package test, swtpm for the TPM of windows11 specs,
#           acl (setfacl) for the spec file-access test, and a kernel, busybox and cpio for
#           the guest that proves the large-BAR prediction (TestLargeBARPrediction), and for the
#           image bake (TestBakeLibvirtd): libguestfs-tools (virt-sysprep, guestfish) and what
#           scripts/test-image.sh builds the Debian cloud image with (debootstrap, extlinux, e2fsprogs)
#   e2e     the real-kernel lab: QEMU, Debian's kernel with headers and source and a C toolchain
#           (the mdev sample drivers), busybox, jq, and the peers users know (mdevctl, driverctl);
#           libvirtd with its QEMU driver, virsh and SeaBIOS, copied into the guest for the
#           hotplug scenario (58-hotplug-libvirtd: a real libvirtd inside the lab)
#   bench   the peers and tools of make bench (lspci, hyperfine, jq, GNU time), and what
#           bench/apply.sh needs beside the lab's packages: qemu-img for its VMs' disk (a fresh
#           machine lacked it, and make bench ran without apply's row) and a libvirtd that starts
#           (libvirt-daemon-system: its log and run directories, which libvirtd alone lacks) with
#           its QEMU driver and virsh, the peer it is timed against
#   k8s     make test-k8s's script: curl and jq (the API server), openssl (its keys), unshare
#           (util-linux), Debian's pci.ids (the lab host's real names)
#   node    Node.js and npm for building the Cockpit page (make cockpit), only when no node and
#           npm are in PATH already (a Node.js from elsewhere, with its own npm, is kept)
#   web     the Cockpit page's browser test (make test-web): Debian's Cockpit 287 (cockpit-ws,
#           cockpit-bridge, cockpit-system for the shell and its login), chromium (headless, driven
#           by puppeteer-core), qemu-img for the VM's disk, jq, curl, openssl (the throwaway
#           user's password hash), util-linux (unshare: that user lives in a private namespace)
#   all     every group (make deps)
#
# `make demo` and `make build-static` need no group (make install builds the helper too). Needs
# root only when something is missing (apt-get) on Debian 12.
set -euo pipefail
declare -A group=(
  [helper]="build-essential pkg-config libvirt-dev libxml2-dev"
  [test]="build-essential pkg-config libvirt-dev pci.ids pciutils jq libxml2-utils
          libvirt-daemon-system libvirt-clients libvirt-daemon-driver-qemu qemu-system-x86 qemu-utils ovmf
          genisoimage systemd procps util-linux groff-base man-db dpkg mdevctl bash-completion
          swtpm swtpm-tools acl busybox-static cpio linux-image-amd64
          libguestfs-tools debootstrap extlinux e2fsprogs"
  [e2e]="build-essential jq qemu-system-x86 linux-image-amd64 linux-headers-amd64 linux-source-6.1 busybox-static kmod cpio xz-utils
         mdevctl driverctl pciutils e2fsprogs libvirt-daemon libvirt-daemon-driver-qemu libvirt-clients seabios"
  [bench]="pci.ids pciutils jq hyperfine time qemu-utils libvirt-daemon-system libvirt-daemon-driver-qemu libvirt-clients"
  [k8s]="pci.ids jq curl openssl util-linux"
  [node]="nodejs npm"
  [web]="cockpit-ws cockpit-bridge cockpit-system chromium qemu-utils jq curl openssl util-linux python3"
)
[ $# -gt 0 ] || set -- all
groups=("$@")
want=()
for g in "$@"; do
  if [ "$g" = all ]; then
    for k in "${!group[@]}"; do
      [ "$k" = node ] && command -v node >/dev/null && command -v npm >/dev/null && continue
      want+=(${group[$k]})
    done
    continue
  fi
  if [ "$g" = node ] && command -v node >/dev/null && command -v npm >/dev/null; then
    continue
  fi
  [ -n "${group[$g]:-}" ] || { echo "deps: unknown group $g (helper, test, e2e, bench, k8s, node, web, all)" >&2; exit 2; }
  want+=(${group[$g]})
done
# swtpm's local CA (/var/lib/swtpm-localca) must belong to the user libvirtd runs swtpm as:
# tss once swtpm-tools has created it. A libvirtd started before that user existed runs swtpm
# as root, which leaves root-owned CA files behind; the next libvirtd (as tss) then fails every
# TPM start with "Need read/write rights on /var/lib/swtpm-localca/.lock.swtpm-localca".
# The package's postinst gives the directory to tss:root; this gives it its files back too.
swtpm_localca() {
  local d=/var/lib/swtpm-localca
  case " $* " in *" test "*|*" all "*) ;; *) return 0 ;; esac
  [ -d "$d" ] && getent passwd tss >/dev/null || return 0
  [ -z "$(find "$d" ! -user tss -print -quit)" ] && return 0
  if [ "$(id -u)" != 0 ]; then
    echo "deps: $d has files not owned by tss (swtpm will fail); run: sudo chown -R tss:root $d" >&2
    return 1
  fi
  echo "deps: $d: giving swtpm's local CA files back to tss (left by a swtpm run as root)"
  chown -R tss:root "$d"
}
missing=()
for p in $(printf '%s\n' "${want[@]}" | sort -u); do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  swtpm_localca "${groups[@]}"
  exit 0
fi
if [ "$(id -u)" != 0 ]; then
  echo "deps ($*): missing Debian packages: ${missing[*]}; run 'sudo make deps' (or: sudo apt-get install ${missing[*]})" >&2
  exit 1
fi
echo "deps ($*): installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
swtpm_localca "${groups[@]}"
