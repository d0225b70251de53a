#!/bin/bash
# SPDX-License-Identifier: MIT
# dead.sh -- names #defined in the production sources (server/, client/,
# proto/) that no C source uses: a limit whose code went away leaves a
# constant that still reads like a rule. Prints them; exits 1 if any.
set -u
cd "$(dirname "$0")/../.."
dead=0
for n in $(grep -hoE '^#define [A-Z_][A-Z0-9_]+' server/*.[ch] server/locktab/*.[ch] \
		server/store/*.[ch] client/lib/*.[ch] client/cli/*.[ch] proto/*.[ch] | awk '{print $2}' | sort -u); do
	uses=$(grep -rw --include='*.[ch]' "$n" server client proto tests |
		grep -vc "#define $n\b")
	if [ "$uses" = 0 ]; then
		echo "dead.sh: $n is defined and never used"
		dead=1
	fi
done
exit $dead
