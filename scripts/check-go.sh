#!/usr/bin/env bash
# Says whether the Go toolchain this repository needs is here: `go` (or $1) must exist and be at
# least the version go.mod names. The Makefile runs it before anything else. Prints nothing and
# exits 0 when Go is fine; otherwise prints one clear message and exits 1.
# GOTOOLCHAIN=local: ask the go found here, not a toolchain it would download.
set -uo pipefail
cd "$(dirname "$0")/.."
go=${1:-go}
want=$(sed -n 's/^go \([0-9.]*\).*/\1/p' go.mod)
# The Makefile puts /usr/local/go/bin first in PATH for its recipes, but GNU make 4.3 (Debian
# 12's) runs $(shell ...), and so this script, with make's own PATH: look there too.
if ! command -v "$go" >/dev/null 2>&1 && [ "$go" = go ] && [ -x /usr/local/go/bin/go ]; then
	go=/usr/local/go/bin/go
fi
path=$(command -v "$go" 2>/dev/null) || {
	echo "Go $want or newer is needed to build vgpu-host (go.mod says so), and '$go' is not in PATH (nor in /usr/local/go/bin)." \
		"Install the Go toolchain $want (see 'Install' in README.md) and put its bin directory in PATH; to only use vgpu-host, install its Debian package instead"
	exit 1
}
have=$(GOTOOLCHAIN=local "$go" env GOVERSION 2>/dev/null) || have=unknown
v=${have#go}
v=${v%%[!0-9.]*} # go1.26rc1 -> 1.26
if [ "$have" = unknown ] || [ -z "$v" ] || [ "$(printf '%s\n%s\n' "$want" "$v" | sort -V | head -n 1)" != "$want" ]; then
	echo "Go $want or newer is needed to build vgpu-host (go.mod says so), but $path is $have." \
		"Install the Go toolchain $want (see 'Install' in README.md) and put it first in PATH (Debian 12's golang-go is 1.19: too old)"
	exit 1
fi
