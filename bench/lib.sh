# Shared by bench/*.sh. Speed is measured, not asserted: a missed goal is reported, not a
# failure, unless BENCH_STRICT=1. A bench fails (non-zero) only when it cannot measure.

# goal NAME VALUE OP TARGET: prints "GOAL NAME: VALUE (goal OP TARGET) met|MISSED" and, with
# BENCH_STRICT=1, returns 1 when missed. OP is <= or >=.
goal() {
	local name=$1 value=$2 op=$3 target=$4 verdict
	if awk -v v="$value" -v t="$target" -v op="$op" 'BEGIN { exit !((op == "<=" && v <= t) || (op == ">=" && v >= t)) }'; then
		verdict=met
	else
		verdict=MISSED
	fi
	echo "GOAL $name: $value (goal $op $target) $verdict"
	[ "$verdict" = met ] || [ -z "${BENCH_STRICT:-}" ]
}

# installed SRC DIR: installs SRC into DIR with install(1), as `make install` and the .deb put
# binaries on a host, and prints the new path. Every binary a bench starts is measured that
# way, its peers too: the Go linker writes its output through mmap, and a binary started
# straight from the linker's output ran ~18% more CPU here (vgpu-host --version; ~7% for a
# bare hello world) than the same bytes written by install(1), until the page cache dropped it
# (Linux 6.18, 300 alternated runs).
installed() {
	install -m 0755 "$1" "$2/" && echo "$2/$(basename "$1")"
}
