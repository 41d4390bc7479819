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
