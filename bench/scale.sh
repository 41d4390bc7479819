#!/usr/bin/env bash
# Benchmark (issue 19, scale): a generated host with 64 GPUs (hosttest.GPUHost64: 16 PCIe
# switches, 8 NUMA nodes, A100 mdev parents, consumer GPUs with audio, L40S and A40 with 16
# vendor-vGPU VFs each; 756 PCI functions):
#   - `vgpu-host inspect -o json` on it against `lspci -nnk` on the same tree (hyperfine, same
#     run). Goal (issue 2's): <= 0.5x.
#   - `vgpu-host plan` of a 4-GPU passthrough VM on it, against the file-backed fake libvirt
#     (vgpu-fake:///). No peer: the time is printed.
#   - apply + destroy of a small VM (NoStart, virt.NewFake, the real ledger on disk) while the
#     ledger holds 10, 100, 1,000 (applied one by one, sequentially) and 10,000 VMs
#     (lifecycle's BenchmarkApplyDestroyScale; the ledger is one file per VM, so a transaction
#     rewrites only what it changes). Goal (#32): flat, i.e. the op at 1,000 and at 10,000 held
#     each <= 1.5x the op at 10 held.
# Measures bin/vgpu-host (make build) unless VGPU_HOST_BIN names another.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH=/usr/local/go/bin:$PATH
GO=${GO:-go}
for t in hyperfine lspci; do
	command -v $t >/dev/null || { echo "bench/scale.sh: $t missing (make bench installs it)" >&2; exit 1; }
done
BIN=${VGPU_HOST_BIN:-bin/vgpu-host}
[ -x "$BIN" ] || { echo "bench/scale.sh: $BIN missing: make build" >&2; exit 1; }
ROUNDS=${SCALE_ROUNDS:-5}

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
. bench/lib.sh
mkdir "$work/inst"
BIN=$(installed "$BIN" "$work/inst") # as a host has it (lib.sh)
$GO build -o "$work/gen-fakehost" ./cmd/gen-fakehost
dir=$work/gpu64
n=$("$work/gen-fakehost" -size gpu64 "$dir")
gpus=$("$BIN" --host-root "$dir" inspect -o json | jq '[.devices[] | select(.is_gpu and (.physfn // "") == "")] | length')
cat >"$work/gpu4.yaml" <<'YAML'
apiVersion: vgpu-host/v1
kind: VirtualMachine
metadata:
  name: scale-4gpu
spec:
  vcpus: 16
  memory: 64GiB
  numa: auto
  firmware: bios
  disks:
    - name: root
      path: /var/lib/libvirt/images/scale.qcow2
      format: qcow2
  network:
    type: none
  gpus:
    - passthrough:
        model: "RTX 3080"
        count: 4
YAML
plan="$BIN --host-root $dir plan --connect vgpu-fake://$work/virt.json --virt-type kvm $work/gpu4.yaml"
binds=$($plan | grep -c 'bind the IOMMU group') || true
[ "$binds" = 4 ] || { echo "bench/scale.sh: the plan binds $binds groups, not 4:" >&2; $plan >&2; exit 1; }
inspect="$BIN --host-root $dir inspect --output json"
lspci_cmd="lspci -nnk -A linux-sysfs -O sysfs.path=$dir/sys/bus/pci"
hyperfine -N --warmup 3 --min-runs 20 --export-csv "$work/h.csv" -n inspect "$inspect" -n lspci "$lspci_cmd" -n plan "$plan" >&2
med() { awk -F, -v n="$1" '$1==n{printf "%.1f", $4*1000}' "$work/h.csv"; }
# CPU time (user + system, mean): on the shared 2-core machine other jobs stretch both wall
# times towards the same wait for a core, which hides the difference; CPU time does not wait.
cpu() { awk -F, -v n="$1" '$1==n{printf "%.1f", ($5+$6)*1000}' "$work/h.csv"; }
ratio=$(awk -v a="$(med inspect)" -v b="$(med lspci)" 'BEGIN{printf "%.2f", a/b}')
cratio=$(awk -v a="$(cpu inspect)" -v b="$(cpu lspci)" 'BEGIN{printf "%.2f", a/b}')
echo "scale gpu64: $n functions, $gpus GPUs: inspect -o json $(med inspect) ms, lspci -nnk $(med lspci) ms, ratio $ratio (goal <= 0.5); CPU $(cpu inspect) vs $(cpu lspci) ms, ratio $cratio; plan of a 4-GPU VM $(med plan) ms (CPU $(cpu plan) ms); load average $(cut -d' ' -f1 /proc/loadavg)"

# ledger growth: one go test run; ms per op at each size.
out=$($GO test ./lifecycle -run '^$' -bench '^BenchmarkApplyDestroyScale$' -benchtime "${ROUNDS}x" -count 1 2>&1) || { echo "$out" >&2; exit 1; }
metric() { # metric SIZE UNIT
	awk -v s="held=$1" -v u="$2" '$1 ~ "/"s"(-[0-9]+)?$" {for (i = 2; i <= NF; i++) if ($i == u) print $(i-1)}' <<<"$out"
}
for s in 10 100 1000 10000; do
	a=$(metric $s apply-ms/op) d=$(metric $s destroy-ms/op) k=$(metric $s ledger-KiB) f=$(metric $s fill-ms/apply) c=$(metric $s cpu-ms/op)
	[ -n "$a" ] || { echo "$out" >&2; echo "bench/scale.sh: no result for $s VMs" >&2; exit 1; }
	printf 'scale ledger %5d VMs held (%6.0f KiB): apply %7.1f ms, destroy %7.1f ms per op (CPU %s ms); sequential applies so far %s ms each\n' "$s" "$k" "$a" "$d" "${c:--}" "${f:--}"
	eval "op$s=$(awk -v a="$a" -v d="$d" 'BEGIN{print a+d}')"
done
x() { awk -v a="$1" -v b="$op10" 'BEGIN{printf "%.2f", a/b}'; }
growth=$(x "$op1000")
echo "scale apply+destroy: $op10 ms at 10 VMs, $op100 at 100 ($(x "$op100")x), $op1000 at 1,000 (${growth}x), $op10000 at 10,000 ($(x "$op10000")x); goal <= 1.5x at 1,000 and at 10,000 (load:$(uptime | sed 's/.*load average://'))"
fail=0
goal inspect-vs-lspci-gpu64 "$ratio" "<=" 0.5 || fail=1
# The ledger goal (#32's table): apply+destroy stays flat, at 1,000 and at 10,000 VMs against 10.
goal apply+destroy-growth-1000-vs-10-VMs "$growth" "<=" 1.5 "$op1000 vs $op10 ms per op" || fail=1
goal apply+destroy-growth-10000-vs-10-VMs "$(x "$op10000")" "<=" 1.5 "$op10000 vs $op10 ms per op" || fail=1
exit $fail
