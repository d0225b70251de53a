#!/bin/bash
# shape.sh -- the code's shape, measured the same way each time (HACKING.md,
# "Habits"): production files over 800 lines, functions over 80 lines
# (universal-ctags), and the struct with the most fields with how many
# files name it. Prints; never fails: the numbers are for review.
set -u
cd "$(dirname "$0")/../.."
src=$(ls server/*.[ch] server/locktab/*.[ch] server/store/*.[ch] client/lib/*.[ch] client/cli/*.[ch] proto/*.[ch] 2>/dev/null)

echo "files over 800 lines:"
wc -l $src | awk '$2 != "total" && $1 > 800 {printf "  %5d %s\n", $1, $2}' | sort -rn

echo "functions over 80 lines:"
for f in $src; do
	ctags --c-kinds=f --fields=+ne -o - "$f" 2>/dev/null |
	awk -F'\t' -v f="$f" '{
		l = e = 0
		for (i = 1; i <= NF; i++) {
			if ($i ~ /^line:/) l = substr($i, 6)
			if ($i ~ /^end:/) e = substr($i, 5)
		}
		if (e - l + 1 > 80) printf "  %5d %s %s\n", e - l + 1, f, $1
	}'
done | sort -rn

echo "structs by fields (top 3; members of nested structs count once):"
for f in $src; do
	ctags --c-kinds=m --fields=+S -o - "$f" 2>/dev/null |
	awk -F'\t' '{for (i = 4; i <= NF; i++) if ($i ~ /^struct:/) print substr($i, 8)}'
done | grep -v '::' | sort | uniq -c | sort -rn | head -3 |
while read -r n s; do
	files=$(grep -l "struct $s\b" $src | wc -l)
	echo "  $n fields: struct $s, named in $files files"
done

# The store's state, by file: how many of struct dl_store's own fields
# each file reads or writes (st->field, also through a nested part).
echo "struct dl_store: its own fields each file touches:"
fields=$(ctags --c-kinds=m --fields=+S -o - server/store/store_private.h 2>/dev/null |
	awk -F'\t' '$0 ~ /struct:dl_store($|\t)/ {print $1}' | sort -u)
for f in server/store/*.c; do
	n=0
	for x in $fields; do
		grep -qE "\bst->$x\b" "$f" && n=$((n + 1))
	done
	[ "$n" -gt 0 ] && printf '  %3d %s\n' "$n" "$f"
done | sort -rn
