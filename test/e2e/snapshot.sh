# shellcheck shell=sh
# Guest side of `run.sh --snapshot` (sourced by init after lib.sh). Puts the lab into the
# state the inventory tests want to see (nvme PF with 2 VFs, one mdev instance), copies the
# interesting parts of sysfs/proc into a staging tree as plain data, and writes it as a tar
# to the lab disk (/dev/vda); run.sh repacks it as host/testdata/lab-snapshot.tar.gz.
# Rules (ghw's SNAPSHOT.md): regular files by content, symlinks as symlinks, directories as
# directories; write-only files (bind, new_id, create, remove, ...) and BAR/ROM/VPD files skipped.

snap_mdev_uuid=66666666-7777-8888-9999-000000000000
pf=/sys/bus/pci/devices/$LAB_NVME_PF

# State: VFs without a host driver (the QEMU nvme VFs are offline until virt-mgmt assigns them
# resources, so probing them only produces errors), and one mdpy-hd instance.
write_ok "$pf/sriov_drivers_autoprobe" 0
write_ok "$pf/sriov_numvfs" 2
expect_content "$pf/sriov_numvfs" 2 "nvme PF has 2 VFs"
write_ok /sys/class/mdev_bus/mdpy/mdev_supported_types/mdpy-hd/create "$snap_mdev_uuid"
expect_file "/sys/bus/mdev/devices/$snap_mdev_uuid" "mdpy-hd instance exists"

stage=/tmp/snap
rm -rf "$stage"
mkdir -p "$stage/dev" "$stage/proc"

# snap_copy PATH...: copy each tree (without following symlinks) into $stage. find lists
# everything except unreadable regular files (write-only attributes have mode 0200) and BARs.
snap_copy() {
  find "$@" ! -type f -o -type f -perm -0400 ! -name 'resource[0-9]*' ! -name rom ! -name vpd \
    2>/dev/null >/tmp/snap.list
  while read -r p; do
    d=$stage$p
    if [ -L "$p" ]; then
      mkdir -p "${d%/*}" && ln -s "$(readlink "$p")" "$d"
    elif [ -d "$p" ]; then
      mkdir -p "$d"
    elif [ -f "$p" ]; then
      mkdir -p "${d%/*}"
      cat "$p" >"$d" 2>/dev/null || rm -f "$d"
    fi
  done </tmp/snap.list
}

snap_copy /sys/devices/pci0000:00 /sys/bus/pci/devices /sys/bus/pci/drivers \
  /sys/kernel/iommu_groups /sys/class/iommu /sys/devices/virtual/iommu \
  /sys/class/mdev_bus /sys/bus/mdev /sys/devices/virtual/mbochs /sys/devices/virtual/mdpy \
  /sys/devices/virtual/mtty /sys/module/vfio* /sys/module/mdev
for f in cpuinfo cmdline interrupts; do cat "/proc/$f" >"$stage/proc/$f"; done
ls -l /dev/vfio >"$stage/dev/vfio.list"

expect_file "$stage/sys/class/mdev_bus/mdpy" "snapshot has the mdev parents"
expect_file "$stage/sys/devices/virtual/mdpy/mdpy/mdev_supported_types/mdpy-hd/available_instances" \
  "snapshot has available_instances"
expect_file "$stage/sys/devices/pci0000:00/$LAB_NVME_PF/virtfn1" "snapshot has the 2nd VF link"
note "snapshot: $(find "$stage" | wc -l) entries, $(du -sk "$stage" | cut -f1) KiB"

(cd "$stage" && tar -cf /tmp/snap.tar dev proc sys)
size=$(wc -c </tmp/snap.tar)
if [ "$size" -gt 15000000 ]; then
  fail "snapshot tar fits the 16 MiB lab disk" "size $size"
else
  run_ok dd if=/tmp/snap.tar of=/dev/vda bs=1M conv=fsync
fi
