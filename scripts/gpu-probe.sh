#!/usr/bin/env bash
# gpu-probe.sh [DIR]: a READ-ONLY probe of an NVIDIA GPU host, for bug reports and for checking
# vgpu-host against real hardware (issue 27). It writes, under DIR (default ./gpu-probe-OUT):
#
#   snapshot.tar.gz             vgpu-host host snapshot: the sysfs subset vgpu-host reads, /proc
#                               files, nvml-facts.json when NVML answers (docs/snapshot.md)
#   nvidia-smi-mig-lgip.txt     nvidia-smi mig -lgip   (GPU-instance profiles)
#   nvidia-smi-mig-lgipp.txt    nvidia-smi mig -lgipp  (their placements)
#   nvidia-smi-q.txt            nvidia-smi -q          (serial numbers, GPU PDI and UUIDs zeroed)
#   inspect.json, check.json, mig-show.json   vgpu-host's answers (-o json; GPU and MIG UUIDs zeroed)
#   snapshot.txt                what the snapshot holds and what it skipped
#   *.stderr                    each command's stderr
#   summary.txt                 each command's exit code and time, lspci -nnk's time for comparison
#
# IT CHANGES NOTHING ON THE HOST OR THE GPU: no MIG mode change, no GPU or compute instance
# created or destroyed, no reset, no driver bind or unbind, no sysfs write. Every command goes
# through ro(), which runs only the read commands listed there and refuses anything else.
# It runs where NVML or nvidia-smi are missing too: it says so and still writes the snapshot.
# vgpu-host is ./bin/vgpu-host (after `make build`) or the one in PATH; VGPU_HOST_ROOT is
# honoured as by vgpu-host (a fake or unpacked root: then NVML is not asked, unless
# VGPU_HOST_NVML_FACTS names a capture).
set -uo pipefail

# ro CMD ARGS...: run CMD only if it is one of the probe's read commands; refuse anything else.
ro() {
  local base
  base=$(basename -- "$1")
  case "$base ${*:2}" in
    "nvidia-smi mig -lgip" | "nvidia-smi mig -lgipp" | "nvidia-smi -q") ;;
    "vgpu-host -o json inspect" | "vgpu-host -o json check" | "vgpu-host -o json mig show") ;;
    "vgpu-host host snapshot "*) [ $# -eq 4 ] || { echo "gpu-probe: refused: $*" >&2; return 126; } ;;
    "vgpu-host-nvml --version" | "vgpu-host version" | "lspci -nnk") ;;
    *)
      echo "gpu-probe: refused (not one of the probe's read commands): $*" >&2
      return 126
      ;;
  esac
  "$@"
}

# find_vgpu_host: ./bin/vgpu-host, else the one in PATH.
find_vgpu_host() {
  if [ -x ./bin/vgpu-host ]; then
    echo "$PWD/bin/vgpu-host"
  else
    command -v vgpu-host
  fi
}

now_ns() { date +%s%N; }

# step NAME OUTFILE CMD ARGS...: run a read command with a time limit, its stdout to OUTFILE and
# stderr to OUTFILE's .stderr, and record its exit code and time in summary.txt.
step() {
  local name=$1 outfile=$2 start end rc
  shift 2
  start=$(now_ns)
  if [ -n "$outfile" ]; then
    timeout 300 bash -c "$(declare -f ro); ro \"\$@\"" ro "$@" >"$out/$outfile" 2>"$out/${outfile%.*}.stderr"
  else
    timeout 300 bash -c "$(declare -f ro); ro \"\$@\"" ro "$@" >/dev/null 2>&1
  fi
  rc=$?
  end=$(now_ns)
  printf '%-22s exit %-3s %8s ms\n' "$name" "$rc" "$(((end - start) / 1000000))" >>"$out/summary.txt"
  return "$rc"
}

# absent NAME WHY: record a step that could not run.
absent() { printf '%-22s absent   %s\n' "$1" "$2" >>"$out/summary.txt"; }

# scrub FILE: zero what identifies the GPU in nvidia-smi's text: UUIDs, serial numbers and the
# GPU PDI, keeping their length ("N/A" and the like stay).
scrub() {
  sed -E -i \
    -e 's/[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}/00000000-0000-0000-0000-000000000000/g' \
    -e '/Serial Number/ { :a; s/(: *0*)[1-9A-Za-z]([0-9A-Za-z]*)$/\10\2/; ta; }' \
    -e '/GPU PDI/ { :b; s/(: *0x0*)[1-9a-fA-F]([0-9a-fA-F]*)$/\10\2/; tb; }' "$1"
}

# scrub_ids FILE: zero the GPU and MIG UUIDs NVML reports ("GPU-…", "MIG-…") in vgpu-host's JSON;
# other UUIDs (mdev instances, which their owner chose) stay.
scrub_ids() {
  sed -E -i -e 's/\b(GPU|MIG)-[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}/\1-00000000-0000-0000-0000-000000000000/g' "$1"
}

main() {
  out=${1:-./gpu-probe-OUT}
  mkdir -p "$out" || exit 1
  out=$(cd "$out" && pwd)
  : >"$out/summary.txt"
  {
    echo "# gpu-probe $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(uname -n), kernel $(uname -r)"
    echo "# read-only: no MIG mode change, no instance, no reset, no driver unbind"
    echo "# VGPU_HOST_ROOT=${VGPU_HOST_ROOT:-/}"
  } >>"$out/summary.txt"

  local vh smi
  vh=$(find_vgpu_host) || vh=
  if [ -n "$vh" ]; then
    echo "# vgpu-host: $vh" >>"$out/summary.txt"
    step version version.txt "$vh" version
    step snapshot snapshot.txt "$vh" host snapshot "$out/snapshot.tar.gz"
    tar -tzf "$out/snapshot.tar.gz" 2>/dev/null | grep -qx nvml-facts.json &&
      echo "# snapshot has nvml-facts.json" >>"$out/summary.txt" ||
      echo "# snapshot has no nvml-facts.json (NVML not available or not asked)" >>"$out/summary.txt"
    step inspect inspect.json "$vh" -o json inspect
    step check check.json "$vh" -o json check
    step "mig show" mig-show.json "$vh" -o json mig show
    for f in inspect.json check.json mig-show.json; do scrub_ids "$out/$f"; done
  else
    absent vgpu-host "not in ./bin or PATH: run make build; no snapshot"
  fi

  if smi=$(command -v nvidia-smi); then
    step "nvidia-smi mig -lgip" nvidia-smi-mig-lgip.txt "$smi" mig -lgip
    step "nvidia-smi mig -lgipp" nvidia-smi-mig-lgipp.txt "$smi" mig -lgipp
    step "nvidia-smi -q" nvidia-smi-q.txt "$smi" -q
    scrub "$out/nvidia-smi-q.txt"
  else
    absent nvidia-smi "not in PATH (no NVIDIA driver here?)"
  fi

  if command -v lspci >/dev/null; then
    step "lspci -nnk" "" lspci -nnk
  else
    absent lspci "not in PATH"
  fi
  cat "$out/summary.txt"
  echo "gpu-probe: wrote $out"
}

if [ "${BASH_SOURCE[0]}" = "$0" ]; then
  main "$@"
fi
