#!/usr/bin/env bash
# Benchmark (issue 19): process start-up and inspect on real-kernel snapshots, each against a
# peer measured side by side (hyperfine; the median over short rounds, see rounds below):
#   - `vgpu-host --version` and `vgpu-host --help` against a bare hello-world Go binary built
#     here with the same toolchain and flags (static, -trimpath). Goal: <= 1.5x each in CPU
#     time (the wall-time ratio is printed beside it). Each one's minor page faults per start
#     are printed before (start-faults): they do not drift with the load.
#   - `vgpu-host inspect -o json` against `lspci -nnk` on the same tree, for the shared real-kernel
#     snapshot (/work/shared/fixtures, when present) and the bundled one
#     (host/testdata/lab-snapshot.tar.gz). Goal: <= 0.4x.
# Measures the binary `make build` made (bin/vgpu-host: the flags users get) unless
# VGPU_HOST_BIN names another.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH=/usr/local/go/bin:$PATH
GO=${GO:-go}
for t in hyperfine lspci /usr/bin/time; do
	command -v $t >/dev/null || { echo "bench/start.sh: $t missing (make bench installs it)" >&2; exit 1; }
done
BIN=${VGPU_HOST_BIN:-bin/vgpu-host}
[ -x "$BIN" ] || { echo "bench/start.sh: $BIN missing: make build" >&2; exit 1; }

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir "$work/hello"
printf 'package main\n\nimport "os"\n\nfunc main() { os.Stdout.WriteString("hello\\n") }\n' >"$work/hello/main.go"
printf 'module hello\n\ngo 1.21\n' >"$work/hello/go.mod"
# With bin/vgpu-host's runtime defaults (cmd/vgpu-host/godebug.default), as the floors below.
godebug="-X runtime.godebugDefault=$(cat cmd/vgpu-host/godebug.default)"
(cd "$work/hello" && CGO_ENABLED=0 GOFLAGS= $GO build -trimpath -ldflags "$godebug" -o "$work/bare-go" .)
# The libraries' floor: the same hello world importing (blank) every non-standard package
# vgpu-host links, at go.mod's versions (listed by go list, so it follows the dependencies):
# their package initialisers and the size they add cost every start, whatever vgpu-host's own
# code does. Printed beside the goal, as the lab benches print a bare Go binary's floor.
mkdir "$work/deps"
{
	printf 'package main\n\nimport (\n\t"os"\n\n'
	$GO list -deps -f '{{if not .Standard}}{{.ImportPath}}{{end}}' ./cmd/vgpu-host | grep -v '^github.com/vgpu-host/' | grep -v '/internal/' | sed 's/.*/\t_ "&"/'
	printf ')\n\nfunc main() { os.Stdout.WriteString("hello\\n") }\n'
} >"$work/deps/main.go"
# With the build tags `make build` gives vgpu-host (the Makefile's BUILDFLAGS): without
# urfave_cli_no_template the cli links text/template, and the floor read 1.44 instead of 1.28
# (#32, 300 alternated runs).
CGO_ENABLED=0 $GO build -trimpath -tags urfave_cli_no_template -ldflags "$godebug" -o "$work/deps-go" "$work/deps/main.go"

. bench/lib.sh
# Each binary as a host has it, installed (lib.sh: installed).
mkdir "$work/inst"
bare=$(installed "$work/bare-go" "$work/inst")
deps=$(installed "$work/deps-go" "$work/inst")
BIN=$(installed "$BIN" "$work/inst")
ms() { awk -v a="$1" 'BEGIN{printf "%.2f", a*1000}'; }

# rounds NAME CMD... : ROUNDS hyperfine runs of the commands (named c0, c1, ...) one after the
# other; prints per command "NAME WALL WALL-RATIO CPU CPU-RATIO": the median over rounds of its
# median wall time and of its mean CPU time (user + system), and for c1.. the medians over
# rounds of its ratios to c0 measured in the same round. On a shared machine the load drifts
# between one long run and the next; short rounds side by side follow it.
ROUNDS=${ROUNDS:-5}
rounds() {
	local name=$1 r i args=()
	shift
	for ((i = 1; i <= $#; i++)); do args+=(-n "c$((i - 1))" "${!i}"); done
	for ((r = 1; r <= ROUNDS; r++)); do
		hyperfine -N --warmup 3 --min-runs 40 --export-csv "$work/$name.$r.csv" "${args[@]}" >/dev/null 2>&1
	done
	awk -F, 'FNR > 1 { t[$1, FILENAME] = $4; u[$1, FILENAME] = $5 + $6; names[$1] = 1; files[FILENAME] = 1 }
	function median(a, n,   i, j, x) { for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (a[j] < a[i]) { x = a[i]; a[i] = a[j]; a[j] = x }
		return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2 }
	END { for (c in names) { n = 0; m = 0; for (f in files) { n++; v[n] = t[c, f]; w[n] = u[c, f]; if (c != "c0") { m++; q[m] = t[c, f] / t["c0", f]; r[m] = u[c, f] / u["c0", f] } }
		printf "%s %.6f %s %.6f %s\n", c, median(v, n), (c == "c0" ? "1" : sprintf("%.2f", median(q, m))), median(w, n), (c == "c0" ? "1" : sprintf("%.2f", median(r, m))) } }' "$work/$name".*.csv | sort
}

# faults CMD...: the median of FAULT_RUNS starts' minor page faults (getrusage, through GNU
# time). Unlike CPU and wall time they do not drift with the load, and on this machine a start
# costs about its faults (README, Start-up): what a change to the start did, on a busy machine.
FAULT_RUNS=${FAULT_RUNS:-100}
faults() {
	local i
	for ((i = 0; i < FAULT_RUNS; i++)); do
		/usr/bin/time -f %R "$@" 2>&1 >/dev/null | tail -n 1
	done | sort -n | awk '{ f[NR] = $1 } END { print f[int((NR + 1) / 2)] }'
}
printf 'start-faults   minor page faults per start, median of %d: bare Go binary %s, vgpu-host --version %s, --help %s, libraries'"'"' floor %s\n' \
	"$FAULT_RUNS" "$(faults "$bare")" "$(faults "$BIN" --version)" "$(faults "$BIN" --help)" "$(faults "$deps")"

rounds start "$bare" "$BIN --version" "$BIN --help" "$deps" >"$work/start.txt"
read -r _ t_bare _ u_bare _ < <(grep '^c0 ' "$work/start.txt")
read -r _ t_deps _ u_deps dratio < <(grep '^c3 ' "$work/start.txt")
printf 'start-floor    a bare Go binary importing only the libraries vgpu-host links (%d packages): CPU %s ms, ratio %s to the bare binary (what no change to vgpu-host'"'"'s own code goes below)\n' \
	"$(grep -c '^	_ ' "$work/deps/main.go")" "$(ms "$u_deps")" "$dratio"
echo "start_deps_floor_ratio $dratio"
# The goal is on CPU time, what a start costs: on a loaded 2-core machine a process's wall
# time is mostly its wait for a core (both ratios are printed).
for what in version help; do
	c=$([ $what = version ] && echo c1 || echo c2)
	read -r _ t ratio u cratio < <(grep "^$c " "$work/start.txt")
	printf 'start-%-8s vgpu-host --%s CPU %s ms, bare Go binary %s ms, ratio %s; wall %s vs %s ms, ratio %s (medians of %d rounds side by side; goal <= 1.5 on CPU)\n' \
		"$what" "$what" "$(ms "$u")" "$(ms "$u_bare")" "$cratio" "$(ms "$t")" "$(ms "$t_bare")" "$ratio" "$ROUNDS"
	goal "start-$what-vs-bare-go" "$cratio" "<=" 1.5
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
	rounds "$name" "$lspci_cmd" "$inspect" >"$work/$name.txt"
	read -r _ t_l _ < <(grep '^c0 ' "$work/$name.txt")
	read -r _ t_i ratio _ < <(grep '^c1 ' "$work/$name.txt")
	printf 'inspect-snapshot %s (%d functions): inspect -o json %s ms, lspci -nnk %s ms, ratio %s (median of %d rounds; goal <= 0.40)\n' \
		"$name" "$n" "$(ms "$t_i")" "$(ms "$t_l")" "$ratio" "$ROUNDS"
	goal "inspect-vs-lspci-snapshot-$name" "$ratio" "<=" 0.4
done
