#!/usr/bin/env bash
# make cockpit: the Cockpit page "GPUs" built into cockpit/dist (docs/cockpit.md). npm ci
# installs exactly cockpit/package-lock.json's packages (only when the lockfile changed since
# the last install), then esbuild bundles the page. Needs Node.js 18 or newer and npm: Debian
# 12's nodejs and npm are enough (scripts/deps.sh node installs them when node is missing).
# `make build` does not need any of this; the .deb carries the built page.
set -euo pipefail
cd "$(dirname "$0")/../cockpit"
if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
  ../scripts/deps.sh node
fi
major=$(node -p 'process.versions.node.split(".")[0]')
[ "$major" -ge 18 ] || { echo "cockpit: Node.js $(node --version) is too old: esbuild and puppeteer-core need 18 or newer" >&2; exit 1; }
stamp=node_modules/.vgpu-host-lock
if [ ! -f "$stamp" ] || ! cmp -s package-lock.json "$stamp"; then
  t0=$(date +%s)
  npm ci --no-audit --no-fund --loglevel=error
  cp package-lock.json "$stamp"
  echo "cockpit: npm ci took $(($(date +%s) - t0)) s"
fi
node build.js
