# shellcheck shell=sh disable=SC2012 # ls on /dev/vfio: names are group numbers
# Issue 4 on the real kernel: whole-group vfio-pci bind by address, exact restore, safety checks,
# idempotence, dry run and persistence. Every device ends as it was at boot, so later scenarios
# start from the boot state.

ledger=/var/lib/vgpu-host/vfio.json
g1=$(group_of "$LAB_GPU1")
gb=$(group_of "$LAB_BRIDGE")
ovr() { cat "$(pci_dev "$1")/driver_override"; }
# state: drivers and overrides of the GPU group, the identical GPU, and /dev/vfio.
state() {
  for a in "$LAB_GPU1" "$LAB_GPU1_AUDIO" "$LAB_GPU2"; do echo "$a $(driver_of "$a") $(ovr "$a")"; done
  ls /dev/vfio | tr '\n' ' '
}
jqo() { jq -r "$1" <"$E2E_OUT"; }
# noop: the last --output json run's "changed steps" ("false 0" for a run that changed nothing).
noop() { jqo '"\(.changed) \(.steps | length)"'; }

# kernel_verdict G: IOMMU group G as the kernel's driver links show it, one line: members with
# their drivers, the vfio verdict and the blockers, recomputed here (an endpoint blocks unless on
# vfio-pci or driverless; a bridge unless on pcieport/shpchp or driverless), not from vgpu-host.
kernel_verdict() {
  _m='' _b=''
  for m in $(group_members "$1"); do
    _d=$(driver_of "$m")
    _m="$_m$m=$_d,"
    case $(cat "$(pci_dev "$m")/class") in
      0x0600* | 0x0604* | 0x0607* | 0x0609*) case $_d in - | pcieport | shpchp) continue ;; esac ;;
      *) case $_d in - | vfio-pci) continue ;; esac ;;
    esac
    _b="$_b$m=$_d,"
  done
  _v=true
  [ -z "$_b" ] || _v=false
  echo "members=$_m viable=$_v blockers=$_b"
}
# inspect_verdict G: the same line from `vgpu-host inspect --output json` (one run, one jq).
inspect_verdict() {
  vgpu-host inspect --output json >/tmp/inspect.json 2>/tmp/inspect.err || { echo "inspect failed: $(cat /tmp/inspect.err)"; return; }
  jq -r --argjson g "$1" '.groups[] | select(.id == $g) |
    "members=\([.members[] | "\(.address)=\(if .driver == "" then "-" else .driver end),"] | sort | join("")) viable=\(.viable) blockers=\([.blockers[] | "\(.address)=\(.driver),"] | sort | join(""))"' /tmp/inspect.json
}

# --- dry run: the exact writes, and nothing changes -----------------------------------------
boot_state=$(state)
run_ok vgpu-host bind "$LAB_GPU1" --dry-run
expect_match "$(output)" "^echo vfio-pci > /sys/bus/pci/devices/$LAB_GPU1/driver_override\$" "dry run prints the GPU's driver_override write"
expect_match "$(output)" "^echo $LAB_GPU1_AUDIO > /sys/bus/pci/drivers/snd_hda_intel/unbind\$" "dry run prints the audio unbind from snd_hda_intel"
expect_match "$(output)" "^echo $LAB_GPU1_AUDIO > /sys/bus/pci/drivers_probe\$" "dry run prints the probe by address"
if grep -q new_id "$E2E_OUT"; then fail "dry run uses new_id" "$(output)"; else pass "dry run never uses new_id"; fi
expect_eq "$(state)" "$boot_state" "dry run changed no driver, override or /dev/vfio node"
expect_no_file "$ledger" "dry run wrote no ledger"

# --- bind the GPU + HDMI-audio group as a whole ---------------------------------------------
run_ok vgpu-host bind "$LAB_GPU1" --output json
expect_driver "$LAB_GPU1" vfio-pci
expect_driver "$LAB_GPU1_AUDIO" vfio-pci "the audio function moved with its GPU"
expect_content "$(pci_dev "$LAB_GPU1_AUDIO")/driver_override" vfio-pci
expect_file "/dev/vfio/$g1" "/dev/vfio/$g1 appeared"
expect_eq "$(jqo '.groups[0].vfio_dev')" "/dev/vfio/$g1" "JSON names /dev/vfio/$g1"
expect_eq "$(jqo '.groups[0].viable')" true "JSON says the group is viable"
expect_eq "$(jqo ".devices[] | select(.address==\"$LAB_GPU1_AUDIO\") | .from")" snd_hda_intel "JSON: audio came from snd_hda_intel"
expect_eq "$(jq -r ".devices[\"$LAB_GPU1_AUDIO\"].driver" "$ledger")" snd_hda_intel "ledger records snd_hda_intel for the audio function"
expect_eq "$(jq -r ".devices[\"$LAB_GPU1\"].driver" "$ledger")" "" "ledger records the GPU as driverless"
expect_driver "$LAB_GPU2" - "the identical second GPU is untouched (bound by address)"
expect_content "$(pci_dev "$LAB_GPU2")/driver_override" "(null)" "the identical second GPU has no override"
kv=$(kernel_verdict "$g1")
expect_match "$kv" "viable=true blockers=\$" "kernel: every member of group $g1 is on vfio-pci or driverless"
expect_eq "$(inspect_verdict "$g1")" "$kv" "inspect: group $g1 viable with no blockers after bind, as the kernel's driver links say"

# --- binding twice is a no-op ------------------------------------------------------------------
run_ok vgpu-host bind "$LAB_GPU1_AUDIO" --output json
expect_eq "$(jqo '.changed')" false "second bind changes nothing"
expect_eq "$(jqo '.steps | length')" 0 "second bind makes no write"
run_ok vgpu-host bind "$LAB_GPU1"
expect_match "$(output)" "already bound" "second bind says already bound"

# --- unbind restores exactly --------------------------------------------------------------------
run_ok vgpu-host unbind "$LAB_GPU1"
expect_driver "$LAB_GPU1_AUDIO" snd_hda_intel "unbind restored snd_hda_intel on the audio function"
expect_driver "$LAB_GPU1" - "unbind left the driverless GPU driverless"
expect_content "$(pci_dev "$LAB_GPU1")/driver_override" "(null)" "GPU override cleared"
expect_content "$(pci_dev "$LAB_GPU1_AUDIO")/driver_override" "(null)" "audio override cleared"
expect_no_file "/dev/vfio/$g1" "/dev/vfio/$g1 went away with the last vfio-pci device"
expect_eq "$(jq -r '.devices | length' "$ledger")" 0 "ledger empty after unbind"
expect_eq "$(state)" "$boot_state" "the group is back in its boot state"
kv=$(kernel_verdict "$g1")
expect_match "$kv" "viable=false blockers=$LAB_GPU1_AUDIO=snd_hda_intel,\$" "kernel: the audio function back on snd_hda_intel is group $g1's only blocker"
expect_eq "$(inspect_verdict "$g1")" "$kv" "inspect: group $g1 not viable after unbind, the audio function named as blocker, as the kernel's driver links say"
run_ok vgpu-host unbind "$LAB_GPU1"
expect_match "$(output)" "nothing to do" "unbinding again is a no-op"

# --- the boot VGA is refused --------------------------------------------------------------------
run_fails vgpu-host bind "$LAB_BOOT_VGA"
expect_eq "$E2E_RC" 4 "boot VGA refused with exit 4"
expect_match "$(output)" "boot VGA" "the refusal explains the boot VGA"
expect_driver "$LAB_BOOT_VGA" qxl "the boot VGA stays on qxl"

# --- GPU behind a conventional bridge: the NIC in its group blocks, --force binds, bridge stays --
run_fails vgpu-host bind "$LAB_BRIDGED_GPU"
expect_eq "$E2E_RC" 4 "bridged GPU refused (host-critical NIC in its group) with exit 4"
expect_match "$(output)" "$LAB_BRIDGED_NIC.*network controller" "the refusal names the NIC"
expect_driver "$LAB_BRIDGED_GPU" bochs-drm "refused bind left the GPU alone"
# bstate: the bridged group's drivers and overrides, /dev/vfio and the ledger.
bstate() {
  for a in "$LAB_BRIDGE" "$LAB_BRIDGED_GPU" "$LAB_BRIDGED_NIC"; do echo "$a $(driver_of "$a") $(ovr "$a")"; done
  ls /dev/vfio | tr '\n' ' '
  cat "$ledger" 2>/dev/null
}
bridged_boot=$(bstate)
run_ok vgpu-host bind "$LAB_BRIDGED_GPU" --force --output json
expect_eq "$(jqo '.changed')" true "first bind --force changed the host"
expect_driver "$LAB_BRIDGED_GPU" vfio-pci
expect_driver "$LAB_BRIDGED_NIC" vfio-pci "the NIC moved with its group"
expect_driver "$LAB_BRIDGE" - "the bridge stays as it was"
expect_content "$(pci_dev "$LAB_BRIDGE")/driver_override" "(null)" "the bridge got no override"
expect_file "/dev/vfio/$gb" "/dev/vfio/$gb appeared"
bridged_bound=$(bstate)
run_ok vgpu-host bind "$LAB_BRIDGED_GPU" --force --output json
expect_eq "$(noop)" "false 0" "second bind --force of the bridged group: changed false, no step"
expect_eq "$(bstate)" "$bridged_bound" "second bind --force left drivers, overrides, /dev/vfio and the ledger as they were"
run_ok vgpu-host unbind "$LAB_BRIDGED_GPU" --output json
expect_eq "$(jqo '.changed')" true "first unbind of the bridged group changed the host"
expect_driver "$LAB_BRIDGED_GPU" bochs-drm "unbind restored bochs-drm"
expect_driver "$LAB_BRIDGED_NIC" e1000 "unbind restored e1000"
bridged_unbound=$(bstate)
run_ok vgpu-host unbind "$LAB_BRIDGED_GPU" --output json
expect_eq "$(noop)" "false 0" "second unbind of the bridged group: changed false, no step"
expect_eq "$(bstate)" "$bridged_unbound" "second unbind left drivers, overrides, /dev/vfio and the ledger as they were"
expect_eq "$(bstate)" "$bridged_boot" "the bridged group is back in its boot state, ledger included"

# --- a device vgpu-host did not bind ---------------------------------------------------------
echo vfio-pci >"$(pci_dev "$LAB_GPU2")/driver_override"
echo "$LAB_GPU2" >/sys/bus/pci/drivers_probe
expect_driver "$LAB_GPU2" vfio-pci "setup: GPU2 bound by hand"
run_fails vgpu-host unbind "$LAB_GPU2"
expect_eq "$E2E_RC" 4 "unbind of a device not in the ledger refused with exit 4"
expect_match "$(output)" "$LAB_GPU2.*not in the vgpu-host ledger" "the refusal says it is not in the ledger"
run_ok vgpu-host unbind "$LAB_GPU2" --force
expect_driver "$LAB_GPU2" - "--force handed it back (no native driver: driverless)"
expect_content "$(pci_dev "$LAB_GPU2")/driver_override" "(null)" "GPU2 override cleared"

# --- a group in use is not pulled from under its user -----------------------------------------
run_ok vgpu-host bind "$LAB_GPU1"
hold_open "/dev/vfio/$g1"
run_fails vgpu-host unbind "$LAB_GPU1"
expect_eq "$E2E_RC" 5 "unbind of a group held open is busy (exit 5)"
expect_match "$(output)" "pid $holder \\(sleep\\) has /dev/vfio/$g1 open" "the refusal names the holder"
release_hold
run_ok vgpu-host unbind "$LAB_GPU1"
expect_driver "$LAB_GPU1_AUDIO" snd_hda_intel "restored after the holder left"

# --- a host process holding the audio function's ALSA node refuses the bind ----------------------
# bind searches every process's open files for any device's nodes (DRM, fb, ALSA, NVIDIA) from
# its first step and picks out each moving function's own: here the real kernel's ALSA control
# node of the GPU's HDMI audio, held by a process (#32).
card=$(alsa_card "$LAB_GPU1_AUDIO")
if [ -n "$card" ] && [ -c "/dev/snd/controlC$card" ]; then
  hold_open "/dev/snd/controlC$card"
  run_fails vgpu-host bind "$LAB_GPU1"
  expect_eq "$E2E_RC" 5 "bind of a group whose audio node is held open is busy (exit 5)"
  expect_match "$(output)" "pid $holder \\(sleep\\) has /dev/snd/controlC$card open" "the refusal names the holder of the ALSA node"
  expect_driver "$LAB_GPU1_AUDIO" snd_hda_intel "nothing moved: the audio function stays on snd_hda_intel"
  expect_driver "$LAB_GPU1" - "nothing moved: the GPU stays driverless"
  release_hold
else
  fail "no ALSA card node for $LAB_GPU1_AUDIO (sound/cardN under the function, /dev/snd/controlCN): the held-node check has nothing to hold"
fi

# --- persistence ----------------------------------------------------------------------------------
# pstate: the persistence files (name and content), the ledger's records of them, and the drivers.
pstate() {
  for f in "/etc/driverctl.d/pci-$LAB_GPU1" "/etc/driverctl.d/pci-$LAB_GPU1_AUDIO" /etc/modprobe.d/vgpu-host.conf; do
    if [ -e "$f" ]; then echo "$f: $(cat "$f")"; else echo "$f: absent"; fi
  done
  jq -c '.files // {}' "$ledger" 2>/dev/null
  state
}
run_ok vgpu-host bind "$LAB_GPU1" --persist
expect_content "/etc/driverctl.d/pci-$LAB_GPU1" vfio-pci "driverctl override for the GPU"
expect_content "/etc/driverctl.d/pci-$LAB_GPU1_AUDIO" vfio-pci "driverctl override for the audio function"
expect_match "$(cat /etc/modprobe.d/vgpu-host.conf 2>&1)" "^softdep snd_hda_intel pre: vfio-pci\$" "modprobe softdep puts vfio-pci before snd_hda_intel"
persisted=$(pstate)
run_ok vgpu-host bind "$LAB_GPU1" --persist --output json
expect_eq "$(noop)" "false 0" "second bind --persist: changed false, no step"
expect_eq "$(pstate)" "$persisted" "second bind --persist left the files, their ledger records and the drivers as they were"
expect_eq "$(grep -c '^softdep ' /etc/modprobe.d/vgpu-host.conf) $(jq -r '.files | length' "$ledger")" "1 2" "the softdep line once, one ledger record per driverctl file"
run_ok vgpu-host unbind "$LAB_GPU1" --persist
expect_no_file "/etc/driverctl.d/pci-$LAB_GPU1" "unbind --persist removed the GPU override"
expect_no_file "/etc/driverctl.d/pci-$LAB_GPU1_AUDIO" "unbind --persist removed the audio override"
expect_no_file /etc/modprobe.d/vgpu-host.conf "unbind --persist removed the softdep"
expect_eq "$(jq -r '.files // {} | length' "$ledger")" 0 "ledger keeps no persistence record"
unpersisted=$(pstate)
run_ok vgpu-host unbind "$LAB_GPU1" --persist --output json
expect_eq "$(noop)" "false 0" "second unbind --persist: changed false, no step"
expect_eq "$(pstate)" "$unpersisted" "second unbind --persist: files still gone, drivers as they were"

# --- a FIFO where a driverctl override belongs: an error naming it at once, nothing moved -------
# (bind --persist read it with a blocking open and waited for ever; it now reads the persistence
# files as state files, before its first sysfs write)
mkdir -p /etc/driverctl.d
mkfifo "/etc/driverctl.d/pci-$LAB_GPU1_AUDIO"
t0=$(now_ms)
run_fails timeout 20 vgpu-host bind "$LAB_GPU1" --persist
expect_eq "$E2E_RC" 1 "bind --persist with a FIFO where the audio function's override belongs fails (exit 1), not a wait"
expect_match "$(output)" "/etc/driverctl.d/pci-$LAB_GPU1_AUDIO is a named pipe \\(FIFO\\)" "the error names the FIFO"
expect_eq "$(state)" "$boot_state" "nothing moved: the group is as it was at boot"
note "the refused bind --persist took $(($(now_ms) - t0)) ms"
rm -f "/etc/driverctl.d/pci-$LAB_GPU1_AUDIO"

# --- exact restore of what an admin set: an override for another driver, their own driverctl file --
# (an override written while a driver is bound takes effect only at the next probe)
echo snd_hda_codec_hdmi >"$(pci_dev "$LAB_GPU1_AUDIO")/driver_override"
mkdir -p /etc/driverctl.d
echo snd_hda_intel >"/etc/driverctl.d/pci-$LAB_GPU1_AUDIO"
run_ok vgpu-host bind "$LAB_GPU1" --persist
expect_driver "$LAB_GPU1_AUDIO" vfio-pci "bound despite the admin's override"
expect_content "/etc/driverctl.d/pci-$LAB_GPU1_AUDIO" vfio-pci "bind --persist replaced the admin's driverctl file"
expect_match "$(output)" "replaced /etc/driverctl.d/pci-$LAB_GPU1_AUDIO" "bind --persist warns that it replaced it"
run_ok vgpu-host unbind "$LAB_GPU1" --persist
expect_driver "$LAB_GPU1_AUDIO" snd_hda_intel "restored to snd_hda_intel although the admin's override names another driver"
expect_content "$(pci_dev "$LAB_GPU1_AUDIO")/driver_override" snd_hda_codec_hdmi "the admin's override is back as it was"
expect_content "/etc/driverctl.d/pci-$LAB_GPU1_AUDIO" snd_hda_intel "unbind --persist put the admin's driverctl file back"
expect_no_file "/etc/driverctl.d/pci-$LAB_GPU1" "unbind --persist removed the GPU override it wrote"
echo >"$(pci_dev "$LAB_GPU1_AUDIO")/driver_override"
rm -f "/etc/driverctl.d/pci-$LAB_GPU1_AUDIO"
expect_eq "$(state)" "$boot_state" "everything back in its boot state"
