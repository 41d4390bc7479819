#!/usr/bin/env bash
# Runs Go fuzz targets for a bounded time each: scripts/fuzz.sh FUZZTIME PKG:TARGET...
# Prints one line per target with the inputs it ran. A target fails when the fuzzer wrote a
# failing input to PKG/testdata/fuzz/TARGET/ (commit it with the fix: from then on plain
# `go test` runs it). Go 1.26's coordinator sometimes ends a clean run with "context deadline
# exceeded" at the -fuzztime boundary and writes no input (golang/go#75804, fixed in Go 1.27):
# that is reported as a warning, not a failure.
set -uo pipefail
GO=${GO:-go}
fuzztime=$1
shift
failed=0
for t in "$@"; do
	pkg=${t%%:*} name=${t#*:}
	dir=$pkg/testdata/fuzz/$name
	before=$(ls "$dir" 2>/dev/null | sort)
	out=$("$GO" test -run '^$' -fuzz "^$name\$" -fuzztime "$fuzztime" -fuzzminimizetime 1s "$pkg" 2>&1)
	rc=$?
	execs=$(grep -o 'execs: [0-9]*' <<<"$out" | tail -n 1)
	after=$(ls "$dir" 2>/dev/null | sort)
	if [ $rc -eq 0 ]; then
		echo "$name ($pkg, $fuzztime): ${execs:-execs: ?}"
	elif [ "$before" != "$after" ] || ! grep -q 'context deadline exceeded' <<<"$out"; then
		echo "$out"
		echo "FAIL $name ($pkg): see the input written to $dir"
		failed=1
	else
		echo "$name ($pkg, $fuzztime): ${execs:-execs: ?} (warning: Go's fuzz coordinator ended with 'context deadline exceeded' and no failing input, golang/go#75804)"
	fi
done
exit $failed
