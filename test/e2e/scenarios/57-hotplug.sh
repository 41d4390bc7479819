# shellcheck shell=sh
# Issue 31 part 1 on the real kernel: `vgpu-host attach --profile` creates an mdev on the
# kernel's mbochs sample parent and hotplugs it into a running VM, `detach` removes it, the
# ledger is checked after each step, and an attach killed at its create-mdev step is undone by
# the next detach. No libvirtd runs in the guest: the file-backed fake libvirt (vgpu-fake:///)
# stands in for it (its domains "run" without a guest), while every mdev is the kernel's.

conn=vgpu-fake:///var/lib/vgpu-host/lab-hotplug.json
vm=lab-hotplug
spec=/tmp/$vm.yaml
mb=/sys/class/mdev_bus/mbochs/mdev_supported_types
printf 'apiVersion: vgpu-host/v1\nkind: VirtualMachine\nmetadata:\n  name: %s\nspec:\n  vcpus: 1\n  memory: 256MiB\n  firmware: bios\n  hotplugSlots: 2\n  network:\n    type: none\n  gpus:\n    - virtioGpu: {}\n' "$vm" >"$spec"
jqo() { jq -r "$1" <"$E2E_OUT"; }
claims() { vgpu-host status --connect "$conn" -o json | jq -r ".[] | select(.name==\"$vm\") | [.claims[]? | .kind + \":\" + .id] | join(\",\")"; }
mdevs() { ls /sys/bus/mdev/devices 2>/dev/null | sort | tr '\n' ' '; }
av=$(cat $mb/mbochs-small/available_instances)
boot=$(mdevs)

run_ok vgpu-host apply --connect "$conn" --virt-type qemu "$spec"
expect_eq "$(claims)" "" "apply: a virtio-gpu VM holds no device"

# --- dry run, attach, attach again ----------------------------------------------------------
run_ok vgpu-host attach --connect "$conn" "$vm" --profile mbochs-small --dry-run -o json
expect_eq "$(jqo '[.planned[].action] | join(",")')" "hotplug,create-mdev,attach-device" "dry run: mark, create the mdev, attach it"
expect_match "$(jqo '.device_xml[0]')" "type=\"mdev\"" "dry run shows the mdev hostdev XML"
expect_eq "$(mdevs)" "$boot" "the dry run created no mdev"
run_ok vgpu-host attach --connect "$conn" "$vm" --profile mbochs-small -o json
u=$(jqo .device)
expect_eq "$(jqo .scope)" "live+config" "attached to the running domain and its definition"
expect_link "/sys/bus/mdev/devices/$u/mdev_type" mbochs-small "attach created the mdev on mbochs"
expect_content "$mb/mbochs-small/available_instances" $((av - 1)) "available_instances dropped by one"
expect_eq "$(claims)" "mdev:$u" "ledger: the VM holds the mdev"
expect_match "$(jq -r ".domains[\"$vm\"].live" /var/lib/vgpu-host/lab-hotplug.json)" "$u" "the running domain's XML has the mdev"

# --- detach, detach again ---------------------------------------------------------------------
run_ok vgpu-host detach --connect "$conn" "$vm" "$u"
expect_no_file "/sys/bus/mdev/devices/$u" "detach removed the mdev"
expect_content "$mb/mbochs-small/available_instances" "$av" "available_instances back"
expect_eq "$(claims)" "" "ledger: the mdev released"
run_ok vgpu-host detach --connect "$conn" "$vm" "$u"
expect_match "$(output)" "detached already" "a second detach says it is gone"

# --- killed at create-mdev (after and before), then detach converges ---------------------------
for before in 0 1; do
  VGPU_HOST_CRASH_AT_STEP=1 VGPU_HOST_CRASH_BEFORE=$before \
    vgpu-host-crashtest attach --connect "$conn" "$vm" --profile mbochs-small >/tmp/crash.out 2>&1
  rc=$?
  expect_eq "$rc" 137 "attach killed at create-mdev (before=$before)"
  expect_match "$(claims)" "^mdev:" "the killed attach holds its claim"
  run_ok vgpu-host detach --connect "$conn" "$vm" "$u" -o json
  expect_match "$(jqo '.converged | join(",")')" "create-mdev $u" "detach undid the interrupted attach (its create-mdev)"
  expect_eq "$(mdevs)" "$boot" "no mdev left (before=$before)"
  expect_eq "$(claims)" "" "ledger: nothing held (before=$before)"
done

# --- attached, then destroyed with the VM --------------------------------------------------------
run_ok vgpu-host attach --connect "$conn" "$vm" --profile mbochs-small
run_ok vgpu-host destroy --connect "$conn" "$vm"
expect_eq "$(mdevs)" "$boot" "destroy removed the hotplugged mdev"
expect_content "$mb/mbochs-small/available_instances" "$av" "available_instances as at boot"
