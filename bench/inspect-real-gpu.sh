#!/usr/bin/env bash
# Benchmark on a REAL NVIDIA host, read-only: `vgpu-host inspect` against `lspci -nnk` on this
# host, with the NVML helper beside vgpu-host. `make bench` runs it, and where there is no
# nvidia-smi (no NVIDIA driver) it says so and measures nothing. Alone, as root on such a host
# after `make build`:
#
#   bench/inspect-real-gpu.sh [OUTDIR]
#
# It changes nothing on the GPU (no MIG mode change, no instance, no reset, no driver bind or
# unbind). It does what a user's `inspect` does: as root, the first `inspect --mig` writes the
# MIG state cache (/run/vgpu-host/mig-state.json, docs/inspect.md "MIG and speed") that every
# later `inspect` reads instead of starting NVML.
#
# Measured with hyperfine in the same run (ratio of medians), each binary installed with
# install(1) as `make install` puts it:
#   inspect         the table, MIG from the cache                       goal <= 0.4 x lspci (issue 27)
#   inspect-json    the same as JSON
#   inspect-mig     inspect --mig: the NVML helper started, NVML asked now (no goal)
#   nvidia-smi-L    nvidia-smi -L: NVIDIA's own tool paying NVML's start (the floor for inspect-mig)
#   nvml-facts      vgpu-host-nvml --facts: the helper's start and every MIG question NVML answers
#   version         vgpu-host --version: process start alone
# OUTDIR (default a temporary directory) keeps hyperfine's CSV and JSON.
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-}
command -v nvidia-smi >/dev/null || { echo "bench/inspect-real-gpu.sh: no nvidia-smi here: not an NVIDIA host; not measured"; exit 0; }
command -v lspci >/dev/null || { echo "bench/inspect-real-gpu.sh: lspci missing (install pciutils)" >&2; exit 1; }
for b in bin/vgpu-host bin/vgpu-host-nvml; do
	[ -x "$b" ] || { echo "bench/inspect-real-gpu.sh: $b missing: run make build" >&2; exit 1; }
done
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
. bench/lib.sh
BIN=$(installed bin/vgpu-host "$work")
installed bin/vgpu-host-nvml "$work" >/dev/null
unset VGPU_HOST_ROOT VGPU_HOST_NVML_HELPER VGPU_HOST_NVML_MOCK VGPU_HOST_NVML_FACTS VGPU_HOST_NVML_MOCK_STATE
[ -n "$out" ] || out=$work
mkdir -p "$out"

echo "# $(uname -n), kernel $(uname -r), $(nproc) CPUs, load average $(cut -d' ' -f1-3 /proc/loadavg)"
nvidia-smi -L | sed -E 's/\(UUID: [^)]*\)//'
n=$(lspci -nnk 2>/dev/null | grep -c '^[0-9a-f]')
# Sanity: NVML answers through the helper (and, as root, the cache is written), then inspect
# reads the cache.
"$BIN" -o json inspect --mig >"$work/mig.json"
grep -q '"source": "nvml"' "$work/mig.json" || { echo "inspect --mig did not reach NVML through the helper:" >&2; grep -A3 '"mig"' "$work/mig.json" >&2; exit 1; }
if "$BIN" -o json inspect | grep -q '"source": "cache"'; then
	cache=yes
else
	cache=no
	echo "note: inspect did not read the MIG state cache (not root?): inspect asks NVML each time"
fi
"$BIN" inspect | sed -n '/MIG/,$p' | head -20

if command -v hyperfine >/dev/null; then
	hyperfine -N --warmup 3 --min-runs 30 --export-csv "$out/real-gpu.csv" --export-json "$out/real-gpu.json" \
		-n lspci "lspci -nnk" -n inspect "$BIN inspect" -n inspect-json "$BIN -o json inspect" \
		-n inspect-mig "$BIN inspect --mig" -n nvidia-smi-L "nvidia-smi -L" \
		-n nvml-facts "$work/vgpu-host-nvml --facts" -n version "$BIN --version" >&2
	col() { awk -F, -v n="$1" '$1==n{print $4}' "$out/real-gpu.csv"; }
	cpu() { awk -F, -v n="$1" '$1==n{print $5+$6}' "$out/real-gpu.csv"; }
else
	# loop CMD...: the mean wall time of 30 runs, in seconds.
	loop() { local s e; s=$(date +%s%N); for _ in $(seq 30); do "$@" >/dev/null 2>&1; done; e=$(date +%s%N); awk -v d=$((e - s)) 'BEGIN{print d/30/1e9}'; }
	declare -A t
	t[lspci]=$(loop lspci -nnk)
	t[inspect]=$(loop "$BIN" inspect)
	t[inspect-json]=$(loop "$BIN" -o json inspect)
	t[inspect-mig]=$(loop "$BIN" inspect --mig)
	t[nvidia-smi-L]=$(loop nvidia-smi -L)
	t[nvml-facts]=$(loop "$work/vgpu-host-nvml" --facts)
	t[version]=$(loop "$BIN" --version)
	col() { echo "${t[$1]}"; }
	cpu() { echo 0; }
fi
ms() { awk -v a="$1" 'BEGIN{printf "%.1f", a*1000}'; }
for name in lspci inspect inspect-json inspect-mig nvidia-smi-L nvml-facts version; do
	printf 'real-gpu  %-13s %7s ms wall (median)  %7s ms CPU\n' "$name" "$(ms "$(col $name)")" "$(ms "$(cpu $name)")"
done
ratio=$(awk -v a="$(col inspect)" -v b="$(col lspci)" 'BEGIN{printf "%.2f", a/b}')
ratio_mig=$(awk -v a="$(col inspect-mig)" -v b="$(col lspci)" 'BEGIN{printf "%.2f", a/b}')
printf 'real-gpu  %d PCI functions; MIG cache read: %s; inspect --mig / lspci %s (no goal)\n' "$n" "$cache" "$ratio_mig"
goal inspect-vs-lspci-real-nvidia "$ratio" "<=" 0.4
