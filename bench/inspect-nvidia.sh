#!/usr/bin/env bash
# Benchmark: `vgpu-host inspect` against `lspci -nnk` on a real NVIDIA host's sysfs (the H200
# capture in ../shared/fixtures/nvidia-h200), with the NVML helper beside vgpu-host as on such a
# host. The helper is the test build replaying that H200's NVML answers behind a wrapper that
# sleeps 30 ms before it starts: on the real H200 host NVML's start (nvmlInit) cost ~30 ms
# (`nvidia-smi -L` 21 ms), and the replay itself starts in ~2 ms. Measured in the same run with
# hyperfine; ratio of medians.
# Goal (issue 27, item 4): inspect, MIG section included, <= 0.4 x lspci -nnk. inspect takes the
# MIG section from the MIG state cache (docs/inspect.md, "MIG and speed"), written here by one
# `inspect --mig` first; `inspect --mig` (NVML asked now) is printed beside it, without a goal.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH=/usr/local/go/bin:$PATH
GO=${GO:-go}
command -v lspci >/dev/null || { echo "bench/inspect-nvidia.sh: lspci missing (apt-get install pciutils)" >&2; exit 1; }
fixture=${VGPU_HOST_SHARED:-../shared}/fixtures/nvidia-h200
if [ ! -f "$fixture/sysfs-snapshot.tar.gz" ] || [ ! -f "$fixture/nvml-facts.json" ]; then
	echo "bench/inspect-nvidia.sh: no H200 capture at $fixture (set VGPU_HOST_SHARED); not measured"
	exit 0
fi

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir "$work/h200" "$work/build" "$work/inst"
tar xzf "$fixture/sysfs-snapshot.tar.gz" -C "$work/h200"
# The binary `make build` made (the flags users get); set VGPU_HOST_BIN to measure another.
BIN=${VGPU_HOST_BIN:-bin/vgpu-host}
[ -x "$BIN" ] || { echo "bench/inspect-nvidia.sh: $BIN missing: make build" >&2; exit 1; }
$GO build -tags nvmlmock -o "$work/build/vgpu-host-nvml-replay" ./cmd/vgpu-host-nvml

. bench/lib.sh
BIN=$(installed "$BIN" "$work/inst")
replay=$(installed "$work/build/vgpu-host-nvml-replay" "$work/inst")
# The helper as vgpu-host finds it: beside itself, named vgpu-host-nvml.
printf '#!/bin/sh\n# NVML starts in ~30 ms on a real H200 host; the replay in ~2 ms.\nsleep 0.03\nexec %s "$@"\n' "$replay" >"$work/inst/vgpu-host-nvml"
chmod 0755 "$work/inst/vgpu-host-nvml"
export VGPU_HOST_NVML_FACTS="$fixture/nvml-facts.json" VGPU_HOST_NVML_MOCK_STATE="$work/nvml-state.json"
unset VGPU_HOST_NVML_HELPER VGPU_HOST_NVML_MOCK

dir=$work/h200
inspect="$BIN --host-root $dir inspect"
live="$BIN --host-root $dir inspect --mig"
lspci_cmd="lspci -nnk -A linux-sysfs -O sysfs.path=$dir/sys/bus/pci"
# Sanity: NVML answers through the helper, the cache is written, and inspect reads it.
$live -o json | grep -q '"source": "nvml"' || { echo "inspect --mig did not reach the NVML helper" >&2; exit 1; }
$inspect -o json | grep -q '"source": "cache"' || { echo "inspect did not read the MIG state cache" >&2; exit 1; }
$inspect | grep -q 'NVIDIA H200  MIG off' || { echo "inspect's table has no MIG line for the H200" >&2; exit 1; }
n=$($lspci_cmd 2>/dev/null | grep -c '^[0-9a-f]')
if command -v hyperfine >/dev/null; then
	# inspect-nomig: the same inspect with no NVML at all (the replay unset: no MIG section),
	# to tell the MIG section's cost from the rest on a busy machine.
	hyperfine -N --warmup 3 --min-runs 30 --export-csv "$work/h200.csv" -n inspect "$inspect" -n inspect-mig "$live" -n lspci "$lspci_cmd" \
		-n inspect-nomig "env VGPU_HOST_NVML_FACTS= $inspect" >&2
	col() { awk -F, -v n="$1" -v c="$2" '$1==n{print (c == "cpu") ? $5+$6 : $4}' "$work/h200.csv"; }
	t_inspect=$(col inspect wall)
	t_live=$(col inspect-mig wall)
	t_lspci=$(col lspci wall)
	# CPU time (user + system): what the wall time is on an idle machine, unstretched by other
	# jobs' load on a shared one.
	printf 'inspect-nvidia    h200  CPU: inspect %s ms, inspect without MIG %s ms, lspci %s ms, ratio %s (load average %s)\n' \
		"$(awk -v a="$(col inspect cpu)" 'BEGIN{printf "%.1f", a*1000}')" "$(awk -v a="$(col inspect-nomig cpu)" 'BEGIN{printf "%.1f", a*1000}')" \
		"$(awk -v a="$(col lspci cpu)" 'BEGIN{printf "%.1f", a*1000}')" \
		"$(awk -v a="$(col inspect cpu)" -v b="$(col lspci cpu)" 'BEGIN{printf "%.2f", a/b}')" "$(cut -d' ' -f1 /proc/loadavg)"
else
	loop() { local s e; s=$(date +%s.%N); for _ in $(seq 30); do "$@" >/dev/null 2>&1; done; e=$(date +%s.%N); echo "($e - $s) / 30" | bc -l; }
	t_inspect=$(loop $inspect)
	t_live=$(loop $live)
	t_lspci=$(loop $lspci_cmd)
fi
ratio=$(awk -v a="$t_inspect" -v b="$t_lspci" 'BEGIN{printf "%.2f", a/b}')
ratio_live=$(awk -v a="$t_live" -v b="$t_lspci" 'BEGIN{printf "%.2f", a/b}')
ms() { awk -v a="$1" 'BEGIN{printf "%.1f", a*1000}'; }
printf 'inspect-nvidia    h200  %5d functions: inspect (MIG from the cache) %s ms, lspci -nnk %s ms, ratio %s (goal <= 0.40)\n' \
	"$n" "$(ms "$t_inspect")" "$(ms "$t_lspci")" "$ratio"
printf 'inspect-nvidia    h200  inspect --mig (NVML helper started, 30 ms mock start) %s ms, ratio %s (no goal)\n' "$(ms "$t_live")" "$ratio_live"
goal inspect-vs-lspci-nvidia "$ratio" "<=" 0.4
