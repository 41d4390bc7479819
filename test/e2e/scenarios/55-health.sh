# shellcheck shell=sh
# Issue 30 on the real kernel: the handback check, a reset through the kernel's reset_method and
# reset attributes, and the quarantine of a function that left the bus. GPU2 (ati-vga, alone
# behind its root port) is checked on real config space, bound (a baseline is recorded),
# unbound with --reset: vgpu-host narrows reset_method to each method the kernel lists, writes 1
# to reset, puts reset_method back and checks again. Then it is bound again and removed
# (echo 1 > remove): unbind cannot restore it (exit 6) but quarantines it; the rescan brings it
# back and bind refuses it (exit 4) until release-quarantine has checked it. Ends in the boot
# state.

gpu=$LAB_GPU2
p=$(pci_dev "$gpu")
state=/var/lib/vgpu-host
jqo() { jq -r "$1" <"$E2E_OUT"; }
methods=$(cat "$p/reset_method" 2>/dev/null || true)
note "reset_method of $gpu: ${methods:-none}"
# bars: the memory and I/O BARs of the kernel's resource file, as vgpu-host counts them.
bars=$(head -n 6 "$p/resource" | awk '$1 != "0x0000000000000000" || $2 != "0x0000000000000000"' | wc -l)

# --- a check of real config space ---------------------------------------------------------------
run_ok vgpu-host host health "$gpu" -o json
expect_eq "$(jqo '.[0].last.healthy')" true "GPU2 checks healthy at boot (config space, BARs, capability list)"
expect_eq "$(jqo '.[0].last.bars | length')" "$bars" "the check read GPU2's $bars BARs"

# --- bind records a baseline; unbind --reset resets through the kernel and checks ---------------
run_ok vgpu-host bind "$gpu"
expect_driver "$gpu" vfio-pci
expect_file "$state/health/$gpu.json" "bind recorded a health baseline"
expect_eq "$(jq -r '.baseline.bars | length' <"$state/health/$gpu.json")" "$bars" "the baseline has GPU2's BARs"
if [ -n "$methods" ]; then
  run_ok vgpu-host unbind "$gpu" --reset
  expect_eq "$(driver_of "$gpu")" - "GPU2 back to no driver"
  expect_eq "$(jq -r '[.resets // {} | .[]] | add // 0' <"$state/health/$gpu.json")" 1 "one reset made through the kernel ($(jq -c '.resets' <"$state/health/$gpu.json"))"
  expect_content "$p/reset_method" "$methods" "reset_method put back as it was"
  expect_eq "$(jq -r '.last.healthy' <"$state/health/$gpu.json")" true "GPU2 checks healthy after the reset"
  expect_no_file "$state/quarantine/$gpu.json" "GPU2 not quarantined"
else
  skip "GPU2 has no reset method: the reset through the kernel is not exercised"
  run_ok vgpu-host unbind "$gpu"
fi

# --- a function that leaves the bus is quarantined, and refused after the rescan ----------------
run_ok vgpu-host bind "$gpu"
write_ok "$p/remove" 1 "remove GPU2 from the bus"
run_fails vgpu-host unbind "$gpu"
expect_eq "$E2E_RC" 6 "unbind of a removed function exits 6"
expect_match "$(output)" "$gpu quarantined \\(gone" "and quarantines it"
expect_file "$state/quarantine/$gpu.json" "quarantine record written"
write_ok /sys/bus/pci/rescan 1 "rescan the bus"
wait_for 10 test -e "$p/vendor" && pass "GPU2 is back after the rescan" || fail "GPU2 did not come back after the rescan"
run_fails vgpu-host bind "$gpu"
expect_eq "$E2E_RC" 4 "bind refuses the quarantined GPU2 (exit 4)"
expect_match "$(output)" "release-quarantine $gpu" "naming the fix"
expect_eq "$(driver_of "$gpu")" - "the refused bind moved nothing"
vgpu-host check >"$E2E_OUT" 2>&1 || true
expect_match "$(output)" "$gpu is quarantined" "check shows the quarantine"
run_ok vgpu-host host release-quarantine "$gpu"
expect_no_file "$state/quarantine/$gpu.json" "release-quarantine removed the record after a clean check"

# --- back to the boot state -----------------------------------------------------------------------
# The ledger still lists GPU2 (the unbind could not restore it); this unbind drops it.
vgpu-host unbind "$gpu" >/dev/null 2>&1 || true
expect_eq "$(driver_of "$gpu")" - "GPU2 driverless, as at boot"
rm -rf "$state/health" "$state/quarantine"
