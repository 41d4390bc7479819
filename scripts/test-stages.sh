#!/usr/bin/env bash
# test-stages.sh STAGE...: make test's stages, in order, each its own make call; then how long
# each took, so CI's log says what every suite costs on the machine that ran it. The first
# stage that fails ends the run with its exit code, and the table says which one it was.
set -uo pipefail
make=${MAKE:-make}
names=()
times=()
rc=0
failed=
start=$SECONDS
for stage in "$@"; do
  t0=$SECONDS
  "$make" --no-print-directory "$stage" || rc=$?
  names+=("$stage")
  times+=($((SECONDS - t0)))
  if [ "$rc" -ne 0 ]; then
    failed=$stage
    break
  fi
done
echo
echo "make test: seconds per stage"
for i in "${!names[@]}"; do
  printf '  %-14s %5d%s\n' "${names[$i]}" "${times[$i]}" "$([ "${names[$i]}" = "$failed" ] && echo "  FAILED (exit $rc)")"
done
if [ -n "$failed" ]; then
  echo "make test: $failed failed after $((SECONDS - start)) s; ${#names[@]} of $# stages ran"
else
  echo "make test: all $# stages passed in $((SECONDS - start)) s"
fi
exit "$rc"
