#!/usr/bin/env bash
# Builds the small Debian 12 cloud image that the bake test (TestBakeLibvirtd) boots, from
# Debian's packages only: debootstrap from the apt mirror this host is configured with (read
# from /etc/apt/sources.list{,.d/*} at run time), with systemd, cloud-init, openssh-server and
# linux-image-amd64. The disk is one ext4 filesystem with no partition table, made bootable by
# extlinux (SeaBIOS loads the filesystem's boot sector; spec `firmware: bios`).
#
# Usage: scripts/test-image.sh   (as root; prints the image's path on stdout, logs on stderr)
#
# The image is cached as $VGPU_TEST_IMAGE_CACHE (default /var/cache/vgpu-host-test)/
# debian12-cloud-HASH.qcow2, HASH being that of this script's commands (not its comments): a
# second run prints the path at once, and a change to a command builds a new image (older ones
# are removed). Needs the packages of
# `scripts/deps.sh test` (debootstrap, extlinux, e2fsprogs, qemu-utils) and a loop device.
set -euo pipefail
self=$(readlink -f "$0")
cache=${VGPU_TEST_IMAGE_CACHE:-/var/cache/vgpu-host-test}
key=$(grep -Ev '^[[:space:]]*(#|$)' "$self" | sha256sum | cut -c1-16) # comments do not count
out=$cache/debian12-cloud-$key.qcow2
log() { echo "test-image: $*" >&2; }

[ -s "$out" ] && { echo "$out"; exit 0; }
[ "$(id -u)" = 0 ] || { log "building $out needs root (debootstrap, a loop mount)"; exit 1; }
for t in debootstrap extlinux mkfs.ext4 qemu-img losetup; do
  command -v "$t" >/dev/null || { log "$t is missing: run scripts/deps.sh test"; exit 1; }
done

# The mirror: the first bookworm "main" source of apt's configuration, deb822 or one-line.
mirror() {
  local f
  for f in /etc/apt/sources.list.d/*.sources; do
    [ -r "$f" ] || continue
    awk 'BEGIN{RS=""; FS="\n"}
      { uri=""; suites=""; comps=""; types=""
        for (i=1;i<=NF;i++) { k=$i; sub(/:.*/, "", k); v=$i; sub(/^[^:]*: */, "", v)
          if (k=="URIs") uri=v; if (k=="Suites") suites=" " v " "
          if (k=="Components") comps=" " v " "; if (k=="Types") types=" " v " " }
        if (types ~ / deb / && suites ~ / bookworm / && comps ~ / main /) { split(uri, u, " "); print u[1]; exit } }' "$f"
  done
  { cat /etc/apt/sources.list /etc/apt/sources.list.d/*.list 2>/dev/null || true; } |
    awk '$1=="deb" { sub(/\[[^]]*\] */, ""); if ($3=="bookworm" && / main/) { print $2; exit } }'
}
url=$(mirror | head -n1) || true
[ -n "$url" ] || { log "no bookworm main source in /etc/apt/sources.list{,.d/*}: debootstrap needs a Debian 12 mirror"; exit 1; }

mkdir -p "$cache"
exec 9>"$cache/.build.lock"
flock 9 # one build at a time; a second waits and finds the image made
[ -s "$out" ] && { echo "$out"; exit 0; }
work=$(mktemp -d "$cache/build.XXXXXX")
mnt=$work/mnt
cleanup() {
  mountpoint -q "$mnt" 2>/dev/null && umount "$mnt"
  rm -rf "$work"
}
trap cleanup EXIT

start=$(date +%s)
log "debootstrap bookworm from the configured mirror into $work/root (a few minutes, once)"
# python3-cffi-backend by name: debootstrap does not resolve virtual packages, and
# python3-cryptography (cloud-init's dependency) depends on one it provides.
if ! debootstrap --variant=minbase \
  --include=systemd-sysv,udev,kmod,cloud-init,python3-cffi-backend,openssh-server,linux-image-amd64,initramfs-tools,e2fsprogs,iproute2 \
  bookworm "$work/root" "$url" >"$work/debootstrap.log" 2>&1; then
  tail -n 30 "$work/debootstrap.log" >&2
  log "debootstrap failed (log above)"
  exit 1
fi
r=$work/root

# Boot: an initramfs with the few modules a virtio or SATA disk needs (small: fast under TCG).
kver=$(basename "$(ls -d "$r"/lib/modules/* | sort -V | tail -n1)")
sed -i 's/^MODULES=.*/MODULES=list/' "$r/etc/initramfs-tools/initramfs.conf"
printf '%s\n' virtio_pci virtio_blk virtio_scsi sd_mod ahci ext4 >"$r/etc/initramfs-tools/modules"
chroot "$r" update-initramfs -u -k "$kver" >"$work/initramfs.log" 2>&1 || { cat "$work/initramfs.log" >&2; exit 1; }
mkdir -p "$r/boot/extlinux"
cat >"$r/boot/extlinux/extlinux.conf" <<EOF
DEFAULT debian
PROMPT 0
TIMEOUT 1
LABEL debian
  LINUX /boot/vmlinuz-$kver
  INITRD /boot/initrd.img-$kver
  APPEND root=LABEL=root ro console=ttyS0 net.ifnames=0 edd=off quiet
EOF
echo 'LABEL=root / ext4 defaults 0 1' >"$r/etc/fstab"
echo debian >"$r/etc/hostname"
# A cloud image: no machine-id, no SSH host keys, no cloud-init state until first boot.
: >"$r/etc/machine-id"
rm -f "$r"/var/lib/dbus/machine-id "$r"/etc/ssh/ssh_host_*
rm -rf "$r/var/lib/cloud"
# cloud-init: the NoCloud seed (the VM's cidata CD) only, and no network to configure (the
# test VMs have no NIC): first boot does not wait for a network that never comes. Under TCG
# an RSA host key and generating locales cost tens of seconds each: ed25519 keys only, and
# the image's C.UTF-8 locale as it is.
cat >"$r/etc/cloud/cloud.cfg.d/90-vgpu-host-test.cfg" <<'EOF'
datasource_list: [NoCloud, None]
network: {config: disabled}
ssh_genkeytypes: [ed25519]
locale: false
EOF
# Nothing the test does not need at boot: timers that start apt or fsck scrubs under TCG.
for u in apt-daily.timer apt-daily-upgrade.timer e2scrub_all.timer e2scrub_reap.service fstrim.timer; do
  chroot "$r" systemctl disable "$u" >/dev/null 2>&1 || true
done
rm -rf "$r"/var/cache/apt/archives/*.deb "$r"/var/lib/apt/lists/*

# The disk: ext4 from the tree (mke2fs -d, no mount), then extlinux into its boot sector.
# syslinux reads neither 64-bit ext4 nor metadata_csum_seed, so both are off.
raw=$work/disk.raw
truncate -s 2G "$raw"
mkfs.ext4 -q -L root -O ^64bit,^metadata_csum_seed -d "$r" "$raw"
mkdir -p "$mnt"
mount -o loop "$raw" "$mnt"
extlinux --install "$mnt/boot/extlinux" >/dev/null
umount "$mnt"
qemu-img convert -O qcow2 "$raw" "$work/disk.qcow2"
chmod 0644 "$work/disk.qcow2"
mv "$work/disk.qcow2" "$out"
# Older images (another version of this script) go.
for f in "$cache"/debian12-cloud-*.qcow2; do
  [ "$f" = "$out" ] || rm -f "$f"
done
log "built $out in $(($(date +%s) - start))s"
echo "$out"
