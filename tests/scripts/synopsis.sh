#!/bin/sh
# SPDX-License-Identifier: MIT
# synopsis.sh -- dlock(1)'s SYNOPSIS names, for every command, the options
# that `dlock --help` gives it, no more and no fewer: the page a user reads
# first must not hide --shared, --limit, -E or --json.
set -eu
top=$(cd "$(dirname "$0")/../.." && pwd)
dlock=${DLOCK:-$top/build/dlock}
page=$top/client/cli/dlock.1
fail() { echo "synopsis.sh: FAIL: $*" >&2; exit 1; }
[ -x "$dlock" ] || fail "no $dlock (make all)"

# "<command> <option> <option> ..." per command, options sorted.
opts() { tr ' ' '\n' | grep -E '^-' | LC_ALL=C sort -u | tr '\n' ' '; }

# From --help: the lines "  dlock <command> ..." of the command list.
help=$("$dlock" --help | sed -n 's/^  dlock \([a-z]*\) \(.*\)$/\1 \2/p' |
	grep -v '^help ' | tr '[]|' '   ')
# From the page: the SYNOPSIS, one block per command (.br between them);
# the command is the word after "[options]".
page_syn=$(sed -n '/^\.SH SYNOPSIS/,/^\.SH DESCRIPTION/p' "$page" |
	sed 's/\\-/-/g; s/"//g' | awk '
	/^\.br/ { if (cmd != "") print cmd " " rest; cmd = ""; rest = ""; next }
	/^\.RI \[ options \]/ { want = 1; next }
	want && /^\.B[R]? / { cmd = $2; want = 0; next }
	cmd != "" { $1 = ""; rest = rest " " $0 }
	END { if (cmd != "") print cmd " " rest }' | tr '[]|' '   ')

echo "$help" | while read -r cmd rest; do
	want=$(echo "$rest" | opts)
	line=$(echo "$page_syn" | awk -v c="$cmd" '$1 == c')
	[ -n "$line" ] || fail "dlock $cmd is not in dlock.1's SYNOPSIS"
	got=$(echo "$line" | cut -d' ' -f2- | opts)
	[ "$want" = "$got" ] ||
		fail "dlock $cmd: --help gives [$want], dlock.1's SYNOPSIS [$got]"
done
echo "synopsis.sh: ok: dlock.1's SYNOPSIS has every command's options of dlock --help"
