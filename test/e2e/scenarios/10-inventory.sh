# shellcheck shell=sh disable=SC2012 # ls on sysfs: names are plain
# `vgpu-host inspect --output json` agrees with the kernel: every display-class function with
# its IDs, driver, group, NUMA node and boot_vga; every group with its members (class, driver)
# and a viability verdict recomputed here from the kernel's own sysfs; companions; SR-IOV
# totals and VFs; every mdev parent and type with available instances and instances; an mdev
# instance's own group. `check` judges the lab as the kernel shows it. Ends in the boot state
# 00-kernel.sh checked (the one mdev instance created here is removed).
#
# Under TCG every jq or vgpu-host start costs a noticeable fraction of a second, so each side
# is rendered once as lines ("inspect says" from one jq call, "the kernel says" from sysfs in
# shell) and the lines are compared one by one.

run_ok vgpu-host inspect --output json || return 0
inv=/tmp/inventory.json
cp "$E2E_OUT" "$inv"
expect_eq "$(jq -r '"\(.iommu) \(.warnings // [] | length)"' "$inv")" "true 0" "inventory sees the IOMMU, no scan warnings"

# same_lines WHAT GOT_FILE WANT_FILE: every line of WANT_FILE is in GOT_FILE and vice versa,
# one PASS/FAIL per expected line (named by its first field) and one for extra lines.
same_lines() {
  while IFS= read -r _l; do
    if grep -qxF -- "$_l" "$2"; then pass "$1 ${_l%% *}: $_l"; else
      fail "$1 ${_l%% *}" "kernel: $_l
inspect: $(grep -F -- "${_l%% *} " "$2" || echo '(missing)')"
    fi
  done <"$3"
  _extra=$(grep -vxF -f "$3" "$2")
  if [ -z "$_extra" ]; then pass "$1: nothing the kernel does not have"; else fail "$1: lines the kernel does not have" "$_extra"; fi
}
bool() { if [ "$1" = 1 ]; then echo true; else echo false; fi; }
drv() { _d=$(driver_of "$1"); [ "$_d" != - ] || _d=; echo "$_d"; }
hex() { cut -c3- "$1"; }

# Every class-03 function: IDs, class, driver, group, NUMA node and its CPUs (inspect reads
# local_cpulist once per node), boot_vga.
jq -r '.devices[] | select(.is_gpu) | "\(.address) \(.vendor_id):\(.device_id) \(.class) drv=\(.driver) group=\(.iommu_group) numa=\(.numa_node) cpus=\(.local_cpulist) boot_vga=\(.boot_vga)"' \
  "$inv" >/tmp/got-gpus
gpu_groups=
for d in /sys/bus/pci/devices/*; do
  a=${d##*/}
  case $(cat "$d/class") in 0x03*) ;; *) continue ;; esac
  echo "$a $(hex "$d/vendor"):$(hex "$d/device") $(hex "$d/class") drv=$(drv "$a") group=$(group_of "$a") numa=$(cat "$d/numa_node") cpus=$(cat "$d/local_cpulist") boot_vga=$(bool "$(cat "$d/boot_vga" 2>/dev/null)")"
  gpu_groups="$gpu_groups $(group_of "$a")"
done >/tmp/want-gpus
same_lines GPU /tmp/got-gpus /tmp/want-gpus

# kernel_blockers G: the members of group G that the kernel shows on a driver vfio cannot
# share the group with (endpoints: anything but vfio-pci or none; bridges 0600/0604/0607/0609:
# anything but pcieport, shpchp or none). The rule is recomputed here from sysfs so the
# verdict is checked against the kernel's state, not against inspect's own code.
kernel_blockers() {
  for m in $(group_members "$1"); do
    [ -e "/sys/bus/pci/devices/$m/class" ] || continue # an mdev (UUID): never a blocker
    _drv=$(driver_of "$m")
    case $(cat "/sys/bus/pci/devices/$m/class") in
      0x0600* | 0x0604* | 0x0607* | 0x0609*) case $_drv in - | pcieport | shpchp) continue ;; esac ;;
      *) case $_drv in - | vfio-pci) continue ;; esac ;;
    esac
    printf '%s,' "$m"
  done
}
# kernel_group G: group G as one line, the way group_line renders inspect's.
kernel_group() {
  _members=''
  _b=$(kernel_blockers "$1")
  for m in $(group_members "$1"); do
    if [ -e "/sys/bus/pci/devices/$m/class" ]; then
      _members="$_members$m/$(hex "/sys/bus/pci/devices/$m/class")/$(drv "$m"),"
    else
      _t=$(readlink "/sys/bus/mdev/devices/$m/mdev_type") _p=$(readlink "/sys/bus/mdev/devices/$m")
      _p=${_p%/*}
      _md=$(readlink "/sys/bus/mdev/devices/$m/driver")
      _members="$_members$m/mdev:${_p##*/}:${_t##*/}/${_md##*/},"
    fi
  done
  _v=false
  [ -n "$_members" ] && [ -z "$_b" ] && _v=true
  echo "$1 members=$_members viable=$_v blockers=$_b"
}
group_line='"\(.id) members=\([.members[] | "\(.address)/\(.class)/\(.driver),"] + [(.mdevs // [])[] | "\(.uuid)/mdev:\(.parent):\(.type)/\(.driver),"] | sort | join("")) viable=\(.viable) blockers=\([.blockers[] | "\(.address),"] | sort | join(""))"'

# Every listed group, member by member, with the verdict the kernel's drivers imply; and every
# GPU's group is listed.
jq -r ".groups[] | $group_line" "$inv" >/tmp/got-groups
for g in $(jq -r '.groups[].id' "$inv"); do kernel_group "$g"; done >/tmp/want-groups
same_lines group /tmp/got-groups /tmp/want-groups
for g in $gpu_groups; do
  if grep -q "^$g " /tmp/got-groups; then pass "group $g of a GPU is listed"; else fail "group $g of a GPU is listed"; fi
done
# The lab's layout, as the other scenarios rely on it (lab.env).
expect_match "$(grep "^$(group_of "$LAB_GPU1") " /tmp/got-groups)" "viable=false blockers=$LAB_GPU1_AUDIO,\$" \
  "$LAB_GPU1's group is blocked by its audio function on snd_hda_intel"
expect_match "$(grep "^$(group_of "$LAB_GPU2") " /tmp/got-groups)" "viable=true" "$LAB_GPU2 (no driver) is viable"
expect_match "$(grep "^$(group_of "$LAB_BRIDGED_GPU") " /tmp/got-groups)" "blockers=.*$LAB_BRIDGED_NIC" \
  "the bridged NIC blocks $LAB_BRIDGED_GPU's group"
expect_eq "$(jq -r --arg a "$LAB_GPU1" '.devices[] | select(.address == $a) | .companions | join(" ")' "$inv")" \
  "$LAB_GPU1_AUDIO" "audio is the companion of $LAB_GPU1"

# mdev: exactly the kernel's parents and types; per type the kernel's name, device_api,
# available_instances and instance UUIDs.
# shellcheck disable=SC2016 # a jq program: $p is jq's
mdev_line='.mdev_parents[] | .parent as $p | .types[] | "\($p)/\(.id) name=\(.name) api=\(.device_api) available=\(.available_instances) instances=\(.instances | sort | join(","))"'
kernel_mdev() {
  for t in /sys/class/mdev_bus/*/mdev_supported_types/*; do
    _p=${t%/mdev_supported_types/*}
    echo "${_p##*/}/${t##*/} name=$(cat "$t/name" 2>/dev/null) api=$(cat "$t/device_api") available=$(cat "$t/available_instances") instances=$(ls "$t/devices" | sort | tr '\n' ',' | sed 's/,$//')"
  done
}
jq -r "$mdev_line" "$inv" >/tmp/got-mdev
kernel_mdev >/tmp/want-mdev
same_lines "mdev type" /tmp/got-mdev /tmp/want-mdev

# SR-IOV on the PF, asked by address (it is not a GPU): totals, VFs, autoprobe and group.
if run_ok vgpu-host inspect "$LAB_NVME_PF" --output json; then
  pf=$(pci_dev "$LAB_NVME_PF")
  vfs=$(for v in "$pf"/virtfn*; do [ -e "$v" ] && readlink "$v"; done | sed 's|.*/||' | tr '\n' ',')
  expect_eq "$(jq -r '"\(.device.driver) total=\(.device.sriov.total_vfs) num=\(.device.sriov.num_vfs) vfs=\(.device.sriov.vfs | map(. + ",") | join("")) autoprobe=\(.device.sriov.drivers_autoprobe) group=\(.device.iommu_group)"' "$E2E_OUT")" \
    "$(drv "$LAB_NVME_PF") total=$(cat "$pf/sriov_totalvfs") num=$(cat "$pf/sriov_numvfs") vfs=$vfs autoprobe=$(bool "$(cat "$pf/sriov_drivers_autoprobe")") group=$(group_of "$LAB_NVME_PF")" \
    "PF $LAB_NVME_PF: driver, SR-IOV totals, VFs, autoprobe, group"
  jq -r ".group | $group_line" "$E2E_OUT" >/tmp/got-pfgroup
  kernel_group "$(group_of "$LAB_NVME_PF")" >/tmp/want-pfgroup
  same_lines "PF group" /tmp/got-pfgroup /tmp/want-pfgroup
fi

# With VFs enabled (raw sysfs, autoprobe 0 so nvme leaves them alone; undone below): the PF's
# count and VF list, and each VF's physfn, driver and own group, as the kernel has them.
pf=$(pci_dev "$LAB_NVME_PF")
if write_ok "$pf/sriov_drivers_autoprobe" 0 "autoprobe 0 (raw sysfs)" && write_ok "$pf/sriov_numvfs" 2 "enable 2 VFs (raw sysfs)"; then
  vfs=$(for v in "$pf"/virtfn*; do readlink "$v"; done | sed 's|.*/||' | tr '\n' ',')
  run_ok vgpu-host inspect "$LAB_NVME_PF" --output json
  expect_eq "$(jq -r '"num=\(.device.sriov.num_vfs) vfs=\(.device.sriov.vfs | map(. + ",") | join("")) autoprobe=\(.device.sriov.drivers_autoprobe)"' "$E2E_OUT")" \
    "num=$(cat "$pf/sriov_numvfs") vfs=$vfs autoprobe=$(bool "$(cat "$pf/sriov_drivers_autoprobe")")" "PF with VFs: num_vfs, VF list, autoprobe"
  for v in $(echo "$vfs" | tr ',' ' '); do
    run_ok vgpu-host inspect "$v" --output json || continue
    pfl=$(readlink "$(pci_dev "$v")/physfn")
    expect_eq "$(jq -r '"physfn=\(.device.physfn) drv=\(.device.driver) group=\(.device.iommu_group) members=\(.group.members | map(.address) | join(","))"' "$E2E_OUT")" \
      "physfn=${pfl##*/} drv=$(drv "$v") group=$(group_of "$v") members=$(group_members "$(group_of "$v")" | tr '\n' ',' | sed 's/,$//')" \
      "VF $v: physfn, driver, group"
  done
  write_ok "$pf/sriov_numvfs" 0 "disable the VFs (raw sysfs)"
fi
write_ok "$pf/sriov_drivers_autoprobe" 1 "autoprobe back to 1"

# An mdev instance gets an IOMMU group of its own that lists its UUID, not a PCI address:
# inspect reports it under groups[].mdevs with the kernel's parent, type and driver, viable;
# the type's available_instances and instances follow the kernel's.
mt=/sys/class/mdev_bus/mdpy/mdev_supported_types/mdpy-vga
u=$(new_uuid)
if write_ok "$mt/create" "$u" "create mdpy-vga instance $u (raw sysfs)"; then
  mg=$(readlink "/sys/bus/mdev/devices/$u/iommu_group") && mg=${mg##*/}
  expect_eq "$(group_members "$mg" | tr '\n' ' ')" "$u " "the kernel gave $u group $mg, listing only its UUID"
  run_ok vgpu-host inspect --output json
  jq -r ".groups[] | $group_line" "$E2E_OUT" | grep "^$mg " >/tmp/got-mgroup
  kernel_group "$mg" >/tmp/want-mgroup
  same_lines "mdev group" /tmp/got-mgroup /tmp/want-mgroup
  expect_match "$(cat /tmp/got-mgroup)" "members=$u/mdev:mdpy:mdpy-vga/[^,]*, viable=true blockers=\$" \
    "group $mg: the mdev only (parent mdpy, type mdpy-vga), viable"
  jq -r "$mdev_line" "$E2E_OUT" >/tmp/got-mdev
  kernel_mdev >/tmp/want-mdev
  same_lines "mdev type after create" /tmp/got-mdev /tmp/want-mdev
  run_ok vgpu-host inspect && expect_match "$(output)" "$u \($mg\)" "table shows the instance with its group"
  expect_match "$(output)" "$LAB_GPU2|${LAB_GPU2#0000:}" "table lists $LAB_GPU2"
  write_ok "/sys/bus/mdev/devices/$u/remove" 1 "remove $u (raw sysfs)"
  expect_no_file "/sys/bus/mdev/devices/$u" "instance $u removed: back to the boot state"
fi

# Converges: after create + remove the host is as it booted, and inspect says so byte for byte.
run_ok vgpu-host inspect --output json
expect_eq "$(cmp -s "$inv" "$E2E_OUT" && echo same || echo differ)" same "inspect after create+remove: the boot inventory again"

# check judges the lab as the kernel shows it: IOMMU on with intel_iommu=on iommu=pt,
# interrupt remapping (intremap=on), vfio loaded; the lone driverless GPU passthrough-ready,
# the qxl the boot VGA, the bridged GPU sharing its group with the e1000; exit 0.
if run_ok vgpu-host check --output json; then
  expect_eq "$(jq -r '[.checks[] | select(.name == ("iommu", "kernel-cmdline", "interrupt-remapping", "vfio")) | "\(.name)=\(.verdict)"] | join(" ")' "$E2E_OUT")" \
    "iommu=ok kernel-cmdline=ok interrupt-remapping=ok vfio=ok" "check: IOMMU, cmdline, interrupt remapping, vfio ok on the lab kernel"
  expect_eq "$(jq -r --arg a "$LAB_GPU2" --arg b "$LAB_BOOT_VGA" --arg c "$LAB_BRIDGED_GPU" \
    '[.gpus[] | select(.address == ($a, $b, $c)) | "\(.address)=\(.capabilities | join("+"))"] | join(" ")' "$E2E_OUT")" \
    "$LAB_BOOT_VGA=boot-vga $LAB_GPU2=passthrough-ready $LAB_BRIDGED_GPU=group-shared" "check: per-GPU capabilities"
  expect_eq "$(jq -r .assignable "$E2E_OUT")" true "check: assignable"
  # The lab guest is itself a VM (QEMU sets the hypervisor CPUID bit) that has what a VM needs:
  # check says so first, and its CPU and IOMMU checks pass with no fix.
  expect_eq "$(jq -r '[.checks[0].name, .checks[0].verdict, ([.checks[] | select(.name == ("cpu-virtualization", "iommu")) | .fix] | join(""))] | join(" ")' "$E2E_OUT")" \
    "virtual-machine ok " "check: the virtual-machine line first, CPU and IOMMU ok without a fix"
fi

# NUMA placement from the real kernel's answer: a VM with numa: auto on the GPU on node 1 gets
# that node's CPUs (local_cpulist) and strict memory on node 1; on a GPU without a node, none.
gpu_vm_spec lab-numa "$LAB_NUMA_GPU" "numa: auto" >/tmp/lab-numa.yaml
if run_ok vgpu-host render --virt-type qemu /tmp/lab-numa.yaml; then
  expect_match "$(output)" "<vcpu placement=\"static\" cpuset=\"$LAB_NUMA_CPUS\">1</vcpu>" "numa: auto on $LAB_NUMA_GPU: vCPUs on node $LAB_NUMA_NODE's CPUs"
  expect_match "$(output)" "<memory mode=\"strict\" nodeset=\"$LAB_NUMA_NODE\"" "numa: auto on $LAB_NUMA_GPU: memory strictly on node $LAB_NUMA_NODE"
fi
gpu_vm_spec lab-nonuma "$LAB_GPU2" "numa: auto" >/tmp/lab-nonuma.yaml
if run_ok vgpu-host render --virt-type qemu /tmp/lab-nonuma.yaml; then
  expect_eq "$(output | grep -c -e cpuset= -e '<numatune')" 0 "numa: auto on $LAB_GPU2 (no node): no placement"
fi
