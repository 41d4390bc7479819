# shellcheck shell=sh
# Issue 15 on the real kernel: a real reboot. First boot: enable 2 VFs on the nvme PF on
# vfio-pci, create and define two mbochs instances, bind GPU1's group -- each persisted -- then
# the guest reboots (request_reboot: `reboot -f`, QEMU resets, the same kernel boots again with
# /etc and /var/lib on the persistent disk). Second boot: the kernel has forgotten all of it;
# the agent (`vgpu-host agent`, as its unit starts it) runs the boot reconcile (package
# agent/reconcile, the same code as `host restore`) before anything else and brings each piece
# back in dependency order -- VFs, then mdevs, then bindings -- which the checks read from its
# log and from sysfs; it prints how long the reconcile took. A second restore through the
# agent changes nothing; SIGTERM stops the agent cleanly. The scenario ends by undoing every piece, persisted too.

pf=$LAB_NVME_PF
p=$(pci_dev "$pf")
uuids=${E2E_PERSIST:-/tmp}/60-reboot.uuids
jqo() { jq -r "$1" <"$E2E_OUT"; }
vfs_on_vfio() {
  for l in "$p"/virtfn*; do
    [ -e "$l" ] || return 1
    _a=$(readlink "$l")
    [ "$(driver_of "${_a##*/}")" = vfio-pci ] || return 1
  done
}

if [ "$E2E_BOOT" = 1 ]; then
  note "first boot: make the state, persisted"
  run_ok vgpu-host vf enable "$pf" --count 2 --driver vfio-pci --persist
  expect_content "$p/sriov_numvfs" 2 "2 VFs enabled"
  expect_file /etc/vgpu-host/sriov.json "VF count persisted on the persistent /etc"
  run_ok vgpu-host mdev create -p mbochs -t mbochs-small -n 2 --name reboot-lab --define --output json
  jqo '.[].uuid' >"$uuids"
  expect_eq "$(wc -l <"$uuids")" 2 "two mbochs instances created"
  for u in $(cat "$uuids"); do
    expect_file "/etc/mdevctl.d/mbochs/$u" "mdev $u defined (mdevctl format)"
  done
  run_ok vgpu-host bind "$LAB_GPU1" --persist
  expect_driver "$LAB_GPU1" vfio-pci
  expect_driver "$LAB_GPU1_AUDIO" vfio-pci "the audio function moved with its group"
  expect_content "/etc/driverctl.d/pci-$LAB_GPU1_AUDIO" vfio-pci "binding persisted as a driverctl override"
  request_reboot
  return 0
fi

# --- second boot -----------------------------------------------------------------------------
note "second boot: the kernel starts from nothing; /etc and /var/lib came back from the disk"
expect_content "$p/sriov_numvfs" 0 "after the reboot: no VFs (the kernel does not keep them)"
for u in $(cat "$uuids"); do
  expect_no_file "/sys/bus/mdev/devices/$u" "after the reboot: mdev $u is gone"
done
expect_driver "$LAB_GPU1_AUDIO" snd_hda_intel "after the reboot: GPU1's audio is on its boot driver"
expect_file /etc/vgpu-host/sriov.json "the persisted VF count survived the reboot"

# The agent starts as at boot (vgpu-host-agent.service runs `vgpu-host agent`): it reconciles
# before its first change and logs each step (JSON: stderr is not a terminal). No libvirtd runs
# in the guest: its warm connection retries in the background and nothing here needs it.
t0=$(now_ms)
vgpu-host agent >/tmp/agent.log 2>&1 &
agent_pid=$!
i=0
while ! grep -q '"msg":"ready check done"' /tmp/agent.log 2>/dev/null && [ $i -lt 600 ]; do
  sleep 0.1; i=$((i + 1))
done
t1=$(now_ms)
if grep -q '"msg":"ready check done"' /tmp/agent.log; then pass "the agent reconciled and is ready"; else fail "the agent did not get ready in 60 s" "$(cat /tmp/agent.log)"; fi
expect_eq "$(jq -r 'select(.msg == "ready check done") | .err // "none"' /tmp/agent.log)" none "the agent's reconcile: no step failed"
jq -c 'select(.msg == "reconcile step")' /tmp/agent.log >/tmp/steps.json
# The order of the steps, each kind once: VFs before mdevs before bindings (uniq of the kinds).
order=$(jq -r '.kind' /tmp/steps.json | uniq | tr '\n' ' ')
expect_eq "$order" "sriov mdev vfio " "the agent reconciled in dependency order (its log)"
expect_eq "$(jq -r 'select(.result != "applied") | .kind' /tmp/steps.json | wc -l)" 0 "every step applied (none already, none failed)"
expect_eq "$(jq -r "select(.kind == \"sriov\" and .target == \"$pf\") | .kind" /tmp/steps.json | wc -l)" 1 "a step for the PF's VFs"
expect_eq "$(jq -r "select(.kind == \"vfio\" and .target == \"$LAB_GPU1,$LAB_GPU1_AUDIO\") | .kind" /tmp/steps.json | wc -l)" 1 "a step for GPU1's group (GPU and audio)"
pass "the agent was ready $((t1 - t0)) ms wall after it started under TCG; $(jq -r 'select(.msg == "reconcile: done") | "reconcile \(.steps) steps in \(.duration / 1000000 | floor) ms"' /tmp/agent.log); per step (ns): $(jq -r '"\(.kind) \(.duration)"' /tmp/steps.json | tr '\n' ',')"

# Each piece is back.
expect_content "$p/sriov_numvfs" 2 "VFs back: 2"
if vfs_on_vfio; then pass "every VF back on vfio-pci"; else fail "VFs not on vfio-pci" "$(ls -l "$p"/virtfn*)"; fi
for u in $(cat "$uuids"); do
  expect_link "/sys/bus/mdev/devices/$u/mdev_type" mbochs-small "mdev $u back, type mbochs-small"
done
expect_driver "$LAB_GPU1" vfio-pci "GPU1 back on vfio-pci"
expect_driver "$LAB_GPU1_AUDIO" vfio-pci "GPU1's audio back on vfio-pci (the whole group)"

# Again, through the agent (the CLI finds its socket): nothing left to do.
run_ok vgpu-host --agent always host restore
expect_match "$(output)" "reconciled [0-9]+ steps in .*: 0 applied, [0-9]+ already, 0 skipped, 0 failed" "a second restore, through the agent, finds everything in place"
kill -TERM "$agent_pid"
rc=0
wait "$agent_pid" || rc=$?
expect_eq "$rc" 0 "SIGTERM: the agent exits 0"
expect_no_file /run/vgpu-host/agent.sock "the agent removed its socket"

# Undo it all, persisted too (the disk is thrown away, but a scenario ends as it began).
run_ok vgpu-host unbind "$LAB_GPU1" --persist
expect_driver "$LAB_GPU1_AUDIO" snd_hda_intel "GPU1's audio restored"
expect_no_file "/etc/driverctl.d/pci-$LAB_GPU1_AUDIO" "override removed"
run_ok vgpu-host mdev remove --name reboot-lab --undefine
run_ok vgpu-host vf disable "$pf" --persist
expect_content "$p/sriov_numvfs" 0 "VFs disabled"
