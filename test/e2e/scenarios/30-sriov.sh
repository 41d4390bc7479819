# shellcheck shell=sh
# Issue 5 on the real kernel: SR-IOV VFs on QEMU's nvme PF through `vgpu-host vf`. enable 2,
# change to 3 (the kernel needs 0 in between: vgpu-host does it), disable; --driver vfio-pci
# sets sriov_drivers_autoprobe=0 and binds every VF to vfio-pci by address; every operation run
# twice converges; the total is checked before any write; disable puts autoprobe back. Ends in
# the boot state (no VFs, autoprobe 1 -- restored by vgpu-host, not by this script -- no
# persisted counts).

pf=$LAB_NVME_PF
p=$(pci_dev "$pf")
total=$LAB_NVME_TOTALVFS
jqo() { jq -r "$1" <"$E2E_OUT"; }
vfs_on() { # vfs_on DRIVER: every VF (virtfn*) is on DRIVER
  for l in "$p"/virtfn*; do
    [ -e "$l" ] || return 1
    _a=$(readlink "$l")
    [ "$(driver_of "${_a##*/}")" = "$1" ] || return 1
  done
}
vf_addr() { _a=$(readlink "$p/virtfn$1") && echo "${_a##*/}"; }

expect_content "$p/sriov_numvfs" 0 "boot: no VFs"
expect_content "$p/sriov_totalvfs" "$total" "sriov_totalvfs is $total"

# --- list ------------------------------------------------------------------------------------
run_ok vgpu-host vf list --output json
expect_eq "$(jqo ".[] | select(.address==\"$pf\") | .total_vfs")" "$total" "vf list reports total_vfs"
expect_eq "$(jqo ".[] | select(.address==\"$pf\") | .driver")" nvme "vf list names the PF driver"

# --- dry run: the writes, nothing changes -------------------------------------------------------
run_ok vgpu-host vf enable "$pf" --count 2 --driver vfio-pci --dry-run
expect_match "$(output)" "^echo 0 > $p/sriov_drivers_autoprobe\$" "dry run sets autoprobe 0 first"
expect_match "$(output)" "^echo 2 > $p/sriov_numvfs\$" "dry run writes sriov_numvfs"
expect_match "$(output)" "^echo 0000:00:0a.1 > /sys/bus/pci/drivers_probe\$" "dry run names the future VF 00:0a.1 (from sriov_offset/stride)"
expect_content "$p/sriov_numvfs" 0 "dry run enabled nothing"
expect_content "$p/sriov_drivers_autoprobe" 1 "dry run left autoprobe"

# --- enable 2 with vfio-pci ----------------------------------------------------------------------
run_ok vgpu-host vf enable "$pf" --count 2 --driver vfio-pci --output json
expect_content "$p/sriov_numvfs" 2 "2 VFs enabled"
expect_content "$p/sriov_drivers_autoprobe" 0 "autoprobe 0 so nvme does not grab the VFs"
expect_eq "$(jqo '.vfs | length')" 2 "JSON lists 2 VFs"
expect_eq "$(jqo '[.vfs[].driver] | unique | join(",")')" vfio-pci "JSON: every VF on vfio-pci"
expect_driver "$(vf_addr 0)" vfio-pci
expect_driver "$(vf_addr 1)" vfio-pci
g=$(group_of "$(vf_addr 0)")
expect_file "/dev/vfio/$g" "VF0's group has /dev/vfio/$g"

# Twice converges: same state, no change (the VFs were not re-created: same group numbers).
run_ok vgpu-host vf enable "$pf" --count 2 --driver vfio-pci
expect_content "$p/sriov_numvfs" 2 "still 2 VFs"
expect_eq "$(group_of "$(vf_addr 0)")" "$g" "second enable did not re-create the VFs"

# A VF held open (as a guest's QEMU holds /dev/vfio/N): removing it would block the kernel's
# sriov_numvfs write until the holder lets go, so disable and a count change refuse, exit 5,
# naming the process; nothing changes. Once it lets go, they work.
hold_open "/dev/vfio/$g"
run_fails vgpu-host vf disable "$pf"
expect_eq "$E2E_RC" 5 "disable with a held VF exits 5 (busy)"
expect_match "$(output)" "pid $holder .sleep. has /dev/vfio/$g open" "the refusal names the holder"
expect_match "$(output)" "--force" "the refusal names the way out"
run_fails vgpu-host vf enable "$pf" --count 3 --driver vfio-pci
expect_eq "$E2E_RC" 5 "a count change with a held VF exits 5"
expect_content "$p/sriov_numvfs" 2 "the refusals left the 2 VFs"
release_hold

# The raw kernel rule vgpu-host hides: 2 -> 3 directly is EBUSY.
write_fails "$p/sriov_numvfs" 3 "the kernel refuses 2 -> 3 without 0 in between"

# --- change to 3 -------------------------------------------------------------------------------------
run_ok vgpu-host vf enable "$pf" --count 3 --driver vfio-pci
expect_content "$p/sriov_numvfs" 3 "changed to 3 VFs (via 0)"
expect_driver "$(vf_addr 2)" vfio-pci "the third VF is on vfio-pci"
run_ok vgpu-host vf enable "$pf" --count 3 --driver vfio-pci
expect_content "$p/sriov_numvfs" 3 "changing to 3 twice converges"

# --- above the total: refused before any write -----------------------------------------------------
run_fails vgpu-host vf enable "$pf" --count $((total + 1))
expect_eq "$E2E_RC" 2 "count above sriov_totalvfs exits 2"
expect_match "$(output)" "at most $total" "the message names the total"
expect_content "$p/sriov_numvfs" 3 "the refused request left the 3 VFs"

# --- a device without SR-IOV ----------------------------------------------------------------------
run_fails vgpu-host vf enable "$LAB_NIC" --count 1
expect_eq "$E2E_RC" 7 "a PF without SR-IOV exits 7"

# --- persist, list, disable -----------------------------------------------------------------------
run_ok vgpu-host vf enable "$pf" --count 3 --driver vfio-pci --persist
expect_eq "$(jq -r ".pfs[] | select(.address==\"$pf\") | .num_vfs" /etc/vgpu-host/sriov.json)" 3 "--persist recorded 3 VFs"
run_ok vgpu-host vf disable "$pf" --output json
expect_content "$p/sriov_numvfs" 0 "disabled"
expect_no_file "$p/virtfn0" "virtfn links gone"
expect_content "$p/sriov_drivers_autoprobe" 1 "disable restored autoprobe 1 (its value before enable --driver vfio-pci)"
expect_eq "$(jqo '.drivers_autoprobe_restored')" true "JSON says disable restored autoprobe"
# Boot-time restore brings the persisted count back (a reboot, as far as VFs go).
run_ok vgpu-host host restore --output json
expect_eq "$(jqo '.[] | select(.kind=="sriov") | .result')" applied "host restore re-enabled the VFs"
expect_content "$p/sriov_numvfs" 3 "restore: 3 VFs"
if vfs_on vfio-pci; then pass "restore: every VF on vfio-pci"; else fail "restore: VFs not all on vfio-pci" "$(ls -l "$p"/virtfn*)"; fi
run_ok vgpu-host host restore --output json
expect_eq "$(jqo '.[] | select(.kind=="sriov") | .result')" already "second restore: already"
run_ok vgpu-host vf disable "$pf" --persist
expect_content "$p/sriov_numvfs" 0 "disabled again"
expect_content "$p/sriov_drivers_autoprobe" 1 "disable after host restore restored autoprobe 1 again"
expect_eq "$(jq -r '.pfs | length' /etc/vgpu-host/sriov.json)" 0 "--persist on disable forgot the count"
run_ok vgpu-host vf disable "$pf" --output json
expect_content "$p/sriov_numvfs" 0 "disabling twice converges"
expect_eq "$(jqo '.drivers_autoprobe_restored // false')" false "second disable had nothing to restore"

# --- back to the boot state ----------------------------------------------------------------------
rm -rf /etc/vgpu-host
