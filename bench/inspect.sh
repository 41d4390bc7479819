#!/usr/bin/env bash
# Benchmark: `vgpu-host inspect --output json` against `lspci -nnk` on the same generated
# sysfs trees, measured in the same run with hyperfine. Prints the ratio of median times
# (robust on a shared, busy machine) inspect/lspci per host.
# Goal (issue 2): ratio <= 0.5 on both the ~2,000-function host and the small one.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH=/usr/local/go/bin:$PATH
GO=${GO:-go}
command -v lspci >/dev/null || { echo "bench/inspect.sh: lspci missing (apt-get install pciutils)" >&2; exit 1; }

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
$GO build -o "$work/gen-fakehost" ./cmd/gen-fakehost
# The binary `make build` made (the flags users get: make bench builds it first); set
# VGPU_HOST_BIN to measure another.
BIN=${VGPU_HOST_BIN:-bin/vgpu-host}
[ -x "$BIN" ] || { echo "bench/inspect.sh: $BIN missing: make build" >&2; exit 1; }

. bench/lib.sh
mkdir "$work/inst"
BIN=$(installed "$BIN" "$work/inst") # as a host has it (lib.sh); lspci is installed by dpkg
fail=0
for size in small big; do
	dir="$work/$size"
	n=$("$work/gen-fakehost" -size "$size" "$dir")
	inspect="$BIN --host-root $dir inspect --output json"
	lspci_cmd="lspci -nnk -A linux-sysfs -O sysfs.path=$dir/sys/bus/pci"
	# Sanity: both see the tree.
	$inspect >/dev/null
	[ "$($lspci_cmd 2>/dev/null | grep -c '^[0-9a-f]')" -ge "$n" ] || { echo "lspci does not see $n functions in $dir" >&2; exit 1; }
	if command -v hyperfine >/dev/null; then
		# "start" is the process alone (--version: no scan), to tell start-up from scanning.
		hyperfine -N --warmup 3 --min-runs 20 --export-csv "$work/$size.csv" -n inspect "$inspect" -n lspci "$lspci_cmd" \
			-n start "$BIN --version" >&2
		t_inspect=$(awk -F, '$1=="inspect"{print $4}' "$work/$size.csv")
		t_lspci=$(awk -F, '$1=="lspci"{print $4}' "$work/$size.csv")
		t_start=$(awk -F, '$1=="start"{print $4}' "$work/$size.csv")
		# CPU time (user + system): what the wall time is on an idle machine, unstretched by
		# other jobs' load on the shared one.
		c_inspect=$(awk -F, '$1=="inspect"{print $5+$6}' "$work/$size.csv")
		c_lspci=$(awk -F, '$1=="lspci"{print $5+$6}' "$work/$size.csv")
		printf 'inspect-cpu       %-5s inspect %.1f ms, lspci %.1f ms of CPU, ratio %.2f (load average %s)\n' \
			"$size" "$(awk -v a="$c_inspect" 'BEGIN{print a*1000}')" "$(awk -v a="$c_lspci" 'BEGIN{print a*1000}')" \
			"$(awk -v a="$c_inspect" -v b="$c_lspci" 'BEGIN{print a/b}')" "$(cut -d' ' -f1 /proc/loadavg)"
		printf 'inspect-start     %-5s process start (vgpu-host --version) %.1f ms of inspect %.1f ms\n' \
			"$size" "$(awk -v a="$t_start" 'BEGIN{print a*1000}')" "$(awk -v a="$t_inspect" 'BEGIN{print a*1000}')"
	else
		loop() { local s e; s=$(date +%s.%N); for _ in $(seq 20); do "$@" >/dev/null 2>&1; done; e=$(date +%s.%N); echo "($e - $s) / 20" | bc -l; }
		t_inspect=$(loop $inspect)
		t_lspci=$(loop $lspci_cmd)
	fi
	ratio=$(awk -v a="$t_inspect" -v b="$t_lspci" 'BEGIN{printf "%.2f", a/b}')
	printf 'inspect-vs-lspci %-5s %5d functions: inspect %.1f ms, lspci %.1f ms, ratio %s (goal <= 0.50)\n' \
		"$size" "$n" "$(awk -v a="$t_inspect" 'BEGIN{print a*1000}')" "$(awk -v a="$t_lspci" 'BEGIN{print a*1000}')" "$ratio"
	goal "inspect-vs-lspci-$size" "$ratio" "<=" 0.5 || fail=1
done
# host.Scan alone (no process start, no JSON) on the same generated hosts.
$GO test ./host -run '^$' -bench 'Scan$' -benchtime 20x -count 3 2>/dev/null |
	awk '/^BenchmarkScan\//{split($1, n, "/"); sub(/-[0-9]+$/, "", n[2]); t[n[2]] = t[n[2]] " " sprintf("%.2f", $3 / 1e6)}
	     END{for (k in t) printf "scan-alone        %-5s host.Scan ms per run (3 runs):%s\n", k, t[k]}'
exit $fail
