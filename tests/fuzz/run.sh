#!/bin/bash
# SPDX-License-Identifier: MIT
# run.sh SECONDS -- run every fuzz target (built in build/fuzz) for SECONDS
# each, from a working copy of its seed corpus (tests/fuzz/corpus/<name>;
# the repository's copy is left as it is). Prints executions and coverage;
# exits 1 on a crash (its input is in build/fuzz/<target>-crash-*).
set -u
secs=${1:-60}
here=$(cd "$(dirname "$0")" && pwd)
rc=0
for t in fuzz_proto fuzz_engine fuzz_client; do
	work=build/fuzz/corpus-$t
	mkdir -p "$work"
	cp -n "$here/corpus/${t#fuzz_}"/* "$work"/ 2>/dev/null
	echo "== $t, $secs s"
	"build/fuzz/$t" -max_total_time="$secs" -print_final_stats=1 \
		-artifact_prefix="build/fuzz/$t-" "$work" > "build/fuzz/$t.log" 2>&1
	st=$?
	grep -E '^#[0-9]+[[:space:]]+DONE|^stat::number_of_executed_units|ERROR|SUMMARY|fuzz_(engine|client):' \
		"build/fuzz/$t.log"
	[ $st = 0 ] || { echo "$t: FAILED (build/fuzz/$t.log)"; rc=1; }
done
exit $rc
