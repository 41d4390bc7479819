# shellcheck shell=sh disable=SC2012 # ls on sysfs: names are plain
# The lab proves itself: the kernel sees the device layout of lab.env, with an IOMMU, the
# groups the other scenarios rely on, an SR-IOV PF, the mdev sample parents and vfio.
# Read-only: changes nothing, so later scenarios start from the boot state.

# The IOMMU is on and grouping devices.
expect_match "$(cat /proc/cmdline)" 'intel_iommu=on' "kernel booted with intel_iommu=on"
expect_file /sys/class/iommu/dmar0 "DMAR unit dmar0 registered"
ngroups=$(ls /sys/kernel/iommu_groups | wc -l)
expect_gt "$ngroups" 8 "IOMMU groups exist"

# Every lab device is where lab.env says, with the expected IDs and drivers.
check_dev() { # check_dev ADDR VENDOR:DEVICE DRIVER
  p=$(pci_dev "$1")
  expect_file "$p" "device $1 present" || return
  expect_eq "$(cat "$p/vendor"):$(cat "$p/device")" "$2" "$1 is $2"
  expect_driver "$1" "$3"
  expect_ne "$(group_of "$1")" "" "$1 has an IOMMU group"
}
check_dev "$LAB_BOOT_VGA" 0x1b36:0x0100 qxl
check_dev "$LAB_NIC" 0x8086:0x10d3 e1000e
check_dev "$LAB_GPU1_PORT" 0x1b36:0x000c pcieport
check_dev "$LAB_GPU1" 0x1002:0x5046 -
check_dev "$LAB_GPU1_AUDIO" 0x8086:0x2668 snd_hda_intel
check_dev "$LAB_GPU2_PORT" 0x1b36:0x000c pcieport
check_dev "$LAB_GPU2" 0x1002:0x5046 -
check_dev "$LAB_VIRTIO_GPU" 0x1af4:0x1050 virtio-pci
check_dev "$LAB_NVME_PF" 0x1b36:0x0010 nvme
check_dev "$LAB_BRIDGE" 0x1b36:0x000e -
check_dev "$LAB_BRIDGED_GPU" 0x1234:0x1111 bochs-drm
check_dev "$LAB_BRIDGED_NIC" 0x8086:0x100e e1000
check_dev "$LAB_DISK" 0x1af4:0x1001 virtio-pci
check_dev "$LAB_NUMA_PORT" 0x1b36:0x000c pcieport
check_dev "$LAB_NUMA_GPU" 0x1002:0x5046 -

# Two NUMA nodes; the expander's GPU on node 1, with node 1's CPUs; the root bus's on none,
# with every online CPU (the kernel prints local_cpulist from the node: inspect reads it once
# per node).
expect_eq "$(ls -d /sys/devices/system/node/node* | wc -l)" 2 "two NUMA nodes"
expect_content "$(pci_dev "$LAB_NUMA_GPU")/numa_node" "$LAB_NUMA_NODE" "$LAB_NUMA_GPU is on NUMA node $LAB_NUMA_NODE"
expect_content "$(pci_dev "$LAB_NUMA_GPU")/local_cpulist" "$LAB_NUMA_CPUS" "$LAB_NUMA_GPU's local CPUs are node $LAB_NUMA_NODE's"
expect_content /sys/devices/system/node/node$LAB_NUMA_NODE/cpulist "$LAB_NUMA_CPUS" "node $LAB_NUMA_NODE holds CPU $LAB_NUMA_CPUS"
expect_content "$(pci_dev "$LAB_GPU1")/numa_node" -1 "$LAB_GPU1 (root bus) has no NUMA node"
expect_content "$(pci_dev "$LAB_GPU1")/local_cpulist" "$(cat /sys/devices/system/cpu/online)" "$LAB_GPU1's local CPUs are every online CPU"

# Boot VGA: the qxl, not the passthrough candidates.
expect_content "$(pci_dev "$LAB_BOOT_VGA")/boot_vga" 1 "boot_vga=1 on $LAB_BOOT_VGA"
expect_content "$(pci_dev "$LAB_GPU1")/boot_vga" 0 "boot_vga=0 on $LAB_GPU1"

# GPU + audio: one group of exactly the two functions; the second GPU alone in another.
g1=$(group_of "$LAB_GPU1")
expect_eq "$(group_of "$LAB_GPU1_AUDIO")" "$g1" "GPU and its audio function share group $g1"
expect_eq "$(group_members "$g1" | tr '\n' ' ')" "$LAB_GPU1 $LAB_GPU1_AUDIO " "group $g1 is exactly GPU + audio"
g2=$(group_of "$LAB_GPU2")
expect_ne "$g2" "$g1" "the identical second GPU is in its own group"
expect_eq "$(group_members "$g2" | tr '\n' ' ')" "$LAB_GPU2 " "group $g2 is exactly the second GPU"

# Conventional PCI behind a PCIe-to-PCI bridge: one group with the bridge.
gb=$(group_of "$LAB_BRIDGE")
expect_eq "$(group_of "$LAB_BRIDGED_GPU")" "$gb" "bridged GPU shares group $gb with the bridge"
expect_eq "$(group_of "$LAB_BRIDGED_NIC")" "$gb" "bridged NIC shares group $gb with the bridge"
expect_eq "$(group_members "$gb" | tr '\n' ' ')" "$LAB_BRIDGE $LAB_BRIDGED_GPU $LAB_BRIDGED_NIC " \
  "group $gb is bridge + GPU + NIC"

# SR-IOV PF, no VFs yet.
pf=$(pci_dev "$LAB_NVME_PF")
expect_content "$pf/sriov_totalvfs" "$LAB_NVME_TOTALVFS" "nvme sriov_totalvfs"
expect_content "$pf/sriov_numvfs" 0 "nvme starts with no VFs"

# mdev parents with their types, each type describing itself.
for parent in $LAB_MDEV_PARENTS; do
  d=/sys/class/mdev_bus/$parent/mdev_supported_types
  expect_file "$d" "mdev parent $parent registered" || continue
  case $parent in
    mbochs) want="mbochs-large mbochs-medium mbochs-small " ;;
    mdpy) want="mdpy-hd mdpy-vga mdpy-xga " ;;
    mtty) want="mtty-1 mtty-2 " ;;
  esac
  expect_eq "$(ls "$d" | sort | tr '\n' ' ')" "$want" "$parent types"
  for t in "$d"/*; do
    expect_gt "$(cat "$t/available_instances")" 0 "${t##*/} available_instances"
    expect_eq "$(cat "$t/device_api")" vfio-pci "${t##*/} device_api"
    expect_file "$t/create" "${t##*/} has create"
  done
done
expect_eq "$(ls /sys/class/mdev_bus | sort | tr '\n' ' ')" "$(echo "$LAB_MDEV_PARENTS" | tr ' ' '\n' | sort | tr '\n' ' ')" \
  "the mdev parents are exactly $LAB_MDEV_PARENTS"
expect_eq "$(ls /sys/bus/mdev/devices | wc -l)" 0 "no mdev instances at boot"

# Interrupt remapping is on (intel-iommu,intremap=on): vfio needs it without allow_unsafe_interrupts.
expect_match "$(cat /proc/interrupts)" 'IR-' "interrupts go through remapping (IR- chips in /proc/interrupts)"

# vfio is loaded and usable.
expect_file /dev/vfio/vfio "/dev/vfio/vfio exists"
expect_file /sys/bus/pci/drivers/vfio-pci "vfio-pci driver registered"
expect_file /sys/module/vfio_iommu_type1 "vfio_iommu_type1 loaded"

# The binary under test runs in the guest (with its shared libraries).
run_ok vgpu-host --version && expect_match "$(output)" '^vgpu-host ' "vgpu-host --version prints its name"
