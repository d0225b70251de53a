#!/bin/sh
# SPDX-License-Identifier: MIT
# bound.sh -- `make bench-bound`: what bounds the durable lock+unlock pairs
# of make bench on a small machine. The pairs scenario (50 connections,
# Redis appendfsync everysec) for dlockd and for the Redis recipe, run
# twice: with the processes where the scheduler puts them, then with the
# servers (dlockd and its Redis; the recipe's Redis) on CPU 0 and the load
# generator on CPU 1. Pinned, each side's servers have one core, and the
# rate is what that core serves: the server CPU per pair decides it. For
# each run: pairs/s, the CPU of each process (1.0 = a core) and the
# servers' CPU per pair. Nothing here is a pass/fail test.
#
# Environment: DLOCKD, BENCH (binaries), BENCH_REPS (3), BENCH_DURATION
# (2), BENCH_CONNS (50). Needs 2 CPUs and taskset for the pinned half.
set -u

top=$(cd "$(dirname "$0")/../.." && pwd)
DLOCKD=${DLOCKD:-$top/build/dlockd}
BENCH=${BENCH:-$top/build/tests/bench/bench}
REPS=${BENCH_REPS:-3}
DURATION=${BENCH_DURATION:-2}
CONNS=${BENCH_CONNS:-50}

die() {
	echo "bound.sh: $*" >&2
	exit 1
}

for x in "$DLOCKD" "$BENCH"; do
	[ -x "$x" ] || die "$x is missing (make bench-bound builds it)"
done
command -v redis-server >/dev/null || die "redis-server missing (make deps)"
pin=1
if [ "$(nproc)" -lt 2 ] || ! command -v taskset >/dev/null; then
	echo "bound.sh: fewer than 2 CPUs or no taskset: unpinned runs only" >&2
	pin=0
fi

tmp=$(mktemp -d "${TMPDIR:-/tmp}/dlockd-bound-XXXXXX") || die "mktemp"
pids=""
cleanup() {
	for p in $pids; do kill "$p" 2>/dev/null; done
	for p in $pids; do wait "$p" 2>/dev/null; done
	rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

rport=$("$BENCH" freeport) || die "no free port"
redis-server --port "$rport" --bind 127.0.0.1 --dir "$tmp" --save "" \
	--appendonly yes --appendfsync everysec --logfile "$tmp/redis.log" \
	--daemonize no </dev/null >/dev/null 2>&1 &
rpid=$!
pids="$pids $rpid"
"$BENCH" waitport --proto redis --port "$rport" --timeout-ms 10000 \
	>/dev/null || die "redis-server did not start"
dport=$("$BENCH" freeport) || die "no free port"
"$DLOCKD" --port "$dport" --persist redis \
	--redis "redis://127.0.0.1:$rport/0" </dev/null 2>"$tmp/dlockd.log" &
dpid=$!
pids="$pids $dpid"
"$BENCH" waitport --port "$dport" --timeout-ms 20000 >/dev/null ||
	die "dlockd did not start: $(tail -3 "$tmp/dlockd.log")"

# pick KEY from a bench result line
val() {
	echo "$2" | tr ' ' '\n' | sed -n "s/^$1=//p"
}

# report LABEL LINE SERVER-KEYS: pairs/s, CPU, server CPU per pair
report() {
	r_rate=$(val rate "$2")
	r_srv=0
	r_cpu=""
	for k in $3 bench; do
		v=$(val "cpu_$k" "$2")
		r_cpu="$r_cpu $k=$v"
		[ "$k" = bench ] ||
			r_srv=$(awk -v a="$r_srv" -v b="$v" 'BEGIN { print a + b }')
	done
	awk -v l="$1" -v r="$r_rate" -v s="$r_srv" -v c="$r_cpu" 'BEGIN {
		printf "%-22s %9.0f pairs/s  cpu%s  servers %.2f us/pair\n",
			l, r, c, (r > 0 ? s * 1e6 / r : 0) }'
}

# run PLACEMENT: REPS runs of each side, alternating
run() {
	pre=""
	if [ "$1" = pinned ]; then
		taskset -apc 0 "$dpid" >/dev/null
		taskset -apc 0 "$rpid" >/dev/null
		pre="taskset -c 1"
	fi
	i=0
	while [ $i -lt "$REPS" ]; do
		l=$($pre "$BENCH" dlock-pairs --port "$dport" --conns "$CONNS" \
			--pid "dlockd:$dpid" --pid "redis:$rpid" \
			--duration "$DURATION" --tag "d$1$i") ||
			die "bench failed"
		report "$1 dlockd" "$l" "dlockd redis"
		l=$($pre "$BENCH" redis-pairs --port "$rport" --conns "$CONNS" \
			--pid "redis:$rpid" --duration "$DURATION" \
			--tag "r$1$i") || die "bench failed"
		report "$1 recipe" "$l" "redis"
		i=$((i + 1))
	done
}

echo "bound.sh: $CONNS connections, appendfsync everysec, $REPS x ${DURATION}s"
run free
[ "$pin" = 1 ] && run pinned
exit 0
