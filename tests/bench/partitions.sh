#!/bin/bash
# SPDX-License-Identifier: MIT
# partitions.sh -- `make bench-partitions`: what partitions cost and what
# they buy, on a Redis Cluster, in one run on this machine. Nothing here
# is a pass/fail test.
#
# A Redis Cluster of 3 primaries, no replicas (tests/scripts/run_cluster.sh,
# appendfsync everysec), node k serving slots [k*16384/3, (k+1)*16384/3).
# The load is tests/bench/bench dlock-pairs (LOCK -> OK GRANTED -> UNLOCK
# -> OK RELEASED, one request in flight per connection), BENCH_CONNS
# connections per load process, names under one tag per partition.
#
# A. The partitioned path's cost: two daemons on the same shard, one
#    without partitions (redis_prefix dlock:{u}:), one the single
#    partition of a map (it routes every request: a slot, a map lookup),
#    the same load alternately, BENCH_REPS runs each: pairs/s and the
#    daemon's CPU per pair (the load generator's --pid).
# B. Scaling: 1, 2 and 3 partitions, partition k's daemon, its shard's
#    primary and its load process pinned to CPU k mod (CPUs) with taskset;
#    the loads run at once, and their pairs/s are summed.
#
# Environment: DLOCKD, BENCH (binaries), OUT (build/bench-partitions),
# BENCH_REPS (3), BENCH_DURATION (3), BENCH_WARMUP (1), BENCH_CONNS (50),
# BENCH_RC_PORT (19300: the cluster's nodes on it and the next two, their
# buses 100 above; below the test suites' ports). The daemons' ports are
# found free (bench freeport).
set -u

top=$(cd "$(dirname "$0")/../.." && pwd)
DLOCKD=${DLOCKD:-$top/build/dlockd}
BENCH=${BENCH:-$top/build/tests/bench/bench}
OUT=${OUT:-$top/build/bench-partitions}
REPS=${BENCH_REPS:-3}
DURATION=${BENCH_DURATION:-3}
WARMUP=${BENCH_WARMUP:-1}
CONNS=${BENCH_CONNS:-50}
RCPORT=${BENCH_RC_PORT:-19300}
NCPU=$(nproc)

die() {
	echo "partitions.sh: $*" >&2
	exit 1
}
for x in "$DLOCKD" "$BENCH"; do
	[ -x "$x" ] || die "$x is missing (make bench-partitions builds it)"
done
command -v taskset >/dev/null || die "taskset missing (util-linux)"

mkdir -p "$OUT" || die "cannot create $OUT"
tmp=$(mktemp -d)
RAW=$OUT/raw.txt
RES=$OUT/results.txt
: > "$RAW"
dpids=()
cleanup() {
	for p in "${dpids[@]}"; do kill "$p" 2>/dev/null; done
	wait 2>/dev/null
	RC_BASE_PORT=$RCPORT sh "$top/tests/scripts/run_cluster.sh" stop \
		"$tmp/rc" >/dev/null 2>&1
	rm -rf "$tmp"
}
trap cleanup EXIT INT TERM

seeds=$(RC_BASE_PORT=$RCPORT RC_FSYNC=everysec \
	sh "$top/tests/scripts/run_cluster.sh" "$tmp/rc" 3 0) ||
	die "the Redis Cluster did not start"
mapfile -t rpids < "$tmp/rc/pids"
mapfile -t ports < <("$BENCH" freeport --count 8)
[ ${#ports[@]} -eq 8 ] || die "no free ports"

slot() { redis-cli -p "$RCPORT" CLUSTER KEYSLOT "$1"; }
# The node (0..2) serving a slot, as run_cluster.sh split them.
node_of() { echo $(($1 * 3 / 16384)); }
# A word whose slot node k serves, not yet taken: "<base><n>".
word_on() {
	local k=$1 base=$2 n=0 w
	while :; do
		w=$base$n
		if [ "$(node_of "$(slot "$w")")" = "$k" ] &&
			! grep -qx "$w" "$tmp/taken" 2>/dev/null; then
			echo "$w" >> "$tmp/taken"
			echo "$w"
			return
		fi
		n=$((n + 1))
	done
}
first_slot() { echo $(($1 * 16384 / 3)); }
last_slot() { echo $((($1 + 1) * 16384 / 3 - 1)); }

ask() { # port request: the first line of the answer
	local line=""
	exec 3<>"/dev/tcp/127.0.0.1/$1" || return 1
	printf '%s\n' "$2" >&3
	read -r -t 10 line <&3
	exec 3>&-
	echo "${line%$'\r'}"
}

# start_daemon <name> <port> <cpu|-> <prefix> [partition id]
start_daemon() {
	local name=$1 port=$2 cpu=$3 prefix=$4 part=${5:-}
	{
		echo "[server]"
		echo "port = $port"
		echo "[limits]"
		echo "max_connections = 10000"
		echo "[persistence]"
		echo "redis = redis-cluster://$seeds"
		echo "redis_prefix = $prefix"
		if [ -n "$part" ]; then
			echo "[partition]"
			echo "id = $part"
		fi
	} > "$tmp/$name.conf"
	if [ "$cpu" = - ]; then
		"$DLOCKD" -c "$tmp/$name.conf" > "$tmp/$name.log" 2>&1 &
	else
		taskset -c "$cpu" "$DLOCKD" -c "$tmp/$name.conf" \
			> "$tmp/$name.log" 2>&1 &
	fi
	dpids+=($!)
	eval "pid_$name=$!"
	"$BENCH" waitport --port "$port" --timeout-ms 20000 > /dev/null ||
		die "dlockd $name did not start: $(tail -3 "$tmp/$name.log")"
}

# The value of key=... in a bench line.
kv() { echo "$2" | tr ' ' '\n' | sed -n "s/^$1=//p"; }

# Until the daemon on port serves a name under {tag}.
served() {
	local i=0
	until ask "$1" "STATUS {$2}probe" | grep -q '^OK STATUS'; do
		i=$((i + 1))
		[ $i -gt 200 ] && die "port $1 does not serve {$2}: $(ask "$1" "STATUS {$2}probe")"
		sleep 0.05
	done
}

echo "partitions.sh: Redis Cluster $seeds (3 primaries, everysec), $NCPU CPUs" | tee "$RES"

# ---- A: the partitioned path's cost ----------------------------------------

u=$(word_on 0 u)
pa=$(word_on 0 a)
tag=$(word_on 0 t)
start_daemon plain "${ports[0]}" - "dlock:{$u}:"
start_daemon part "${ports[1]}" - "pa:" "$pa"
r=$(ask "${ports[1]}" "PARTITION INIT")
[ "$r" = "OK PARTITION epoch=1" ] ||
	die "PARTITION INIT: $r"
served "${ports[1]}" "$tag"

for r in $(seq "$REPS"); do
	for d in plain part; do
		port=${ports[0]}
		[ $d = part ] && port=${ports[1]}
		eval "pid=\$pid_$d"
		line=$("$BENCH" dlock-pairs --port "$port" --conns "$CONNS" \
			--warmup "$WARMUP" --duration "$DURATION" \
			--tag "{$tag}$d$r" --pid "d:$pid") || die "bench failed"
		echo "A $d rep$r $line" >> "$RAW"
	done
done
# medians: pairs/s, and CPU us per pair (cpu_d is cores busy)
summary_a() {
	grep "^A $1 " "$RAW" | while read -r _ _ _ rest; do
		rate=$(kv rate "$rest")
		cpu=$(kv cpu_d "$rest")
		awk -v r="$rate" -v c="$cpu" 'BEGIN { printf "%.1f %.2f\n", r, c * 1e6 / r }'
	done | sort -n | awk '{ a[NR] = $0 } END { print a[int((NR + 1) / 2)] }'
}
read -r rp cp <<< "$(summary_a plain)"
read -r rq cq <<< "$(summary_a part)"
{
	echo
	echo "A. one daemon on one shard, $CONNS connections, median of $REPS (pairs/s, daemon CPU us per pair)"
	printf "  %-34s %10s %10s\n" "" "pairs/s" "CPU us/pair"
	printf "  %-34s %10.0f %10.2f\n" "no partitions" "$rp" "$cp"
	printf "  %-34s %10.0f %10.2f\n" "one partition (every request routed)" "$rq" "$cq"
	awk -v a="$cp" -v b="$cq" -v x="$rp" -v y="$rq" \
		'BEGIN { printf "  partitioned / plain: CPU per pair %.3fx, pairs/s %.3fx\n", b / a, y / x }'
} | tee -a "$RES"
for p in "${dpids[@]}"; do kill "$p" 2>/dev/null; done
wait "${dpids[@]}" 2>/dev/null
dpids=()

# ---- B: scaling with partitions ---------------------------------------------

{
	echo
	echo "B. n partitions, partition k's daemon, its shard's primary and its load on CPU k mod $NCPU, loads at once (pairs/s)"
	printf "  %-4s %12s   %s\n" "n" "total" "per partition"
} | tee -a "$RES"
for k in 0 1 2; do
	taskset -pc $((k % NCPU)) "${rpids[$k]}" > /dev/null
done
for n in 1 2 3; do
	# partition k: its keys and its names on node k
	rm -f "$tmp/taken"
	ids=() tags=()
	for k in $(seq 0 $((n - 1))); do
		ids+=("$(word_on "$k" "n${n}p")")
		tags+=("$(word_on "$k" "n${n}t")")
	done
	for k in $(seq 0 $((n - 1))); do
		start_daemon "b${n}_$k" "${ports[$((2 + k))]}" $((k % NCPU)) \
			"b$n:" "${ids[$k]}"
	done
	base=${ports[2]}
	[ "$(ask "$base" 'PARTITION INIT')" = "OK PARTITION epoch=1" ] ||
		die "PARTITION INIT failed (n=$n)"
	for k in $(seq 1 $((n - 1))); do
		# every daemon puts itself in the map
		i=0
		until printf 'MAP\n' | timeout 2 nc -q 1 127.0.0.1 "$base" |
			grep -q "^part ${ids[$k]} "; do
			i=$((i + 1))
			[ $i -gt 100 ] && die "${ids[$k]} is not in the map"
			sleep 0.1
		done
		r=$(ask "$base" "PARTITION MOVE $(first_slot "$k")-$(last_slot "$k") ${ids[$k]}")
		case "$r" in OK*) ;; *) die "PARTITION MOVE: $r" ;; esac
	done
	for k in $(seq 0 $((n - 1))); do
		served "${ports[$((2 + k))]}" "${tags[$k]}"
	done
	best=""
	for r in $(seq "$REPS"); do
		lpids=()
		for k in $(seq 0 $((n - 1))); do
			eval "pid=\$pid_b${n}_$k"
			taskset -c $((k % NCPU)) "$BENCH" dlock-pairs \
				--port "${ports[$((2 + k))]}" --conns "$CONNS" \
				--warmup "$WARMUP" --duration "$DURATION" \
				--tag "{${tags[$k]}}r$r" --pid "d:$pid" \
				> "$tmp/load$k" &
			lpids+=($!)
		done
		wait "${lpids[@]}"
		total=0 each=""
		for k in $(seq 0 $((n - 1))); do
			line=$(cat "$tmp/load$k")
			echo "B n=$n rep$r part$k $line" >> "$RAW"
			rate=$(kv rate "$line")
			total=$(awk -v a="$total" -v b="$rate" 'BEGIN { print a + b }')
			each="$each $(printf '%.0f' "$rate")"
		done
		echo "B n=$n rep$r total=$total" >> "$RAW"
		echo "$total$each" >> "$tmp/b$n"
	done
	# the median run by total
	med=$(sort -n "$tmp/b$n" | awk '{ a[NR] = $0 } END { print a[int((NR + 1) / 2)] }')
	set -- $med
	t=$1
	shift
	printf "  %-4s %12.0f   %s\n" "$n" "$t" "$*" | tee -a "$RES"
	eval "total_$n=$t"
	for p in "${dpids[@]}"; do kill "$p" 2>/dev/null; done
	wait "${dpids[@]}" 2>/dev/null
	dpids=()
done
awk -v a="$total_1" -v b="$total_2" -v c="$total_3" -v cpus="$NCPU" 'BEGIN {
	printf "  2 partitions / 1: %.2fx; 3 / 1: %.2fx (on %d CPUs)\n", b / a, c / a, cpus
}' | tee -a "$RES"
echo "partitions.sh: raw runs in $RAW, this table in $RES"
