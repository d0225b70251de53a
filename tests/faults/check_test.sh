#!/bin/sh
# SPDX-License-Identifier: MIT
# check_test.sh -- the history checker on hand-written histories: each
# directory of tests/faults/fixtures holds *.hist files and `expect`, the
# number of violations the checker must report, and may hold `forgets`,
# the windows in which Redis was made to forget (check.c).
set -u
: "${CHECK:=build/faults/check}"
dir=$(dirname "$0")/fixtures
fails=0
for d in "$dir"/*/; do
	want=$(cat "$d/expect")
	f=""; [ -f "$d/forgets" ] && f="$d/forgets"
	got=$("$CHECK" "$d" $f | sed -n 's/^violations: //p')
	if [ "$got" = "$want" ]; then
		echo "  ok    $(basename "$d"): $got violation(s)"
	else
		echo "  FAIL  $(basename "$d"): $got violation(s), expected $want"
		"$CHECK" "$d" $f | sed 's/^/        /'
		fails=$((fails + 1))
	fi
done
[ $fails = 0 ] && echo "check_test.sh: the checker judges every fixture right"
exit $fails
