# shellcheck shell=sh
# lab: libvirtd
# Issue 31 on a real libvirtd 9.0 and QEMU 7.2 inside the lab (docs/hotplug.md, docs/lab.md):
# vgpu-host attach hot-adds an mdev of the kernel's mbochs and mtty samples to a running QEMU
# guest (domain type qemu, q35, SeaBIOS without a boot disk: no guest OS) and QEMU opens it
# (its vfio group among QEMU's fds, the device on the reserved root port in `info pci`), and
# attach --gpu passes GPU2 through the same way (its group bound to vfio-pci, QEMU reaching it
# through the lab's emulated IOMMU); the ledger is read after each step. With no guest OS
# nothing answers the unplug request, so
# detach must end after --timeout with exit 5 and nothing released; stopping the VM and
# detaching again releases it. An attach killed (exit 137, as kill -9) before and after its
# libvirt call is undone by the next detach (once the guest is stopped, for the one QEMU
# holds), and destroy of a running VM holding two hotplugged mdevs leaves neither.

vm=lab-live
spec=/tmp/$vm.yaml
vsh() { virsh -c qemu:///system "$@"; }
jqo() { jq -r "$1" <"$E2E_OUT"; }
claims() { vgpu-host status -o json | jq -r ".[] | select(.name==\"$vm\") | [.claims[]? | .kind + \":\" + .id] | join(\",\")"; }
mdevs() { ls /sys/bus/mdev/devices 2>/dev/null | sort | tr '\n' ' '; }
qemu_pid() { cat "/run/libvirt/qemu/$vm.pid" 2>/dev/null; }
# qemu_has U: QEMU holds the mdev's vfio group open.
qemu_has() {
  _g=$(readlink "/sys/bus/mdev/devices/$1/iommu_group") && _p=$(qemu_pid) && [ -n "$_p" ] &&
    ls -l "/proc/$_p/fd" 2>/dev/null | grep -q " /dev/vfio/${_g##*/}\$"
}
# in_xml UUID [--inactive]: how often the live (persistent) XML names the mdev.
in_xml() { _u=$1; shift; vsh dumpxml "$@" "$vm" | grep -c "uuid=.$_u."; }
# other_mdev: an mdev that was not there at boot and is not $m.
other_mdev() {
  for _d in /sys/bus/mdev/devices/*; do
    [ -e "$_d" ] || continue
    case " $boot $m " in *" ${_d##*/} "*) ;; *) echo "${_d##*/}" ;; esac
  done | head -1
}
since() { echo $(($(now_ms) - $1)); }
# info_pci: QEMU's `info pci` on one line.
info_pci() { vsh qemu-monitor-command "$vm" --hmp 'info pci' | tr '\r\n' '  '; }
# expect_in_pci REGEX MSG: QEMU's `info pci` comes to match REGEX within 60 s. It lists a device
# behind a root port only once the guest's firmware has numbered the port's bus: right after a
# (re)start, SeaBIOS under TCG in TCG may not have yet (the mtty check failed so in one run).
expect_in_pci() {
  _t=$(now_ms)
  if wait_for 60 sh -c 'virsh -c qemu:///system qemu-monitor-command "$1" --hmp "info pci" | tr "\r\n" "  " | grep -Eq -- "$2"' _ "$vm" "$1"; then
    pass "$2 ($(since "$_t") ms)"
  else
    fail "$2" "pattern: $1
info pci:
$(info_pci)"
  fi
}
printf 'apiVersion: vgpu-host/v1\nkind: VirtualMachine\nmetadata:\n  name: %s\nspec:\n  vcpus: 1\n  memory: 128MiB\n  firmware: bios\n  graphics:\n    type: none\n  hotplugSlots: 2\n  network:\n    type: none\n  gpus:\n    - virtioGpu: {}\n' "$vm" >"$spec"
boot=$(mdevs)
mb=/sys/class/mdev_bus/mbochs/mdev_supported_types/mbochs-small/available_instances
av=$(cat $mb)

# --- libvirtd (run.sh's configuration: root, no cgroups, no security driver, no virtlogd) -----
ip link set lo up
mkdir -p /var/lib/libvirt /var/cache/libvirt /var/log/libvirt /run/libvirt
t=$(now_ms)
libvirtd -d
if wait_for 60 test -S /run/libvirt/libvirt-sock && run_ok vsh version; then
  note "libvirtd answered in $(since "$t") ms (its first QEMU capability probe included)"
else
  fail "libvirtd did not start" "$(tail -20 /var/log/libvirt/libvirtd.log 2>&1)"
fi

t=$(now_ms)
run_ok vgpu-host apply --virt-type qemu "$spec"
note "apply (define + start under TCG in TCG) took $(since "$t") ms"
expect_eq "$(vsh domstate "$vm" 2>&1)" "running" "the guest runs (SeaBIOS, no boot disk)"
expect_eq "$(claims)" "" "apply: a virtio-gpu VM holds no device"

# --- attach an mbochs mdev to the running guest ---------------------------------------------
run_ok vgpu-host attach "$vm" --profile mbochs-small --dry-run -o json
expect_eq "$(jqo '[.planned[].action] | join(",")')" "hotplug,create-mdev,attach-device" "dry run: mark, create the mdev, attach it"
expect_eq "$(mdevs)" "$boot" "the dry run created no mdev"
t=$(now_ms)
run_ok vgpu-host attach "$vm" --profile mbochs-small -o json
note "attach took $(since "$t") ms"
u=$(jqo .device)
bus=$(jqo '.device_xml[0]' | sed -n 's/.*address type="pci".* bus="0x\([0-9a-f]*\)".*/\1/p')
expect_eq "$(jqo .scope)" "live+config" "attached to the running guest and its definition"
expect_link "/sys/bus/mdev/devices/$u/mdev_type" mbochs-small "the kernel has the mdev"
expect_content "$mb" $((av - 1)) "available_instances dropped by one"
expect_eq "$(in_xml "$u")" 1 "the live XML (virsh dumpxml) has the mdev hostdev"
expect_eq "$(in_xml "$u" --inactive)" 1 "the definition has it"
if qemu_has "$u"; then pass "QEMU (pid $(qemu_pid)) has the mdev's vfio group open"; else fail "QEMU does not hold the mdev's group" "$(ls -l "/proc/$(qemu_pid)/fd" 2>&1)"; fi
expect_in_pci "Bus +$((0x$bus)), device +0, function 0: +(Display|VGA) controller: PCI device 1234:1111 .*id \"hostdev0\"" \
  "QEMU's info pci: mbochs's 1234:1111 on the reserved root port's bus $((0x$bus))"
expect_eq "$(claims)" "mdev:$u" "ledger: the VM holds the mdev"

# --- a whole GPU: GPU2's group on vfio-pci, through the lab's emulated IOMMU into QEMU -------
gg=$(group_of "$LAB_GPU2")
t=$(now_ms)
run_ok vgpu-host attach "$vm" --gpu "$LAB_GPU2" -o json
note "attach --gpu took $(since "$t") ms"
[ "$E2E_RC" = 0 ] || note "qemu log: $(tail -5 "/var/log/libvirt/qemu/$vm.log")"
expect_driver "$LAB_GPU2" vfio-pci "attach bound GPU2's group to vfio-pci"
if ls -l "/proc/$(qemu_pid)/fd" 2>/dev/null | grep -q " /dev/vfio/$gg\$"; then pass "QEMU holds GPU2's group $gg open"; else fail "QEMU does not hold GPU2's group $gg"; fi
expect_in_pci "VGA controller: PCI device 1002:5046 .*id \"hostdev1\"" "QEMU's info pci: GPU2's 1002:5046"
expect_eq "$(claims | tr ',' '\n' | sort | tr '\n' ' ')" "$(printf '%s\n' "mdev:$u" "pci:$LAB_GPU2" | sort | tr '\n' ' ')" "ledger: the mdev and GPU2"

# --- detach: no guest OS answers, so it times out with nothing released -----------------------
# libvirt 9.0 itself waits 5 s for the guest before its detach call returns; --timeout counts
# from the request, so a 6 s detach gives up after about 6 s, not 6 s after libvirt's 5.
t=$(now_ms)
run_fails vgpu-host detach "$vm" "$u" --timeout 6s
took=$(since "$t")
expect_eq "$E2E_RC" 5 "detach from a guest that does not release the device exits 5 (busy)"
expect_match "$(output)" "did not release mdev:$u within 6s.*stop the VM and detach again" "the message names the device, the wait and the fix"
expect_gt 10000 "$took" "detach --timeout 6s gave up after ${took} ms (libvirt's own 5 s wait counted in)"
expect_match "$(claims)" "mdev:$u" "ledger: the VM still holds the mdev"
expect_eq "$(mdevs)" "$boot$u " "the mdev is still there"
if qemu_has "$u"; then pass "QEMU still has it open"; else fail "QEMU let the mdev go"; fi
expect_eq "$(in_xml "$u")" 1 "the live XML still has it (the unplug is pending)"
expect_eq "$(in_xml "$u" --inactive)" 1 "the definition still has it: nothing was released"
run_fails vgpu-host detach "$vm" "$u" --timeout 1s
expect_eq "$E2E_RC" 5 "detach again: exit 5 again, still nothing released"
expect_match "$(claims)" "mdev:$u" "ledger: still held"

# --- stop the VM, detach again: released ---------------------------------------------------------
run_ok vsh destroy "$vm"
run_ok vgpu-host detach "$vm" "$u" -o json
expect_eq "$(jqo '.steps | join(",")')" "attach-device $u,create-mdev $u" "detach of the stopped VM: the definition's hostdev, then the mdev"
expect_no_file "/sys/bus/mdev/devices/$u" "the mdev is removed"
expect_content "$mb" "$av" "available_instances back"
expect_eq "$(claims)" "pci:$LAB_GPU2" "ledger: the mdev released"
expect_eq "$(in_xml "$u" --inactive)" 0 "the definition no longer has it"
run_ok vgpu-host detach "$vm" "$LAB_GPU2"
expect_driver "$LAB_GPU2" - "detach gave GPU2 back to no driver, as at boot"
expect_content "$(pci_dev "$LAB_GPU2")/driver_override" "(null)" "GPU2's driver_override as at boot"
expect_eq "$(claims)" "" "ledger: released"
run_ok vgpu-host detach "$vm" "$u"
expect_match "$(output)" "detached already" "a second detach says it is gone"
t=$(now_ms)
run_ok vsh start "$vm"
note "restart took $(since "$t") ms"

# --- a second mdev kind: mtty's serial port ---------------------------------------------------
run_ok vgpu-host attach "$vm" --profile mtty-1 -o json
m=$(jqo .device)
if qemu_has "$m"; then pass "QEMU has the mtty mdev open"; else fail "QEMU does not hold the mtty mdev"; fi
expect_in_pci "Serial port: PCI device 4348:3253 .*id \"hostdev[0-9]\"" "QEMU's info pci: mtty's 4348:3253"
expect_eq "$(claims)" "mdev:$m" "ledger: the VM holds the mtty mdev"

# --- killed before and after its libvirt call (exit 137), then the recovery ---------------------
# Step 2 of the attach is attach-device: before=1 dies with the mdev made and QEMU not asked.
VGPU_HOST_CRASH_AT_STEP=2 VGPU_HOST_CRASH_BEFORE=1 vgpu-host-crashtest attach "$vm" --profile mbochs-small >/tmp/crash.out 2>&1
expect_eq "$?" 137 "attach killed before its attach-device"
# Instance 0 went to the mtty mdev (the lowest number nobody held); this is instance 1.
u2=$(other_mdev)
expect_link "/sys/bus/mdev/devices/$u2/mdev_type" mbochs-small "the killed attach made its mdev"
expect_match "$(claims)" "mdev:$u2" "the killed attach holds its claim"
expect_eq "$(in_xml "$u2")" 0 "QEMU was never asked"
run_ok vgpu-host detach "$vm" "$u2" -o json
expect_eq "$(jqo '.converged | join(",")')" "attach-device $u2,create-mdev $u2" "detach undid the interrupted attach (its attach-device found nothing to detach, then its mdev)"
expect_no_file "/sys/bus/mdev/devices/$u2" "its mdev is removed"
expect_eq "$(claims)" "mdev:$m" "ledger: only the mtty mdev held"

# before=0 dies right after libvirt hot-added the device: QEMU has it (instance 1 again).
VGPU_HOST_CRASH_AT_STEP=2 VGPU_HOST_CRASH_BEFORE=0 vgpu-host-crashtest attach "$vm" --profile mbochs-small >/tmp/crash.out 2>&1
expect_eq "$?" 137 "attach killed after its attach-device"
expect_match "$(claims)" "mdev:$u2" "the killed attach holds its claim"
if qemu_has "$u2"; then pass "QEMU has the mdev the killed attach gave it"; else fail "QEMU does not hold the killed attach's mdev"; fi
t=$(now_ms)
run_fails vgpu-host detach "$vm" "$u2" --timeout 2s
took=$(since "$t")
expect_eq "$E2E_RC" 5 "detach cannot undo it while the guest holds it: exit 5"
expect_match "$(output)" "interrupted attach of $u2.*did not release mdev:$u2 within 2s" "it says which attach and why"
expect_gt 12000 "$took" "the undo waited --timeout (${took} ms; libvirt's own 5 s in), not step.DetachTimeout's 30 s"
expect_match "$(claims)" "mdev:$u2" "ledger: still held by the VM"
expect_eq "$(in_xml "$u2" --inactive)" 1 "the definition keeps it"

# --- destroy of the running VM holding both (the interrupted attach's mdev was never given back) -
expect_eq "$(claims | tr ',' '\n' | sort | tr '\n' ' ')" "$(printf 'mdev:%s\n' "$u2" "$m" | sort | tr '\n' ' ')" "ledger: both mdevs"
t=$(now_ms)
run_ok vgpu-host destroy "$vm" -o json
note "destroy took $(since "$t") ms"
expect_match "$(jqo '.[0].undone | join(",")')" "^attach-device $u2,create-mdev $u2,hotplug $u2,attach-device $m,create-mdev $m,hotplug $m,start $vm,define $vm\$" "destroy undid both attaches, the start and the define"
expect_eq "$(mdevs)" "$boot" "destroy removed both mdevs"
expect_content "$mb" "$av" "available_instances as at boot"
expect_eq "$(vgpu-host status -o json | jq -r '[.[].name] | join(",")')" "" "ledger: no VM"
expect_eq "$(vsh list --all --name | grep -c .)" 0 "libvirt has no domain"

# Whatever a failed check above left: no domain, QEMU or mdev may outlive the scenario (the
# later scenarios expect the boot state), so tear down before libvirtd goes.
if vsh domstate "$vm" >/dev/null 2>&1; then
  vgpu-host destroy "$vm" >/dev/null 2>&1 || { vsh destroy "$vm"; vsh undefine "$vm"; } >/dev/null 2>&1
  fail "the VM was still there at the end: destroyed it"
fi
kill "$(cat /run/libvirtd.pid)"
wait_for 20 sh -c '! test -S /run/libvirt/libvirt-sock' || note "libvirtd did not remove its socket in 20 s"
