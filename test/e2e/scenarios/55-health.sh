# shellcheck shell=sh
# Issue 30 on the real kernel: the handback check, a reset through the kernel's reset_method and
# reset attributes, and the quarantine of a function that left the bus. GPU2 (ati-vga, alone
# behind its root port) is checked on real config space, bound (a baseline is recorded),
# unbound with --reset: vgpu-host narrows reset_method to each method the kernel lists, writes 1
# to reset, puts reset_method back and checks again. Then it is bound again and removed
# (echo 1 > remove): unbind cannot restore it (exit 6) but quarantines it; the rescan brings it
# back and bind refuses it (exit 4) until release-quarantine has checked it. Meanwhile the
# agent runs: its /metrics and host health show GPU2 gone within 5 s of the remove, and healthy
# again within 5 s of the release. Ends in the boot state.

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

# --- the agent sees a function leave the bus within 5 s -------------------------------------------
# The agent (as its unit starts it) watches every device with a health file: GPU2 has one once
# bound. Its /metrics is read over TCP with busybox wget; host health reads the files it keeps.
run_ok vgpu-host bind "$gpu"
ip link set lo up 2>/dev/null || ifconfig lo 127.0.0.1 up 2>/dev/null || true
vgpu-host agent --metrics-listen 127.0.0.1:9400 >/tmp/agent-health.log 2>&1 &
agent_pid=$!
metric_has() { wget -qO- http://127.0.0.1:9400/metrics 2>/dev/null | grep -qF "$1"; }
if wait_for 60 grep -q '"msg":"ready check done"' /tmp/agent-health.log && wait_for 10 metric_has "vgpuhost_device_health{address=\"$gpu\",reason=\"ok\"} 1"; then
  pass "the agent is up and reports GPU2 healthy in /metrics"
else
  fail "the agent did not report GPU2 healthy" "$(cat /tmp/agent-health.log; wget -qO- http://127.0.0.1:9400/metrics 2>&1 | grep vgpuhost_device_health)"
fi
# `vgpu-host agent` replaces itself with vgpu-host-agent through /proc/self/fd/N; the kernel names
# such a process after the descriptor ("3"), which ps, pgrep and systemd show: it renames itself.
expect_eq "$(cat "/proc/$agent_pid/comm" 2>&1)" vgpu-host-agent "the agent (same pid as 'vgpu-host agent') is named vgpu-host-agent, not its descriptor's number"
t0=$(now_ms)
write_ok "$p/remove" 1 "remove GPU2 from the bus"
if wait_for 5 metric_has "vgpuhost_device_health{address=\"$gpu\",reason=\"gone\"} 0"; then
  t1=$(now_ms)
  pass "the agent's /metrics shows GPU2 gone $((t1 - t0)) ms after the remove (within 5 s)"
  bench health-remove-to-metrics $((t1 - t0)) ms
else
  fail "the agent's /metrics does not show GPU2 gone 5 s after the remove" "$(tail -n 20 /tmp/agent-health.log)"
fi
run_ok vgpu-host host health -o json
expect_eq "$(jq -r --arg a "$gpu" '.[] | select(.address == $a) | .last.problems[0].check' <"$E2E_OUT")" gone "host health shows GPU2 gone (the agent's check)"
expect_match "$(cat /tmp/agent-health.log)" "device unhealthy.*$gpu" "the agent logged it"

# --- a function that leaves the bus is quarantined, and refused after the rescan ----------------
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
if wait_for 5 metric_has "vgpuhost_device_health{address=\"$gpu\",reason=\"ok\"} 1"; then
  pass "the agent's /metrics shows GPU2 healthy again within 5 s of the release"
else
  fail "the agent's /metrics does not show GPU2 healthy after the release" "$(wget -qO- http://127.0.0.1:9400/metrics 2>&1 | grep vgpuhost_device_health)"
fi
kill -TERM "$agent_pid" 2>/dev/null
wait "$agent_pid" 2>/dev/null || true

# --- an address with no device, on the real kernel: not found, and nothing written ----------------
for cmd in "host health" "host release-quarantine"; do
  # shellcheck disable=SC2086 # two words: the command and its subcommand
  run_fails vgpu-host $cmd 0000:99:00.0
  expect_eq "$E2E_RC" 6 "$cmd of an address with no device exits 6"
  expect_match "$(output)" "device 0000:99:00.0: no /sys/bus/pci/devices/0000:99:00.0: not found \\(check the address with lspci -D\\)" "$cmd names the path and the fix"
done
expect_no_file "$state/health/0000:99:00.0.json" "no health file for an address with no device"

# --- back to the boot state -----------------------------------------------------------------------
# The ledger still lists GPU2 (the unbind could not restore it); this unbind drops it.
vgpu-host unbind "$gpu" >/dev/null 2>&1 || true
expect_eq "$(driver_of "$gpu")" - "GPU2 driverless, as at boot"
rm -rf "$state/health" "$state/quarantine"
