#!/usr/bin/env bash
# Benchmark (issues 5, 19): create/remove 16 mbochs-small mdev instances with vgpu-host against
# the raw sysfs echo sequence and against mdevctl start/stop, inside the real-kernel lab
# (test/e2e/bench/40-mdev.sh), same run. Goals: vgpu-host's own cost (one `mdev create --count`,
# one `mdev remove --name`, as apply does: its ratio to the raw sequence less the floor of two
# bare Go starts, #32) <= 0.30, and mdevctl >= 8x vgpu-host's time. Needs bin/vgpu-host (make build) and the lab's deps (mdevctl included).
set -euo pipefail
cd "$(dirname "$0")/.."
log=$(mktemp)
trap 'rm -f "$log"' EXIT
test/e2e/run.sh --bench --only mdev "$@" 2>&1 | tee "$log" | grep -E '^(BENCH|FAIL|lab: )' || true
[ "${PIPESTATUS[0]}" -eq 0 ] || { echo "bench/mdev.sh: the lab run failed (see test/e2e/out/console.txt)" >&2; exit 1; }
line=$(grep -E '^BENCH mdev create\+remove x[0-9]' "$log" | tail -n 1)
[ -n "$line" ] || { echo "bench/mdev.sh: no BENCH mdev create+remove line from the lab" >&2; exit 1; }
own=$(grep -E '^BENCH mdev create\+remove own cost: ' "$log" | tail -n 1)
[ -n "$own" ] || { echo "bench/mdev.sh: no BENCH mdev create+remove own cost line from the lab" >&2; exit 1; }
read -r raw floor cost < <(sed -E 's/.*batch ratio ([0-9.]+) - floor ([0-9.]+) = (-?[0-9.]+).*/\1 \2 \3/' <<<"$own")
mdevctl=$(sed -E 's/.*mdevctl\/batch ([0-9.]+).*/\1/' <<<"$line")
# Where it goes: start-up beyond a bare Go binary, the command tree, create/remove's own work.
split=$(grep -E '^BENCH mdev create\+remove own cost split: ' "$log" | tail -n 1 | sed -E 's/.*binary (-?[0-9.]+) \+ command tree (-?[0-9.]+) \+ .* kernel.s (-?[0-9.]+) .*/start-up \1 + command tree \2 + work \3/')
. bench/lib.sh
fail=0
goal mdev-create+remove-own-cost "$cost" "<=" 0.30 "ratio $raw to the raw shell, bare-Go floor $floor${split:+; own cost = $split}" || fail=1
goal mdevctl-over-vgpu-host-mdev "$mdevctl" ">=" 8 || fail=1
exit $fail
