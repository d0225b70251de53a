#!/bin/bash
# doc_paths.sh -- docs that cannot go stale (make lint):
#
#  1. every repository path the docs name (server/..., client/..., proto/,
#     tests/, conf/, systemd/, debian/, docs/) exists: as written, as a
#     glob that matches, or as what the build makes of a source (a test
#     suite or a bench program from its .c, an object from its .c);
#  2. HACKING.md's "Source files" lists every .c file the Makefile builds
#     into dlockd, libdlock and dlock, and nothing else.
#
# Prints what is wrong and fails; silent when all is well.
set -u
cd "$(dirname "$0")/../.."
docs="README.md HACKING.md docs/*.md proto/PROTOCOL.md"
bad=0

# 1. Paths named in the docs. A path right after a word character, '/' or
# '.' is part of something else (/etc/systemd/system/..., build/tests/...).
# A word with '_' and no '.' after server/ or client/ is a test's name
# (server/ping_and_lock_round_trip), not a path.
for p in $(grep -ohP '(?<![\w/.{-])(server|client|proto|tests|conf|systemd|debian|docs)/[\w.*/-]*[\w*]' $docs | sort -u); do
	case $p in
	*\**)
		# shellcheck disable=SC2086
		compgen -G "$p" > /dev/null || { echo "docs name $p: nothing matches"; bad=1; }
		continue ;;
	esac
	[ -e "$p" ] || [ -e "$p.c" ] || [ -e "${p%.o}.c" ] && continue
	last=${p##*/}
	case $p in
	server/*|client/*) [[ $last == *_* && $last != *.* ]] && continue ;;
	esac
	echo "docs name $p: no such file"
	bad=1
done

# 2. HACKING.md's source map against the Makefile's lists.
db=$(make -s -p -n all 2>/dev/null)
built=$(echo "$db" |
	awk -F' := ' '/^(PROTO_SRC|SERVER_SRC|CLIENT_SRC|CLI_SRC) := /{print $2}' | tr ' ' '\n')
built="$built server/main.c"
built=$(echo $built | tr ' ' '\n' | grep '\.c$' | sort -u)
listed=$(awk '/^## Source files/{on=1; next} /^## /{on=0} on' HACKING.md |
	grep -oE '^- `[^`]+\.c`' | tr -d '`-' | tr -d ' ' | sort -u)
for f in $(comm -23 <(echo "$built") <(echo "$listed")); do
	echo "HACKING.md, Source files: $f is built but not listed"
	bad=1
done
for f in $(comm -13 <(echo "$built") <(echo "$listed")); do
	echo "HACKING.md, Source files: $f is listed but not built"
	bad=1
done
exit $bad
