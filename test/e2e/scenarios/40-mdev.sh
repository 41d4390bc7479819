# shellcheck shell=sh
# Issue 5 on the real kernel: mdev instances on the kernel's sample parents mbochs and mdpy
# through `vgpu-host mdev`: create by UUID, list, over-ask refused with nothing created, remove;
# --name VM derives UUIDs so running twice converges; define writes mdevctl's JSON; host restore
# brings a defined instance back. Ends with no instances and no definitions.

mb=/sys/class/mdev_bus/mbochs/mdev_supported_types
md=/sys/class/mdev_bus/mdpy/mdev_supported_types
jqo() { jq -r "$1" <"$E2E_OUT"; }
n_inst() { ls /sys/bus/mdev/devices 2>/dev/null | wc -l; }

expect_eq "$(n_inst)" 0 "boot: no mdev instances"

# --- types -------------------------------------------------------------------------------------
run_ok vgpu-host mdev types --output json
expect_eq "$(jqo '[.[].parent] | sort | join(" ")')" "mbochs mdpy mtty" "types lists the three sample parents"
expect_eq "$(jqo '.[] | select(.parent=="mbochs") | .types[] | select(.id=="mbochs-small") | .available_instances')" \
  "$(cat $mb/mbochs-small/available_instances)" "JSON available_instances matches sysfs"
note "mbochs: $(for t in $mb/*; do printf '%s=%s ' "${t##*/}" "$(cat "$t/available_instances")"; done)"
note "mdpy: $(for t in $md/*; do printf '%s=%s(%s) ' "${t##*/}" "$(cat "$t/available_instances")" "$(cat "$t/name")"; done)"

# --- create by UUID, list, remove ----------------------------------------------------------------
u=$(new_uuid)
av=$(cat $mb/mbochs-medium/available_instances)
run_ok vgpu-host mdev create --parent mbochs --type mbochs-medium --uuid "$u" --output json
expect_eq "$(jqo '.[0].uuid')" "$u" "JSON names the UUID"
expect_file "/sys/bus/mdev/devices/$u" "instance $u exists"
expect_link "/sys/bus/mdev/devices/$u/mdev_type" mbochs-medium "its type is mbochs-medium"
expect_content "$mb/mbochs-medium/available_instances" $((av - 1)) "available_instances dropped by one"
run_ok vgpu-host mdev create --parent mbochs --type mbochs-medium --uuid "$u"
expect_content "$mb/mbochs-medium/available_instances" $((av - 1)) "creating the same UUID again converges"
run_ok vgpu-host mdev list --output json
expect_eq "$(jqo ".[] | select(.uuid==\"$u\") | .parent")" mbochs "list: parent mbochs"
expect_eq "$(jqo ".[] | select(.uuid==\"$u\") | .active")" true "list: active"
# In use is judged by the kernel first (no libvirtd runs in the guest, and that alone is no
# reason to refuse): a process holding the instance's /dev/vfio/GROUP makes remove exit 5
# naming it, and the instance stays.
g=$(readlink "/sys/bus/mdev/devices/$u/iommu_group") && g=${g##*/}
wait_for 5 test -e "/dev/vfio/$g"
hold_open "/dev/vfio/$g"
run_fails vgpu-host mdev remove "$u"
expect_eq "$E2E_RC" 5 "remove of an instance a process holds exits 5 (busy)"
expect_match "$(output)" "pid $holder \(sleep\) has /dev/vfio/$g open" "the refusal names the holder pid and its /dev/vfio/$g"
expect_file "/sys/bus/mdev/devices/$u" "the refused remove kept the instance"
release_hold
run_ok vgpu-host mdev remove "$u"
expect_no_file "/sys/bus/mdev/devices/$u" "removed with no libvirtd and no holder, without --force"
expect_content "$mb/mbochs-medium/available_instances" "$av" "available_instances back"
run_ok vgpu-host mdev remove "$u" --force
expect_match "$(output)" "already gone" "removing twice converges"

# --- over-ask: refused, nothing created ----------------------------------------------------------
avl=$(cat $mb/mbochs-large/available_instances)
run_fails vgpu-host mdev create --parent mbochs --type mbochs-large --count $((avl + 1)) --name big
expect_eq "$E2E_RC" 5 "over-ask exits 5 (busy)"
expect_match "$(output)" "available_instances=$avl" "the message names available_instances"
expect_eq "$(n_inst)" 0 "over-ask created nothing"
expect_content "$mb/mbochs-large/available_instances" "$avl" "available_instances unchanged"

# --- --name VM: deterministic UUIDs, twice converges, by type name, on mdpy --------------------------
run_ok vgpu-host mdev create --parent mdpy --type mdpy-vga --count 2 --name desk --output json
u0=$(jqo '.[0].uuid')
u1=$(jqo '.[1].uuid')
expect_ne "$u0" "$u1" "two distinct UUIDs"
run_ok vgpu-host mdev create --parent mdpy --type mdpy-vga --count 2 --name desk --output json
expect_eq "$(jqo '.[0].uuid') $(jqo '.[1].uuid')" "$u0 $u1" "re-run gives the same UUIDs"
expect_eq "$(n_inst)" 2 "re-run created nothing more"
run_ok vgpu-host mdev list --output json
expect_eq "$(jqo "[.[] | select(.owner==\"desk\")] | length")" 2 "list: both owned by desk"

# --- a create killed part-way (kill -9 after its first kernel write, before its state update) ---
# The dry run names the UUIDs; the first is created by hand, as the killed run left it. The
# re-run creates only the other two, records all three for the owner, and releases all three.
run_ok vgpu-host mdev create --parent mbochs --type mbochs-small --count 3 --name killed --dry-run --output json
k0=$(jqo '.writes[0].value')
expect_eq "$(jqo '.writes | length')" 3 "dry run: three create writes"
echo "$k0" >"$mb/mbochs-small/create"
avs=$(cat $mb/mbochs-small/available_instances)
run_ok vgpu-host mdev create --parent mbochs --type mbochs-small --count 3 --name killed --output json
expect_eq "$(jqo '.[0].uuid')" "$k0" "the re-run adopts the instance the killed run made"
expect_content "$mb/mbochs-small/available_instances" $((avs - 2)) "the re-run created only the two missing"
run_ok vgpu-host mdev remove --name killed --force --output json
expect_eq "$(jqo 'length')" 3 "release by owner removed all three"
expect_no_file "/sys/bus/mdev/devices/$k0" "including the one the killed run made"

# --- define: mdevctl's JSON; restore ----------------------------------------------------------------
run_ok vgpu-host mdev define "$u0"
f=/etc/mdevctl.d/mdpy/$u0
expect_file "$f" "definition at $f"
expect_eq "$(jq -c . "$f")" '{"mdev_type":"mdpy-vga","start":"auto","attrs":[]}' "mdevctl JSON: mdev_type, start, attrs"
run_ok vgpu-host mdev define "$u0"
expect_eq "$(ls /etc/mdevctl.d/mdpy | wc -l)" 1 "defining twice converges"
run_ok vgpu-host mdev remove "$u0" --force
expect_no_file "/sys/bus/mdev/devices/$u0" "defined instance stopped"
run_ok vgpu-host mdev list --output json
expect_eq "$(jqo ".[] | select(.uuid==\"$u0\") | \"\(.active) \(.defined) \(.start)\"")" "false true auto" "list: defined (start auto) but not active"
run_ok vgpu-host mdev list --defined --output json
expect_eq "$(jqo '[.[].uuid] | join(" ")')" "$u0" "list --defined: only the defined instance"
run_ok vgpu-host mdev list --active mdpy --output json
expect_eq "$(jqo '[.[].uuid] | join(" ")')" "$u1" "list --active mdpy: only the active instance"
run_ok vgpu-host host restore --dry-run
expect_match "$(output)" "^echo $u0 > .*mdpy-vga/create\$" "restore dry run prints the create"
expect_no_file "/sys/bus/mdev/devices/$u0" "restore dry run created nothing"
run_ok vgpu-host host restore
expect_file "/sys/bus/mdev/devices/$u0" "host restore re-created the defined instance"
run_ok vgpu-host host restore --output json
expect_eq "$(jqo '.[] | select(.kind=="mdev") | .result')" already "second restore: already"

# --- clean up: by owner, with --undefine -----------------------------------------------------------
run_ok vgpu-host mdev remove --name desk --undefine --force
expect_eq "$(n_inst)" 0 "no instances left"
expect_no_file "$f" "definition removed"
rm -rf /var/lib/vgpu-host/vgpu-instances.json /etc/mdevctl.d/mdpy
