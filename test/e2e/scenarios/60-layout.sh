# shellcheck shell=sh
# Issue 16 on the real kernel: a declarative host layout. From the boot state, configuration
# "lab" (the nvme SR-IOV PF at 3 VFs, mbochs split into 2 x mbochs-medium, the multifunction
# GPU group passed through) is planned (nothing written), applied, and planned again: nothing
# to do. host restore brings it back after the kernel state is dropped by hand (what apply
# persisted). Switching to "lab2" (1 medium + 1 small) makes exactly the mdev writes the dry
# run printed and no VF or bind write. A layout asking for more mbochs instances than
# available, and one asking for more VFs than sriov_totalvfs, are refused by plan and apply
# before any write. "clear" brings the host back to the boot state, and unpersists it all.

pf=$LAB_NVME_PF
p=$(pci_dev "$pf")
mb=/sys/class/mdev_bus/mbochs/mdev_supported_types
f=/tmp/layout.yaml
jqo() { jq -r "$1" <"$E2E_OUT"; }
# state: the drivers of GPU1's group, the VF count, the mbochs instances by type.
state() {
  echo "gpu1=$(driver_of "$LAB_GPU1") audio=$(driver_of "$LAB_GPU1_AUDIO") vfs=$(cat "$p/sriov_numvfs")"
  for t in mbochs-small mbochs-medium mbochs-large; do echo "$t=$(ls "$mb/$t/devices" | wc -l)"; done
}
uuids() { ls "$mb/$1/devices" | sort | tr '\n' ' '; }
boot=$(state)
note "boot: $(echo "$boot" | tr '\n' ' ')"

cat >"$f" <<LAYOUT
apiVersion: vgpu-host/v1
kind: HostLayout
configs:
  lab:
    default: true
    gpus:
      - select: {address: "$pf"}
        mode: sriov
        vfs: 3
      - select: {parent: mbochs}
        mode: mdev
        types:
          - {type: mbochs-medium, count: 2}
      - select: {address: "$LAB_GPU1"}
        mode: passthrough
  lab2:
    gpus:
      - select: {address: "$pf"}
        mode: sriov
        vfs: 3
      - select: {parent: mbochs}
        mode: mdev
        types:
          - {type: mbochs-medium, count: 1}
          - {type: mbochs-small, count: 1}
      - select: {address: "$LAB_GPU1"}
        mode: passthrough
  greedy:
    gpus:
      - select: {parent: mbochs}
        mode: mdev
        types:
          - {type: mbochs-medium, count: 64}
          - {type: mbochs-small, count: 1}
  too-many-vfs:
    gpus:
      - select: {address: "$pf"}
        mode: sriov
        vfs: 4
  clear:
    gpus:
      - select: {address: "$pf"}
        mode: host
      - select: {parent: mbochs}
        mode: host
      - select: {address: "$LAB_GPU1"}
        mode: host
LAYOUT

# --- plan from the boot state: the order host restore uses, nothing written ---------------------
run_ok vgpu-host host layout plan "$f" --output json
expect_eq "$(jqo '[.changes[] | .action + " " + .target] | join(",")')" \
  "set-vfs $pf,create-mdev mbochs,bind $LAB_GPU1" "plan: VFs, then mdevs, then the binding"
expect_eq "$(state)" "$boot" "plan changed nothing"

# --- apply, then nothing to do --------------------------------------------------------------------
run_ok vgpu-host host layout apply "$f" --output json
expect_eq "$(jqo '[.done[].result] | unique | join(",")')" done "apply: every change done"
expect_content "$p/sriov_numvfs" 3 "3 VFs"
expect_eq "$(ls "$mb/mbochs-medium/devices" | wc -l)" 2 "2 x mbochs-medium"
expect_driver "$LAB_GPU1" vfio-pci "GPU1 passed through"
expect_driver "$LAB_GPU1_AUDIO" vfio-pci "its audio function with it (the whole group)"
lab=$(state)
run_ok vgpu-host host layout plan "$f"
expect_match "$(output)" "nothing to do" "plan after apply: nothing to do"
run_ok vgpu-host host layout apply "$f" --output json
expect_eq "$(jqo '.done | length')" 0 "re-apply changes nothing"
run_ok vgpu-host host layout show --selected --output json
expect_eq "$(jqo .config)" lab "show --selected: lab"

# --- show round trip: applying what show printed changes nothing ----------------------------------
run_ok vgpu-host host layout show
cp "$E2E_OUT" /tmp/shown.yaml
run_ok vgpu-host host layout plan /tmp/shown.yaml
expect_match "$(output)" "nothing to do" "plan of show's output: nothing to do"

# --- persisted: host restore brings it back after the kernel state is dropped ---------------------
for u in $(uuids mbochs-medium); do echo 1 >"/sys/bus/mdev/devices/$u/remove"; done
echo 0 >"$p/sriov_numvfs"
run_ok vgpu-host host restore
expect_eq "$(state)" "$lab" "host restore: VFs and mdevs back as the layout left them"
run_ok vgpu-host host layout plan "$f"
expect_match "$(output)" "nothing to do" "plan after restore: nothing to do"

# --- switch lab -> lab2: only what differs (the dry run's writes are exactly the mdev ones) -------
keep=$(uuids mbochs-medium)
g=$(group_of "$(readlink "$p/virtfn0" | sed 's,.*/,,')")
run_ok vgpu-host host layout apply "$f" --config lab2 --dry-run --output json
expect_eq "$(jqo '[.writes[].path | sub(".*/"; "")] | join(",")')" "remove,create" "dry run: one mdev remove, one create; no VF or bind write"
expect_match "$(jqo '.writes[1].path')" "mbochs-small/create" "dry run: the create is of mbochs-small"
small=$(jqo '.writes[1].value')
expect_eq "$(state)" "$lab" "dry run changed nothing"
run_ok vgpu-host host layout apply "$f" --config lab2 --output json
expect_eq "$(jqo '[.done[].action] | join(",")')" "remove-mdev,create-mdev" "apply lab2: remove one medium, create one small"
expect_eq "$(ls "$mb/mbochs-medium/devices" | wc -l) $(ls "$mb/mbochs-small/devices" | wc -l)" "1 1" "1 medium + 1 small"
expect_eq "$(uuids mbochs-small | tr -d ' ')" "$small" "apply created the instance the dry run named"
expect_match "$keep" "$(uuids mbochs-medium | tr -d ' ')" "the kept medium instance is one of the two from before"
expect_eq "$(group_of "$(readlink "$p/virtfn0" | sed 's,.*/,,')")" "$g" "the VFs were not re-created"
expect_driver "$LAB_GPU1_AUDIO" vfio-pci "the group stayed bound"
run_ok vgpu-host host layout plan "$f" --config lab2
expect_match "$(output)" "nothing to do" "plan lab2 after apply: nothing to do"

# --- over-asks: refused by plan and apply before any write ----------------------------------------
lab2=$(state)
run_fails vgpu-host host layout plan "$f" --config greedy
expect_eq "$E2E_RC" 5 "more mbochs-medium than available_instances: exit 5"
expect_match "$(output)" "available_instances=" "plan names available_instances"
run_fails vgpu-host host layout apply "$f" --config greedy
expect_eq "$E2E_RC" 5 "apply greedy: exit 5"
run_fails vgpu-host host layout plan "$f" --config too-many-vfs
expect_eq "$E2E_RC" 2 "more VFs than sriov_totalvfs: exit 2"
expect_match "$(output)" "sriov_totalvfs=$LAB_NVME_TOTALVFS" "plan names sriov_totalvfs"
run_fails vgpu-host host layout apply "$f" --config too-many-vfs
expect_eq "$(state)" "$lab2" "refused layouts changed nothing"
run_ok vgpu-host host layout show --selected --output json
expect_eq "$(jqo .config)" lab2 "the selection is still lab2"

# --- back to the boot state ------------------------------------------------------------------------
run_ok vgpu-host host layout apply "$f" --config clear
expect_eq "$(state)" "$boot" "clear: the boot state"
run_ok vgpu-host host layout plan "$f" --config clear
expect_match "$(output)" "nothing to do" "plan clear after apply: nothing to do"
expect_eq "$(jq -r '.pfs | length' /etc/vgpu-host/sriov.json 2>/dev/null || echo 0)" 0 "no persisted VF count left"
expect_eq "$(ls /etc/mdevctl.d/mbochs 2>/dev/null | wc -l)" 0 "no mdev definition left"
expect_no_file "/etc/driverctl.d/pci-$LAB_GPU1" "no vfio-pci override left"
rm -f /var/lib/vgpu-host/layout.json /var/lib/vgpu-host/vgpu-instances.json /etc/vgpu-host/sriov.json /etc/modprobe.d/vgpu-host.conf
