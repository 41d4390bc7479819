#!/usr/bin/env bash
# The real-kernel lab (docs/lab.md). Boots the installed Debian kernel under QEMU/TCG with an
# emulated Intel IOMMU and GPU-like devices, runs test/e2e/scenarios/*.sh inside the guest and
# fails unless every check passed. Nothing here touches the host's own devices or drivers.
#
#   test/e2e/run.sh                 run every scenario
#   test/e2e/run.sh --only 40-mdev  run the scenarios whose file name contains the pattern
#   test/e2e/run.sh --bench         run test/e2e/bench/*.sh instead (prints BENCH lines)
#   test/e2e/run.sh --snapshot      capture the guest's sysfs into host/testdata/lab-snapshot.tar.gz
#
# Environment: VGPU_LAB_TIMEOUT (seconds for the whole guest run, default 900),
# VGPU_LAB_KVER (kernel version; default: newest with image, modules and headers installed),
# VGPU_LAB_CACHE (default .cache/lab), VGPU_LAB_BIN (default bin/vgpu-host),
# VGPU_LAB_BOOT_TIMEOUT (seconds for init's first line before one more boot, default 180),
# VGPU_LAB_VERBOSE_BOOT=1 (the kernel's boot messages on the console from the first boot).
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
mode="test"
only=
timeout_s=${VGPU_LAB_TIMEOUT:-900} # 58-hotplug-libvirtd alone takes up to 220 s under load
cache_root=${VGPU_LAB_CACHE:-$repo/.cache/lab}
bin=${VGPU_LAB_BIN:-$repo/bin/vgpu-host}
out=$here/out
snapshot_dest=$repo/host/testdata/lab-snapshot.tar.gz

usage() { sed -n '2,16s/^# \{0,1\}//p' "$0"; }
die() { echo "lab: $*" >&2; exit 1; }
log() { echo "lab: $*" >&2; }

while [ $# -gt 0 ]; do
  case $1 in
    --snapshot) mode=snapshot ;;
    --bench) mode=bench ;;
    --only) [ $# -ge 2 ] || die "--only needs a pattern"; only=$2; shift ;;
    --only=*) only=${1#--only=} ;;
    --timeout) [ $# -ge 2 ] || die "--timeout needs seconds"; timeout_s=$2; shift ;;
    -h | --help) usage; exit 0 ;;
    *) usage >&2; die "unknown argument $1" ;;
  esac
  shift
done

# Guest modules, in load order; dependencies are resolved with modprobe --show-depends.
# virtio_pci first so virtio-gpu and virtio-blk find their transport.
guest_modules=(
  virtio_pci virtio_blk virtio-gpu qxl bochs snd_hda_codec_generic snd_hda_intel e1000 e1000e nvme
  vfio-pci vfio_iommu_type1 mdev ext4
)
# Host tools copied into the guest with their libraries, for scenarios (jq for inspect's JSON;
# mdevctl, the peer of the mdev bench: a Rust binary needing libc and libgcc_s only, plus its
# /etc/mdevctl.d callout and notifier directories, made below).
# VGPU_LAB_TOOLS adds more host tools for one run, e.g. "strace perf" to profile a scenario or a
# bench under TCG (docs/lab.md, "Profiling in the guest"); none by default.
read -r -a lab_extra_tools <<<"${VGPU_LAB_TOOLS:-}"
guest_tools=(jq mdevctl "${lab_extra_tools[@]}")
# The kernel's mdev sample drivers, built out of tree (linux-source samples/vfio-mdev).
mdev_samples=(mtty mdpy mbochs)
# A real libvirtd and QEMU inside the guest, for the scenarios that say "# lab: libvirtd"
# (58-hotplug-libvirtd.sh): the monolithic daemon with only its QEMU connection driver, virsh,
# qemu-system-x86_64 with the accel/display modules a TCG guest with a virtio-gpu loads, and
# the firmware SeaBIOS boots it with. What a run without such a scenario leaves out.
lab_libvirt_exes=(/usr/sbin/libvirtd /usr/bin/virsh /usr/bin/qemu-system-x86_64)
lab_libvirt_libs=(
  /usr/lib/x86_64-linux-gnu/libvirt/connection-driver/libvirt_driver_qemu.so
  /usr/lib/x86_64-linux-gnu/qemu/accel-tcg-x86_64.so
  /usr/lib/x86_64-linux-gnu/qemu/hw-display-virtio-gpu.so
  /usr/lib/x86_64-linux-gnu/qemu/hw-display-virtio-gpu-pci.so
  /usr/lib/x86_64-linux-gnu/qemu/hw-display-virtio-vga.so
)
lab_libvirt_data=(
  /usr/share/seabios/bios-256k.bin /usr/share/seabios/vgabios-virtio.bin /usr/share/seabios/vgabios-stdvga.bin
  /usr/share/qemu/kvmvapic.bin /usr/share/qemu/linuxboot_dma.bin /usr/share/libvirt/cpu_map
  /usr/share/libvirt/schemas
)
lab_libvirt_pkgs=(libvirt-daemon libvirt-daemon-driver-qemu libvirt-clients libvirt0 qemu-system-x86 seabios)

need() {
  local missing=() t
  for t in "$@"; do command -v "$t" >/dev/null 2>&1 || missing+=("$t"); done
  [ ${#missing[@]} -eq 0 ] || die "missing tools: ${missing[*]} (run 'make deps')"
}
need qemu-system-x86_64 modprobe cpio tar xz make sha256sum timeout ldd flock mkfs.ext4 fallocate df

# pick_kver: the newest kernel that has an image in /boot, modules and headers (build link).
pick_kver() {
  local k best=
  for k in $(find /lib/modules -mindepth 1 -maxdepth 1 -printf '%f\n' 2>/dev/null | sort -V); do
    [ -f "/boot/vmlinuz-$k" ] && [ -e "/lib/modules/$k/build/Makefile" ] && best=$k
  done
  [ -n "$best" ] || die "no kernel with image, modules and headers installed (need linux-image-amd64 and linux-headers-amd64: make deps)"
  echo "$best"
}
kver=${VGPU_LAB_KVER:-$(pick_kver)}
kernel=/boot/vmlinuz-$kver
[ -r "$kernel" ] || die "cannot read $kernel (the lab boots the host's kernel image; run as root or make it readable)"
[ -x "$bin" ] || die "$bin missing: run 'make build' first"
busybox=$(command -v busybox || true)
[ -n "$busybox" ] || die "busybox missing (busybox-static: make deps)"
if ldd "$busybox" >/dev/null 2>&1; then die "$busybox is dynamically linked; install busybox-static"; fi

cache=$cache_root/$kver
mkdir -p "$cache" "$out"
# One lab at a time per work tree: engineers share it, and the runs share out/ and the cache.
exec 9>"$out/.lock"
if ! flock -n 9; then
  log "another lab run holds $out/.lock; waiting"
  flock 9
fi
rm -rf "$out"/run-root.* "$out"/snapshot.* "$cache"/build-* # left by an interrupted run

# Room in out/ first: a full run left 183 MiB there (the crash-test binary, the initramfs with
# libvirt's part, the 16 MiB disk; the run's cpio and its staging come and go before), and the
# whole lab passed in a 330 MiB tmpfs. On a full disk a copy or cpio would stop with "No space
# left on device" and no word of where; a guest whose console cannot be written looks hung.
need_mib=320
free_mib=$(df -Pm "$out" | awk 'NR == 2 { print $4 }')
[ "${free_mib:-0}" -ge "$need_mib" ] ||
  die "only ${free_mib:-0} MiB free for $out (df -m); a lab run needs about $need_mib MiB there: free some space on that file system"

key() { printf '%s\n' "$@" | sha256sum | cut -c1-12; }

# build_mdev_samples: mtty/mdpy/mbochs .ko for $kver, cached by kernel, source and Kbuild.
build_mdev_samples() {
  local series src kbuild k dir tmp t0
  series=$(echo "$kver" | cut -d. -f1,2)
  src=/usr/src/linux-source-$series.tar.xz
  [ -r "$src" ] || die "$src missing (linux-source-$series: make deps)"
  kbuild="obj-m := $(printf '%s.o ' "${mdev_samples[@]}")"
  k=$(key "$kver" "$(stat -c '%s %Y' "$src")" "$kbuild" "$(stat -c '%Y' "/lib/modules/$kver/build/Makefile")")
  dir=$cache/mdev-$k
  mdev_dir=$dir
  if [ -f "$dir/.done" ]; then
    log "mdev sample modules: cached ($dir)"
    return
  fi
  t0=$SECONDS
  tmp=$(mktemp -d "$cache/build-mdev.XXXXXX")
  tar -xJf "$src" -C "$tmp" --wildcards "linux-source-$series/samples/vfio-mdev/*"
  local m=$tmp/linux-source-$series/samples/vfio-mdev
  echo "$kbuild" >"$m/Kbuild"
  make -s -C "/lib/modules/$kver/build" M="$m" modules >"$tmp/build.log" 2>&1 ||
    { cat "$tmp/build.log" >&2; die "building mdev samples failed"; }
  rm -rf "$cache"/mdev-* && mkdir -p "$dir" # older builds are never used again
  local s
  for s in "${mdev_samples[@]}"; do cp "$m/$s.ko" "$dir/"; done
  touch "$dir/.done"
  rm -rf "$tmp"
  log "mdev sample modules: built in $((SECONDS - t0))s ($dir)"
}

# copy_module SRC ROOT: put a module under ROOT at the same path, decompressed (busybox insmod
# reads plain .ko only); prints the guest path.
copy_module() {
  local src=$1 root=$2 dst
  dst=${src%.xz}
  dst=${dst%.zst}
  mkdir -p "$root$(dirname "$dst")"
  case $src in
    *.xz) xz -dc "$src" >"$root$dst" ;;
    *.zst) zstd -qdc "$src" >"$root$dst" ;;
    *) cp "$src" "$root$dst" ;;
  esac
  echo "$dst"
}

mkcpio() { # mkcpio DIR OUT: newc archive, owned by root, reproducible
  (cd "$1" && find . -mindepth 1 -print0 | LC_ALL=C sort -z |
    cpio --null -o -H newc --reproducible -R 0:0 --quiet) >"$2"
}

# build_base: busybox and the kernel modules, cached; the part of the initramfs that only
# changes with the kernel.
build_base() {
  local k root list m cmd path n seen=" " t0
  k=$(key "$kver" "${guest_modules[*]}" "$(sha256sum "$busybox")" "$mdev_dir")
  base=$cache/base-$k.cpio
  if [ -f "$base" ]; then
    log "base initramfs: cached ($base)"
    return
  fi
  t0=$SECONDS
  root=$(mktemp -d "$cache/build-base.XXXXXX")
  mkdir -p "$root"/{bin,sbin,usr/bin,usr/sbin,proc,sys,dev,tmp,run,etc,e2e,lib64}
  cp "$busybox" "$root/bin/busybox"
  list=$root/e2e/modules.list
  : >"$list"
  for m in "${guest_modules[@]}"; do
    while read -r cmd path _; do
      [ "$cmd" = insmod ] || continue # "builtin X" lines need nothing
      case $seen in *" $path "*) continue ;; esac
      seen="$seen$path "
      copy_module "$path" "$root" >>"$list"
    done < <(modprobe -S "$kver" --show-depends "$m" || die "modprobe cannot resolve $m for $kver")
  done
  mkdir -p "$root/lib/modules/$kver/extra"
  for m in "${mdev_samples[@]}"; do
    cp "$mdev_dir/$m.ko" "$root/lib/modules/$kver/extra/"
    echo "/lib/modules/$kver/extra/$m.ko" >>"$list"
  done
  n=$(wc -l <"$list")
  rm -f "$cache"/base-*.cpio
  mkcpio "$root" "$base.tmp"
  mv "$base.tmp" "$base"
  rm -rf "$root"
  log "base initramfs: built in $((SECONDS - t0))s ($(du -h "$base" | cut -f1), $n modules)"
}

# copy_exe SRC ROOT DEST: an executable and its shared libraries (libvirt through cgo, ...):
# every "=> /path" and the loader line of ldd, at the same paths.
copy_exe() {
  local lib
  mkdir -p "$2$(dirname "$3")"
  cp -L "$1" "$2$3"
  ldd "$1" >/dev/null 2>&1 || return 0 # static
  while read -r lib; do
    [ -e "$2$lib" ] && continue
    mkdir -p "$2$(dirname "$lib")"
    cp -L "$lib" "$2$lib"
  done < <(ldd "$1" | awk '$2 == "=>" && $3 ~ /^\// {print $3} $1 ~ /^\// {print $1}' | sort -u)
}

# build_libvirt_part: libvirtd, virsh, QEMU, their libraries, modules and firmware, and a
# minimal configuration (docs/lab.md "A libvirtd in the guest"), as a second cached cpio keyed
# by the installed packages' versions and the lists above.
build_libvirt_part() {
  local k root f t0 vers
  vers=$(dpkg-query -W -f '${Package}=${Version}\n' "${lab_libvirt_pkgs[@]}" 2>/dev/null) ||
    die "libvirt and QEMU are not installed (${lab_libvirt_pkgs[*]}: make deps)"
  k=$(key "$vers" "${lab_libvirt_exes[*]}" "${lab_libvirt_libs[*]}" "${lab_libvirt_data[*]}" "$(declare -f build_libvirt_part copy_exe)")
  libvirt_part=$cache/libvirt-$k.cpio
  if [ -f "$libvirt_part" ]; then
    log "libvirt initramfs: cached ($libvirt_part, $(du -h "$libvirt_part" | cut -f1))"
    return
  fi
  t0=$SECONDS
  root=$(mktemp -d "$cache/build-libvirt.XXXXXX")
  for f in "${lab_libvirt_exes[@]}" "${lab_libvirt_libs[@]}"; do
    [ -e "$f" ] || die "$f missing (${lab_libvirt_pkgs[*]}: make deps)"
    copy_exe "$f" "$root" "$f"
  done
  for f in "${lab_libvirt_data[@]}"; do
    [ -e "$f" ] || die "$f missing (${lab_libvirt_pkgs[*]}: make deps)"
    mkdir -p "$root$(dirname "$f")"
    cp -rL "$f" "$root$f"
  done
  mkdir -p "$root"/etc/libvirt "$root"/var/{lib,cache,log}/libvirt
  # Root's QEMU, no cgroups (the guest mounts none), no security driver, no namespaces, the
  # domain's stdout to a file (no virtlogd), no polkit or dbus: the socket is root's only.
  cat >"$root/etc/libvirt/libvirtd.conf" <<'CONF'
unix_sock_group = "root"
unix_sock_ro_perms = "0700"
unix_sock_rw_perms = "0700"
auth_unix_ro = "none"
auth_unix_rw = "none"
log_outputs = "3:file:/var/log/libvirt/libvirtd.log"
CONF
  cat >"$root/etc/libvirt/qemu.conf" <<'CONF'
user = "root"
group = "root"
dynamic_ownership = 0
remember_owner = 0
security_driver = "none"
cgroup_controllers = [ ]
namespaces = [ ]
stdio_handler = "file"
CONF
  # libvirt resolves Debian's built-in QEMU user and group (libvirt-qemu) before it reads
  # qemu.conf, so they must exist even though QEMU runs as root.
  printf 'root:x:0:0:root:/root:/bin/sh\nlibvirt-qemu:x:64055:64055::/var/lib/libvirt:/bin/false\n' >"$root/etc/passwd"
  printf 'root:x:0:\nlibvirt-qemu:x:64055:\nkvm:x:64056:\n' >"$root/etc/group"
  # libvirt's clients and vgpu-host look for the socket under /var/run.
  ln -s ../run "$root/var/run"
  rm -f "$cache"/libvirt-*.cpio
  mkcpio "$root" "$libvirt_part.tmp"
  mv "$libvirt_part.tmp" "$libvirt_part"
  rm -rf "$root"
  log "libvirt initramfs: built in $((SECONDS - t0))s ($(du -h "$libvirt_part" | cut -f1))"
}

# build_run_part: init, lib.sh, scenarios, the binary and its shared libraries. Rebuilt every
# run (it is small and changes with every edit).
build_run_part() {
  local root lib f
  root=$(mktemp -d "$out/run-root.XXXXXX")
  mkdir -p "$root"/{bin,e2e/scenarios,e2e/bench}
  cp "$here/init" "$root/init"
  chmod 755 "$root/init"
  cp "$here/lib.sh" "$here/lab.env" "$here/snapshot.sh" "$root/e2e/"
  for f in "$here"/scenarios/*.sh; do [ -e "$f" ] && cp "$f" "$root/e2e/scenarios/"; done
  for f in "$here"/bench/*.sh; do [ -e "$f" ] && cp "$f" "$root/e2e/bench/"; done
  copy_exe "$bin" "$root" /bin/vgpu-host
  # The crash-test build (apply stops dead at a chosen step) for 50-apply's kill -9 checks. It
  # is the agent's main (cmd/vgpu-host-agent: the command tree and the agent), and is the
  # guest's vgpu-host-agent: `vgpu-host agent` (60-reboot's second boot) runs it, as it runs
  # bin/vgpu-host-agent on a host.
  CGO_ENABLED=0 go -C "$repo" build -tags crashtest -o "$out/vgpu-host-crashtest" ./cmd/vgpu-host-agent
  copy_exe "$out/vgpu-host-crashtest" "$root" /bin/vgpu-host-crashtest
  ln -s vgpu-host-crashtest "$root/bin/vgpu-host-agent"
  # The floor of every process start under TCG, for the benches: a bare hello-world Go binary
  # built with the same toolchain and flags as bin/vgpu-host (static, -trimpath, and its
  # runtime defaults, cmd/vgpu-host/godebug.default: without them a bare binary's start here
  # was half zeroing 2 MB huge pages, which vgpu-host no longer pays).
  if [ "$mode" = bench ]; then
    mkdir -p "$out/bare-go"
    printf 'package main\n\nimport "os"\n\nfunc main() { os.Stdout.WriteString("hello\\n") }\n' >"$out/bare-go/main.go"
    printf 'module hello\n\ngo 1.21\n' >"$out/bare-go/go.mod"
    (cd "$out/bare-go" && CGO_ENABLED=0 GOFLAGS= go build -trimpath -ldflags "-X runtime.godebugDefault=$(cat "$repo/cmd/vgpu-host/godebug.default")" -o "$root/bin/bare-go" .)
  fi
  local t
  for t in "${guest_tools[@]}"; do
    if command -v "$t" >/dev/null; then
      copy_exe "$(command -v "$t")" "$root" "/usr/bin/$t"
      [ "$t" != mdevctl ] || mkdir -p "$root/etc/mdevctl.d/scripts.d/callouts" "$root/etc/mdevctl.d/scripts.d/notifiers"
    else
      log "warning: $t not installed on the host; scenarios will not have it (make deps)"
    fi
  done
  # PCI names for inspect, where the host has them (Debian's pci.ids).
  for f in /usr/share/misc/pci.ids /usr/share/hwdata/pci.ids; do
    [ -e "$f" ] || continue
    mkdir -p "$root$(dirname "$f")"
    cp -L "$f" "$root$f"
  done
  {
    echo "E2E_MODE=$mode"
    printf 'E2E_ONLY=%q\n' "$only"
  } >"$root/e2e/config"
  mkcpio "$root" "$out/run.cpio"
  rm -rf "$root"
}

# A selected scenario that says "# lab: libvirtd" gets libvirtd and QEMU in the guest (every
# test run selects 58-hotplug-libvirtd, so make test always has them).
libvirt_part=
want_libvirt=
if [ "$mode" = test ]; then
  for f in "$here"/scenarios/*.sh; do
    case ${f##*/} in *"$only"*) ;; *) continue ;; esac
    if grep -q '^# lab: libvirtd' "$f"; then want_libvirt=1; fi
  done
fi
build_mdev_samples
build_base
[ -z "$want_libvirt" ] || build_libvirt_part
build_run_part
cat "$base" ${libvirt_part:+"$libvirt_part"} "$out/run.cpio" >"$out/initrd.cpio"
rm -f "$out/run.cpio"

# The result/snapshot disk (virtio-blk at 00:1e.0, as in the shared fixture). The guest writes
# a plain tar to it in --snapshot mode. In test mode it is the guest's persistent disk: an
# empty ext4 file system that init mounts for /etc and /var/lib, so state written with
# --persist survives the guest's reboot (scenarios that call request_reboot; docs/lab.md).
# Made afresh for each boot (make_disk, below). Its blocks are allocated up front where the
# file system can (fallocate): a guest write must never be the one that finds the host's disk
# full, and QEMU reports an I/O error to the guest (werror=report) instead of pausing it, which
# would look like a hung guest until the timeout.
disk=$out/disk.img
make_disk() {
  local err
  rm -f "$disk"
  if ! err=$(fallocate -l 16M "$disk" 2>&1); then
    case $err in *"No space"*) die "no room for the lab's 16 MiB disk $disk: $(df -h --output=avail "$out" | tail -n 1) free there" ;; esac
    truncate -s 16M "$disk" || die "cannot make the lab's disk $disk"
  fi
  [ "$mode" != test ] || mkfs.ext4 -q -F -L vgpulab -E root_owner=0:0 "$disk" ||
    die "mkfs.ext4 failed on the lab's disk $disk"
}

# A scenario that reboots the guest (request_reboot in lib.sh) needs QEMU to reset on the
# guest's reboot instead of exiting (-no-reboot). Only then: a run without one keeps
# -no-reboot, so a kernel panic (panic=-1) ends the run at once instead of looping.
no_reboot=-no-reboot
if [ "$mode" = test ]; then
  for f in "$here"/scenarios/*.sh; do
    case ${f##*/} in *"$only"*) ;; *) continue ;; esac
    if grep -q '^[[:space:]]*request_reboot' "$f"; then no_reboot=; fi
  done
fi

console=$out/console.log

# The kernel's command line. quiet: only errors reach the console, so the scenarios' lines are
# not interleaved with the kernel's. A run whose init did not start is retried once with
# boot_verbose (boot_guest, below): the kernel's messages from its first one, and init turns
# the console quiet again when it starts. The retry also runs TCG single-threaded: an early
# hang that depends on the two vCPU threads' timing (an IPI or a calibration missed) does not
# repeat there, and one that does shows where.
cmdline_base="console=ttyS0 intel_iommu=on iommu=pt no_timer_check panic=-1 rdinit=/init"
boot_quiet="quiet loglevel=3"
boot_verbose="loglevel=7 earlyprintk=serial,ttyS0,115200"
[ -z "${VGPU_LAB_VERBOSE_BOOT:-}" ] || boot_quiet=$boot_verbose
# Seconds the guest has to print init's first line ("== lab: kernel ..."); in every run here on
# 2026-11-27 it came 2.8-5.2 s into the guest's kernel (a first boot; see boot_guest).
boot_s=${VGPU_LAB_BOOT_TIMEOUT:-180}

# Device layout: keep in sync with lab.env (00-kernel.sh checks the kernel agrees).
# no_timer_check: under TCG on a loaded host the kernel's early check that the IO-APIC timer
# ticks through interrupt remapping can miss its window and panic ("timer doesn't work through
# Interrupt-remapped IO-APIC", seen here at load 7 on 2 cores); the parameter skips that check,
# as virtualised guests commonly do, and the timer works.
# shellcheck disable=SC2054 # the commas are QEMU's property lists
qemu_args=(
  -machine q35,kernel-irqchip=split -cpu max -smp 2 -m 1024
  # Two NUMA nodes, a CPU and half the memory each: node 1 holds the expander bus below
  -object memory-backend-ram,id=mem0,size=512M -object memory-backend-ram,id=mem1,size=512M
  -numa node,nodeid=0,cpus=0,memdev=mem0 -numa node,nodeid=1,cpus=1,memdev=mem1
  -nodefaults -display none -monitor none ${no_reboot:+"$no_reboot"}
  -serial "file:$console"
  -kernel "$kernel" -initrd "$out/initrd.cpio"
  -device intel-iommu,intremap=on,caching-mode=on
  -audiodev none,id=snd0
  # 00:02.0 boot VGA
  -device qxl-vga,bus=pcie.0,addr=02.0
  # 00:03.0 a plain NIC
  -netdev user,id=net0,restrict=on -device e1000e,bus=pcie.0,addr=03.0,netdev=net0
  # 00:04.0 root port → 01:00.0 GPU + 01:00.1 its HDMI-style audio, one IOMMU group
  -device pcie-root-port,id=rp1,bus=pcie.0,addr=04.0,chassis=1,port=1
  -device ati-vga,bus=rp1,addr=00.0,multifunction=on
  -device intel-hda,id=hda1,bus=rp1,addr=00.1
  -device hda-duplex,bus=hda1.0,audiodev=snd0
  # 00:05.0 root port → 02:00.0 an identical second GPU
  -device pcie-root-port,id=rp2,bus=pcie.0,addr=05.0,chassis=2,port=2
  -device ati-vga,bus=rp2,addr=00.0
  # 00:06.0 paravirtual GPU
  -device virtio-gpu-pci,bus=pcie.0,addr=06.0
  # 00:0a.0 nvme SR-IOV PF, VFs at 00:0a.1-3 (QEMU needs a subsystem and flexible resources:
  # vq_flexible >= 2*VFs, max_ioqpairs >= vq_flexible+2, msix_qsize >= vi_flexible+2)
  -device nvme-subsys,id=nvsub0,nqn=vgpu-host-lab
  -device nvme,bus=pcie.0,addr=0a.0,serial=vgpulab0,subsys=nvsub0,sriov_max_vfs=3,sriov_vq_flexible=6,sriov_vi_flexible=3,max_ioqpairs=8,msix_qsize=5
  # 00:0b.0 PCIe-to-PCI bridge → 03:01.0 GPU + 03:02.0 NIC, one IOMMU group with the bridge
  -device pcie-pci-bridge,id=br1,bus=pcie.0,addr=0b.0
  -device bochs-display,bus=br1,addr=01.0
  -netdev user,id=net1,restrict=on -device e1000,bus=br1,addr=02.0,netdev=net1
  # 00:0c.0 PCIe expander bridge on NUMA node 1 (root bus 40) → 40:00.0 root port →
  # 41:00.0 a third ati-vga: the one GPU with a NUMA node (the root bus's functions have none)
  -device pxb-pcie,id=pxb1,bus_nr=0x40,numa_node=1,bus=pcie.0,addr=0c.0
  -device pcie-root-port,id=rp3,bus=pxb1,addr=00.0,chassis=3,port=3
  -device ati-vga,bus=rp3,addr=00.0
  # 00:1e.0 the lab's disk
  -drive "file=$disk,if=none,id=disk0,format=raw,werror=report,rerror=report"
  -device virtio-blk-pci,drive=disk0,bus=pcie.0,addr=1e.0
)

# boot_guest VERBOSITY TCG: one QEMU run, TCG being multi (a host thread per vCPU) or single
# (one thread for both: the whole lab about 25% slower, 227 s against 180 s here, without
# multi-threaded TCG's cross-vCPU timing). Returns QEMU's status, 124/137 at the timeout, or
# 200 when init did not start within boot_s of QEMU's start: QEMU is stopped then. Only the
# first boot is watched. The boot after 60-reboot's reboot reached init 5 s into the new
# kernel when 60-reboot ran alone, but up to 60 and 102 s in full runs, after
# 58-hotplug-libvirtd's nested guest: in one (VGPU_LAB_VERBOSE_BOOT=1) the kernel took 56 s to
# unpack the same initramfs. That boot is left to the run's timeout.
boot_guest() {
  local verbosity=$1 tcg=$2 qpid tpid rc=0
  make_disk
  : >"$console"
  timeout -k 10 "$timeout_s" qemu-system-x86_64 -accel "tcg,thread=$tcg" "${qemu_args[@]}" \
    -append "$cmdline_base $verbosity" >"$out/qemu.log" 2>&1 &
  qpid=$!
  # shellcheck disable=SC2064 # qpid is this boot's, now
  trap "kill $qpid 2>/dev/null || true" EXIT INT TERM
  # Live progress: the scenario lines, as they arrive.
  tail -n +1 -F --pid="$qpid" "$console" 2>/dev/null | tr -d '\r' |
    grep --line-buffered -E '^(PASS|FAIL|SKIP|BENCH|== )' &
  tpid=$!
  local t0=$SECONDS
  while kill -0 "$qpid" 2>/dev/null && ! grep -q '^== lab: kernel ' "$console"; do
    if [ $((SECONDS - t0)) -ge "$boot_s" ]; then
      kill "$qpid" 2>/dev/null || true
      wait "$qpid" 2>/dev/null || true
      wait "$tpid" || true
      trap - EXIT INT TERM
      return 200
    fi
    sleep 1
  done
  wait "$qpid" || rc=$?
  wait "$tpid" || true
  trap - EXIT INT TERM
  return "$rc"
}

# What a guest whose init did not start leaves to go on: the space left where QEMU writes its
# console and disk (a full disk loses the console's lines), and QEMU's own messages.
boot_hang_report() {
  log "init did not start within ${boot_s}s of QEMU's start (its first line comes after about 3s)"
  df -h "$out" >&2 || true
  if [ -s "$out/qemu.log" ]; then sed 's/^/qemu: /' "$out/qemu.log" >&2; fi
  if [ -s "$console" ]; then tr -d '\r' <"$console" | tail -n 40 | sed 's/^/console: /' >&2; fi
}

log "kernel $kver, mode $mode${only:+, only *$only*}; booting (timeout ${timeout_s}s, console: ${console#"$repo/"})"
t0=$SECONDS
rc=0
boot_guest "$boot_quiet" multi || rc=$?
if [ "$rc" -eq 200 ]; then
  boot_hang_report
  log "booting once more, with the kernel's messages on the console and single-threaded TCG"
  t0=$SECONDS
  rc=0
  boot_guest "$boot_verbose" single || rc=$?
fi
elapsed=$((SECONDS - t0))

transcript=$out/console.txt
tr -d '\r' <"$console" >"$transcript"

failed() {
  echo "----- guest transcript ($transcript) -----" >&2
  cat "$transcript" >&2
  if [ -s "$out/qemu.log" ]; then
    echo "----- qemu ($out/qemu.log) -----" >&2
    cat "$out/qemu.log" >&2
  fi
  die "$*"
}

if [ "$rc" -eq 200 ]; then
  df -h "$out" >&2 || true
  failed "init did not start within ${boot_s}s, twice; the kernel's own messages from the second run are above"
fi
if [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then
  failed "timeout: the guest did not finish within ${timeout_s}s"
fi
[ "$rc" -eq 0 ] || failed "qemu exited with status $rc"
summary=$(grep -E '^E2E SUMMARY ' "$transcript" | tail -n 1 || true)
[ -n "$summary" ] || failed "no summary line from the guest (init died or the kernel panicked)"
log "guest ran ${elapsed}s: ${summary#E2E SUMMARY }"
nfail=$(grep -c '^FAIL' "$transcript" || true)
case $summary in *" fail=0 "*) ;; *) [ "$nfail" -gt 0 ] || nfail=1 ;; esac
[ "$nfail" -eq 0 ] || failed "$nfail failing check(s); see FAIL lines above"
case $summary in *" pass=0"*)
  [ "$mode" = bench ] || failed "no checks ran${only:+ (does --only \"$only\" match a scenario?)}" ;;
esac

if [ "$mode" = snapshot ]; then
  stage=$(mktemp -d "$out/snapshot.XXXXXX")
  tar -xf "$disk" -C "$stage" 2>/dev/null || failed "the snapshot disk holds no readable tar"
  [ -d "$stage/sys/kernel/iommu_groups" ] || failed "snapshot has no sys/kernel/iommu_groups"
  mkdir -p "$(dirname "$snapshot_dest")"
  (cd "$stage" && find . -mindepth 1 -printf '%P\n' | LC_ALL=C sort >"$out/snapshot.list")
  tar --sort=name --owner=0 --group=0 --numeric-owner --mtime=@0 --format=gnu \
    -C "$stage" -cf - dev proc sys | gzip -9n >"$snapshot_dest.tmp"
  mv "$snapshot_dest.tmp" "$snapshot_dest"
  rm -rf "$stage"
  size=$(stat -c %s "$snapshot_dest")
  log "snapshot: ${snapshot_dest#"$repo/"} ($((size / 1024)) KiB, $(wc -l <"$out/snapshot.list") entries)"
  [ "$size" -lt 204800 ] || die "snapshot is ${size} bytes; keep it under 200 KiB (drop a directory in snapshot.sh)"
fi

if [ "$mode" = test ]; then
  # The plain closing line CI and people read: counts of the guest's checks.
  p=$(sed -nE 's/.* pass=([0-9]+).*/\1/p' <<<"$summary")
  s=$(sed -nE 's/.* skip=([0-9]+).*/\1/p' <<<"$summary")
  echo "e2e: ${p:-0} passed, 0 failed, ${s:-0} skipped"
fi
