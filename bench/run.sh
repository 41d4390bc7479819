#!/usr/bin/env bash
# Runs every bench/*.sh except itself; fails if any of them fails. `make bench` calls it.
set -uo pipefail
cd "$(dirname "$0")"
status=0
for b in ./*.sh; do
	[ "$(basename "$b")" = run.sh ] && continue
	echo "== bench/$(basename "$b")"
	if ! "$b"; then
		echo "FAIL bench/$(basename "$b")" >&2
		status=1
	fi
done
exit $status
