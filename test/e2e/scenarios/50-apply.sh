# shellcheck shell=sh
# Issue 13 on the real kernel: apply owns the binding of a passed-through GPU's whole IOMMU
# group (the domain says managed='no'), destroy restores each function exactly, plan shows a
# held device before anything changes, and kill -9 at every step, then destroy, leaves the group
# as it began. No libvirtd runs in the guest: the file-backed fake libvirt (vgpu-fake:///)
# stands in for it, while every binding is the kernel's.

conn=vgpu-fake:///var/lib/vgpu-host/lab-libvirt.json
vm=lab-gpu1
spec=/tmp/$vm.yaml
gpu_vm_spec "$vm" "$LAB_GPU1" >"$spec"
# state: each function of the group with its driver and driver_override.
state() { for a in "$LAB_GPU1" "$LAB_GPU1_AUDIO"; do echo "$a $(driver_of "$a") $(cat "$(pci_dev "$a")/driver_override")"; done; }
jqo() { jq -r "$1" <"$E2E_OUT"; }
vms() { jq -r '.vms // {} | keys | join(",")' /var/lib/vgpu-host/ledger.json 2>/dev/null; }
boot=$(state)
note "group at boot: $(echo "$boot" | tr '\n' ' ')"

# --- plan, apply, destroy: one owner of the binding ------------------------------------------
run_ok vgpu-host plan --connect "$conn" --virt-type qemu --no-start --output json "$spec"
expect_eq "$(jqo '.[0].refusals | length')" 0 "plan: nothing refuses the GPU+audio group"
expect_eq "$(jqo '[.[0].steps[].action] | join(",")')" "bind-group,define" "plan: bind the whole group, then define"
expect_eq "$(state)" "$boot" "plan changed nothing"
run_ok vgpu-host apply --connect "$conn" --virt-type qemu --no-start "$spec"
expect_driver "$LAB_GPU1" vfio-pci "apply bound the GPU"
expect_driver "$LAB_GPU1_AUDIO" vfio-pci "apply bound its audio function with it"
expect_match "$(grep -o 'managed=\\"[a-z]*\\"' /var/lib/vgpu-host/lab-libvirt.json | sort -u | tr '\n' ' ')" '^managed=\\"no\\" $' "the domain's hostdevs say managed='no'"
run_ok vgpu-host apply --connect "$conn" --virt-type qemu --no-start "$spec"
expect_driver "$LAB_GPU1" vfio-pci "re-apply keeps the binding"
run_ok vgpu-host destroy --connect "$conn" "$vm"
expect_eq "$(state)" "$boot" "destroy: every function back on its driver, driver_override as before"
expect_eq "$(vms)" "" "destroy: the ledger holds no VM"

# --- a held HDA node: plan names the holder, apply exits 5 and changes nothing ----------------
card=$(alsa_card "$LAB_GPU1_AUDIO")
if [ -n "$card" ] && wait_for 5 test -e "/dev/snd/controlC$card"; then
  hold_open "/dev/snd/controlC$card"
  run_fails vgpu-host plan --connect "$conn" --virt-type qemu --no-start --output json "$spec"
  expect_eq "$E2E_RC" 5 "plan exits 5 as apply would"
  expect_eq "$(jqo '[.[0].refusals[] | select(.check=="held") | .holders[].pid] | join(",")')" "$holder" "plan's JSON names the holder's pid"
  start=$(now_ms)
  run_fails vgpu-host apply --connect "$conn" --virt-type qemu --no-start "$spec"
  took=$(($(now_ms) - start))
  expect_eq "$E2E_RC" 5 "apply with the HDA node held exits 5"
  expect_match "$(output)" "pid $holder \(sleep\) has /dev/snd/controlC$card open" "apply names the pid and the node"
  expect_eq "$(state)" "$boot" "the refused apply changed no driver or override"
  expect_eq "$(vms)" "" "the refused apply claimed nothing"
  note "refused in ${took} ms (the kernel's unbind of a held HDA function would have blocked)"
  release_hold
else
  fail "no ALSA card for $LAB_GPU1_AUDIO (sound/cardN, /dev/snd/controlCN)" "$(ls "$(pci_dev "$LAB_GPU1_AUDIO")")"
fi

# --- kill -9 at every step, then destroy: the group ends as it began --------------------------
for n in 1 2; do
  for before in 1 0; do
    VGPU_HOST_CRASH_AT_STEP=$n VGPU_HOST_CRASH_BEFORE=$before \
      vgpu-host-crashtest apply --connect "$conn" --virt-type qemu --no-start "$spec" >/tmp/crash.out 2>&1
    expect_eq "$?" 137 "apply stopped dead at step $n (before=$before)"
    run_ok vgpu-host destroy --connect "$conn" "$vm"
    expect_eq "$(state)" "$boot" "killed at step $n (before=$before), then destroy: the group is as it began"
    expect_eq "$(vms)" "" "killed at step $n (before=$before), then destroy: the ledger holds no VM"
  done
done
# And converged by apply instead of destroy: killed after the bind, apply finishes the job.
VGPU_HOST_CRASH_AT_STEP=1 vgpu-host-crashtest apply --connect "$conn" --virt-type qemu --no-start "$spec" >/tmp/crash.out 2>&1
expect_eq "$?" 137 "apply stopped dead after binding"
run_ok vgpu-host apply --connect "$conn" --virt-type qemu --no-start "$spec"
expect_driver "$LAB_GPU1_AUDIO" vfio-pci "the next apply converged"
run_ok vgpu-host destroy --connect "$conn" "$vm"
expect_eq "$(state)" "$boot" "and destroy restored the group"
