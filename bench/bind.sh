#!/usr/bin/env bash
# Benchmark (issue 4): bind+unbind of the lab's two-function GPU + HDMI-audio group with
# vgpu-host against the raw shell echo sequence, same devices, same run, inside the real-kernel
# lab guest (test/e2e/bench/20-bind.sh). `make bench` runs it after building bin/vgpu-host.
# Goal: ratio <= 1.2. Fails above the goal unless BENCH_NO_GOAL=1 (as bench/inspect.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
log=$(mktemp)
trap 'rm -f "$log"' EXIT
test/e2e/run.sh --bench --only bind 2>&1 | tee "$log" | grep -E '^(BENCH|FAIL|lab: )' || true
[ "${PIPESTATUS[0]}" -eq 0 ] || { echo "bench/bind.sh: the lab run failed (see test/e2e/out/console.txt)" >&2; exit 1; }
line=$(grep -E '^BENCH bind\+unbind: ' "$log" | tail -n 1)
[ -n "$line" ] || { echo "bench/bind.sh: no BENCH bind+unbind line from the lab" >&2; exit 1; }
ratio=$(sed -E 's/.*ratio ([0-9.]+).*/\1/' <<<"$line")
if awk -v r="$ratio" 'BEGIN {exit !(r > 1.2)}' && [ -z "${BENCH_NO_GOAL:-}" ]; then
  echo "bench/bind.sh: ratio $ratio is above the 1.2 goal (see the line without process start for vgpu-host's own share)" >&2
  exit 1
fi
