# shellcheck shell=sh disable=SC2012 # ls on sysfs: names are plain
# `vgpu-host inspect --output json` agrees with the kernel: every display-class function with
# its driver and group, group members and viability, boot VGA, companions, SR-IOV totals, mdev
# types and available instances. Read-only, run on the boot state 00-kernel.sh checked.

run_ok vgpu-host inspect --output json || return 0
inv=/tmp/inventory.json
cp "$E2E_OUT" "$inv"
expect_eq "$(jq -r .iommu "$inv")" true "inventory sees the IOMMU"

# Every class-03 function the kernel has, with the kernel's driver and group.
for d in /sys/bus/pci/devices/*; do
  a=${d##*/}
  case $(cat "$d/class") in 0x03*) ;; *) continue ;; esac
  j=$(jq -c --arg a "$a" '.devices[] | select(.address == $a)' "$inv")
  if [ -n "$j" ]; then pass "GPU $a listed"; else fail "GPU $a listed" "not in .devices"; continue; fi
  drv=$(driver_of "$a")
  [ "$drv" != - ] || drv=
  expect_eq "$(echo "$j" | jq -r .driver)" "$drv" "$a driver"
  expect_eq "$(echo "$j" | jq -r .iommu_group)" "$(group_of "$a")" "$a group"
  expect_eq "$(echo "$j" | jq -r .boot_vga)" "$([ "$(cat "$d/boot_vga" 2>/dev/null)" = 1 ] && echo true || echo false)" \
    "$a boot_vga"
  expect_eq "$(echo "$j" | jq -r .is_gpu)" true "$a is_gpu"
done

# Groups: members exactly as the kernel lists them.
for g in $(jq -r '.groups[].id' "$inv"); do
  expect_eq "$(jq -r --argjson g "$g" '.groups[] | select(.id == $g) | .members[].address' "$inv" | sort | tr '\n' ' ')" \
    "$(group_members "$g" | tr '\n' ' ')" "group $g members"
done

# Viability: the lone driverless GPU is viable; the GPU whose audio is on snd_hda_intel is not,
# nor the bridged GPU whose group holds an e1000 NIC; the blockers name those functions.
viable() { jq -r --argjson g "$(group_of "$1")" '.groups[] | select(.id == $g) | .viable' "$inv"; }
blockers() { jq -r --argjson g "$(group_of "$1")" '.groups[] | select(.id == $g) | .blockers[]?.address' "$inv" | tr '\n' ' '; }
expect_eq "$(viable "$LAB_GPU2")" true "group of $LAB_GPU2 viable (no driver bound)"
expect_eq "$(viable "$LAB_GPU1")" false "group of $LAB_GPU1 not viable (audio on snd_hda_intel)"
expect_match "$(blockers "$LAB_GPU1")" "$LAB_GPU1_AUDIO" "the audio function is the blocker"
expect_eq "$(viable "$LAB_BRIDGED_GPU")" false "group of $LAB_BRIDGED_GPU not viable (bochs-drm, e1000)"
expect_match "$(blockers "$LAB_BRIDGED_GPU")" "$LAB_BRIDGED_NIC" "the bridged NIC is a blocker"
expect_eq "$(jq -r --arg a "$LAB_GPU1" '.devices[] | select(.address == $a) | .companions | join(" ")' "$inv")" \
  "$LAB_GPU1_AUDIO" "audio is the companion of $LAB_GPU1"

# SR-IOV on the PF, asked by address (it is not a GPU).
if run_ok vgpu-host inspect "$LAB_NVME_PF" --output json; then
  pf=$(pci_dev "$LAB_NVME_PF")
  expect_eq "$(jq -r .device.sriov.total_vfs "$E2E_OUT")" "$(cat "$pf/sriov_totalvfs")" "PF total_vfs"
  expect_eq "$(jq -r .device.sriov.num_vfs "$E2E_OUT")" "$(cat "$pf/sriov_numvfs")" "PF num_vfs"
  expect_eq "$(jq -r .device.driver "$E2E_OUT")" nvme "PF driver"
fi

# mdev parents and types with the kernel's available_instances.
for p in $LAB_MDEV_PARENTS; do
  for t in /sys/class/mdev_bus/"$p"/mdev_supported_types/*; do
    id=${t##*/}
    got=$(jq -r --arg p "$p" --arg t "$id" \
      '.mdev_parents[] | select(.parent == $p) | .types[] | select(.id == $t) | "\(.available_instances) \(.device_api) \(.instances | length)"' "$inv")
    expect_eq "$got" "$(cat "$t/available_instances") $(cat "$t/device_api") $(ls "$t/devices" | wc -l)" \
      "mdev $p/$id available_instances, device_api, instances"
  done
done

# The table output names the same GPUs (a smoke test of the default format).
run_ok vgpu-host inspect && expect_match "$(output)" "$LAB_GPU2|${LAB_GPU2#0000:}" "table lists $LAB_GPU2"
