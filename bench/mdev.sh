#!/usr/bin/env bash
# Benchmark (issue 5): create/remove 16 mbochs-small mdev instances with vgpu-host against the
# raw sysfs echo sequence, inside the real-kernel lab (test/e2e/bench/40-mdev.sh). Prints BENCH
# lines with both timings and the ratios. Needs bin/vgpu-host (make build) and the lab's deps.
set -euo pipefail
cd "$(dirname "$0")/.."
exec test/e2e/run.sh --bench --only mdev "$@"
