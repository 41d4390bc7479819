#!/usr/bin/env bash
# The main job on this host, read-only: is it ready, what can it give a VM, and what would a VM
# spec become. Changes nothing on the host (no bind, no define).
set -uo pipefail
cd "$(dirname "$0")/.."
bin=bin/vgpu-host
say() { printf '\n\033[1m$ %s\033[0m\n' "$*"; }

say vgpu-host check
"$bin" check
rc=$?
[ $rc -eq 0 ] || echo "(check exited $rc: see 'Exit codes' in the README; a host without a GPU gets paravirtual virtio-gpu only)"

say vgpu-host inspect
"$bin" inspect || exit $?

for spec in examples/virtio-gpu-fallback.yaml; do
  [ -f "$spec" ] || continue
  say vgpu-host render "$spec"
  "$bin" render "$spec" || exit $?
done
