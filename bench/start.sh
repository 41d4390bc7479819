#!/usr/bin/env bash
# Benchmark (issue 19): process start-up and inspect on real-kernel snapshots, each against a
# peer in the same hyperfine run (median times; robust on a shared, busy machine):
#   - `vgpu-host --version` and `vgpu-host --help` against a bare hello-world Go binary built
#     here with the same toolchain and flags (static, -trimpath). Goal: <= 1.5x each.
#   - `vgpu-host inspect -o json` against `lspci -nnk` on the same tree, for the shared real-kernel
#     snapshot (/work/shared/fixtures, when present) and the bundled one
#     (host/testdata/lab-snapshot.tar.gz). Goal: <= 0.4x.
# Measures the binary `make build` made (bin/vgpu-host: the flags users get) unless
# VGPU_HOST_BIN names another.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH=/usr/local/go/bin:$PATH
GO=${GO:-go}
for t in hyperfine lspci; do
	command -v $t >/dev/null || { echo "bench/start.sh: $t missing (make bench installs it)" >&2; exit 1; }
done
BIN=${VGPU_HOST_BIN:-bin/vgpu-host}
[ -x "$BIN" ] || { echo "bench/start.sh: $BIN missing: make build" >&2; exit 1; }

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir "$work/hello"
printf 'package main\n\nimport "os"\n\nfunc main() { os.Stdout.WriteString("hello\\n") }\n' >"$work/hello/main.go"
printf 'module hello\n\ngo 1.21\n' >"$work/hello/go.mod"
(cd "$work/hello" && CGO_ENABLED=0 GOFLAGS= $GO build -trimpath -o "$work/bare-go" .)

. bench/lib.sh
ms() { awk -v a="$1" 'BEGIN{printf "%.2f", a*1000}'; }
median() { awk -F, -v n="$2" '$1==n{print $4}' "$1"; }

hyperfine -N --warmup 10 --min-runs 200 --export-csv "$work/start.csv" \
	-n bare-go "$work/bare-go" -n version "$BIN --version" -n help "$BIN --help" >&2
t_bare=$(median "$work/start.csv" bare-go)
for what in version help; do
	t=$(median "$work/start.csv" $what)
	ratio=$(awk -v a="$t" -v b="$t_bare" 'BEGIN{printf "%.2f", a/b}')
	printf 'start-%-8s vgpu-host --%s %s ms, bare Go binary %s ms, ratio %s (goal <= 1.5)\n' \
		"$what" "$what" "$(ms "$t")" "$(ms "$t_bare")" "$ratio"
	goal "start-$what-vs-bare-go" "$ratio" "<=" 1.5
done

snapshots=(host/testdata/lab-snapshot.tar.gz)
shared=${VGPU_SHARED_SNAPSHOT:-/work/shared/fixtures/qemu-q35-iommu-6.1.tar.gz}
[ -f "$shared" ] && snapshots=("$shared" "${snapshots[@]}")
for tgz in "${snapshots[@]}"; do
	name=$(basename "$tgz" .tar.gz)
	dir="$work/$name"
	mkdir "$dir" && tar -xzf "$tgz" -C "$dir"
	inspect="$BIN --host-root $dir inspect -o json"
	lspci_cmd="lspci -nnk -A linux-sysfs -O sysfs.path=$dir/sys/bus/pci"
	n=$($lspci_cmd 2>/dev/null | grep -c '^[0-9a-f]') || true
	[ "$n" -gt 0 ] || { echo "bench/start.sh: lspci sees no function in $dir" >&2; exit 1; }
	$inspect >/dev/null
	hyperfine -N --warmup 5 --min-runs 100 --export-csv "$work/$name.csv" -n inspect "$inspect" -n lspci "$lspci_cmd" >&2
	t_i=$(median "$work/$name.csv" inspect)
	t_l=$(median "$work/$name.csv" lspci)
	ratio=$(awk -v a="$t_i" -v b="$t_l" 'BEGIN{printf "%.2f", a/b}')
	printf 'inspect-snapshot %s (%d functions): inspect -o json %s ms, lspci -nnk %s ms, ratio %s (goal <= 0.40)\n' \
		"$name" "$n" "$(ms "$t_i")" "$(ms "$t_l")" "$ratio"
	goal "inspect-vs-lspci-snapshot-$name" "$ratio" "<=" 0.4
done
