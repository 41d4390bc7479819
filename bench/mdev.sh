#!/usr/bin/env bash
# Benchmark (issues 5, 19): create/remove 16 mbochs-small mdev instances with vgpu-host against
# the raw sysfs echo sequence and against mdevctl start/stop, inside the real-kernel lab
# (test/e2e/bench/40-mdev.sh), same run. Goals: vgpu-host (one `mdev create --count`, one
# `mdev remove --name`, as apply does) <= 1.5x the raw sequence, and mdevctl >= 8x vgpu-host's
# time. Needs bin/vgpu-host (make build) and the lab's deps (mdevctl included).
set -euo pipefail
cd "$(dirname "$0")/.."
log=$(mktemp)
trap 'rm -f "$log"' EXIT
test/e2e/run.sh --bench --only mdev "$@" 2>&1 | tee "$log" | grep -E '^(BENCH|FAIL|lab: )' || true
[ "${PIPESTATUS[0]}" -eq 0 ] || { echo "bench/mdev.sh: the lab run failed (see test/e2e/out/console.txt)" >&2; exit 1; }
line=$(grep -E '^BENCH mdev create\+remove ' "$log" | tail -n 1)
[ -n "$line" ] || { echo "bench/mdev.sh: no BENCH mdev create+remove line from the lab" >&2; exit 1; }
raw=$(sed -E 's/.*ratios batch\/raw ([0-9.]+).*/\1/' <<<"$line")
mdevctl=$(sed -E 's/.*mdevctl\/batch ([0-9.]+).*/\1/' <<<"$line")
. bench/lib.sh
fail=0
goal mdev-create+remove-vs-raw-shell "$raw" "<=" 1.5 || fail=1
goal mdevctl-over-vgpu-host-mdev "$mdevctl" ">=" 8 || fail=1
exit $fail
