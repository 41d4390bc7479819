#!/usr/bin/env bash
# Runs every bench/*.sh except itself and lib.sh, then prints the goals they reported and one
# summary table of issue #32's rows (lib.sh: summary), each with its goal and met/MISSED.
# `make bench` calls it. Exit status: non-zero when a bench could not measure; a missed goal is
# reported as MISSED and fails only with BENCH_STRICT=1.
set -uo pipefail
cd "$(dirname "$0")"
. ./lib.sh
status=0
log=$(mktemp)
trap 'rm -f "$log"' EXIT
for b in ./*.sh; do
	case "$(basename "$b")" in run.sh | lib.sh) continue ;; esac
	echo "== bench/$(basename "$b")"
	if ! (cd .. && "bench/$(basename "$b")") 2>&1 | tee -a "$log"; then
		echo "FAIL bench/$(basename "$b")" >&2
		status=1
	fi
done
echo
echo "== goals (ratios are against a peer measured in the same run)"
grep -E '^(GOAL|BENCH)' "$log" || echo "(no goal lines)"
echo
summary "$log"
exit $status
