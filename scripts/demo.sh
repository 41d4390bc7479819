#!/usr/bin/env bash
# make demo: the main job, read-only, as any user, installing nothing. First `check` on this
# host; then, since a host without a GPU has little to show, the same commands on the bundled
# real-kernel snapshot (host/testdata/lab-snapshot.tar.gz: Debian's 6.1 kernel under QEMU q35
# with an emulated IOMMU; a GPU with its HDMI audio, an identical second GPU, a GPU sharing a
# group with a NIC, an SR-IOV PF with VFs, the mdev sample drivers): inspect, vf list, mdev
# types, render and plan of examples/passthrough.yaml (against the file-backed fake libvirt,
# vgpu-fake:///: no libvirtd needed), and bind --dry-run.
# Changes nothing on the host: the snapshot is unpacked into a temporary directory.
set -uo pipefail
cd "$(dirname "$0")/.."
bin=${VGPU_HOST_BIN:-bin/vgpu-host}
[ -x "$bin" ] || { echo "demo: $bin missing: run make build-static" >&2; exit 1; }
say() { printf '\n\033[1m$ %s\033[0m\n' "$*"; }
note() { printf '\033[2m# %s\033[0m\n' "$*"; }

say vgpu-host check
"$bin" check
rc=$?
[ $rc -eq 0 ] || note "check exited $rc (see 'Exit codes' in the README); a host without a GPU can still give VMs paravirtual virtio-gpu"

snap=$(mktemp -d)
trap 'rm -rf "$snap"' EXIT
tar -xzf host/testdata/lab-snapshot.tar.gz -C "$snap" || exit 1
printf '\n'
note "Now the bundled real-kernel snapshot, unpacked into $snap. --host-root points every"
note "command at it instead of this host's /sys; nothing on this host is read or changed."

say vgpu-host --host-root SNAPSHOT inspect
"$bin" --host-root "$snap" inspect || exit $?

say vgpu-host --host-root SNAPSHOT vf list
"$bin" --host-root "$snap" vf list || exit $?
note "an SR-IOV PF (QEMU's NVMe: the same kernel paths as a GPU's VFs); vf enable sets the count"

say vgpu-host --host-root SNAPSHOT mdev types
"$bin" --host-root "$snap" mdev types || exit $?

# examples/passthrough.yaml names an A100 at 0000:17:00.0; the snapshot's GPU with an HDMI
# audio companion is 0000:01:00.0.
spec=$snap/passthrough.yaml
sed 's/0000:17:00\.0/0000:01:00.0/' examples/passthrough.yaml >"$spec"
say "vgpu-host --host-root SNAPSHOT render passthrough.yaml   # examples/passthrough.yaml with address 0000:01:00.0"
"$bin" --host-root "$snap" render "$spec" || exit $?

say "vgpu-host --host-root SNAPSHOT plan --connect vgpu-fake:///SNAPSHOT/libvirt.json --virt-type kvm passthrough.yaml"
"$bin" --host-root "$snap" plan --connect "vgpu-fake://$snap/libvirt.json" --virt-type kvm "$spec" || exit $?
note "plan: every step apply would take, in order, and every safety check that would refuse it."
note "vgpu-fake:/// is a libvirt kept in a file (no libvirtd); on a real host plan asks qemu:///system."

say vgpu-host --host-root SNAPSHOT bind 0000:01:00.0 --dry-run
"$bin" --host-root "$snap" bind 0000:01:00.0 --dry-run || exit $?
printf '\n'
note "bind moves the GPU's whole IOMMU group (its HDMI audio too); --dry-run printed the exact writes."
