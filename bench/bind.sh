#!/usr/bin/env bash
# Benchmark (issue 4): bind+unbind of the lab's two-function GPU + HDMI-audio group with
# vgpu-host against the raw shell echo sequence, same devices, same run, inside the real-kernel
# lab guest (test/e2e/bench/20-bind.sh). `make bench` runs it after building bin/vgpu-host.
# Goal (#32): vgpu-host's own cost, the ratio less the floor of any Go tool (the raw sequence plus
# two starts of a bare hello-world Go binary, measured in the same rounds), <= 0.10; reported by
# bench/lib.sh's goal (fails only with BENCH_STRICT=1).
set -euo pipefail
cd "$(dirname "$0")/.."
log=$(mktemp)
trap 'rm -f "$log"' EXIT
test/e2e/run.sh --bench --only bind 2>&1 | tee "$log" | grep -E '^(BENCH|FAIL|lab: )' || true
[ "${PIPESTATUS[0]}" -eq 0 ] || { echo "bench/bind.sh: the lab run failed (see test/e2e/out/console.txt)" >&2; exit 1; }
line=$(grep -E '^BENCH bind\+unbind: ' "$log" | tail -n 1)
[ -n "$line" ] || { echo "bench/bind.sh: no BENCH bind+unbind line from the lab" >&2; exit 1; }
own=$(grep -E '^BENCH bind\+unbind own cost: ' "$log" | tail -n 1)
[ -n "$own" ] || { echo "bench/bind.sh: no BENCH bind+unbind own cost line from the lab" >&2; exit 1; }
read -r ratio floor cost < <(sed -E 's/.*ratio ([0-9.]+) - floor ([0-9.]+) = (-?[0-9.]+).*/\1 \2 \3/' <<<"$own")
# Where it goes: start-up beyond a bare Go binary, the command tree, bind/unbind's own work.
split=$(grep -E '^BENCH bind\+unbind own cost split: ' "$log" | tail -n 1 | sed -E 's/.*binary (-?[0-9.]+) \+ command tree (-?[0-9.]+) \+ .* kernel.s (-?[0-9.]+) .*/start-up \1 + command tree \2 + work \3/')
. bench/lib.sh
goal bind+unbind-own-cost "$cost" "<=" 0.10 "ratio $ratio to the raw shell, bare-Go floor $floor${split:+; own cost = $split}"
