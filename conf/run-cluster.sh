#!/bin/bash
# SPDX-License-Identifier: MIT
# run-cluster.sh -- `make run-cluster`: a partitioned lock service on one
# machine, everything on loopback, data under run/cluster:
#
#   a Redis Cluster of 3 primaries and 3 replicas on 127.0.0.1:7100-7105
#   (tests/scripts/run_cluster.sh; AOF, fsync always);
#   3 partitions p0, p1, p2, each an active and a standby dlockd:
#   p0 on 127.0.0.1:7400 and :7401, p1 on :7410 and :7411, p2 on :7420
#   and :7421; the partition map gives each a third of the slots.
#
# Try: nc 127.0.0.1 7400, then LOCK foo (NO MOVED says where foo lives),
# MAP. Ctrl-C stops everything.
set -u
top=$(cd "$(dirname "$0")/.." && pwd)
dir=$top/run/cluster
bin=${BUILD:-$top/build}
mkdir -p "$dir"
pids=()

stop() {
	trap - EXIT INT TERM
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done
	wait 2>/dev/null
	RC_BASE_PORT=7100 sh "$top/tests/scripts/run_cluster.sh" stop \
		"$dir/redis" >/dev/null 2>&1
	echo "make run-cluster: stopped (data in run/cluster)"
}
trap stop EXIT INT TERM

seeds=$(RC_BASE_PORT=7100 sh "$top/tests/scripts/run_cluster.sh" \
	"$dir/redis" 3 1) || exit 1

ask() { # port request: the first line of the answer
	local line=""
	exec 3<>"/dev/tcp/127.0.0.1/$1" || return 1
	printf '%s\n' "$2" >&3
	read -r -t 5 line <&3
	exec 3>&-
	echo "${line%$'\r'}"
}
wait_up() {
	local i=0
	until ask "$1" PING 2>/dev/null | grep -q PONG; do
		i=$((i + 1))
		if [ $i -gt 200 ]; then
			echo "make run-cluster: dlockd on $1 does not answer (logs in run/cluster)"
			exit 1
		fi
		sleep 0.05
	done
}

for p in 0 1 2; do
	for n in a b; do
		port=$((7400 + 10 * p))
		[ $n = b ] && port=$((port + 1))
		mkdir -p "$dir/state-p$p$n"
		{
			echo "[server]"
			echo "port = $port"
			echo "[persistence]"
			echo "redis = redis-cluster://$seeds"
			echo "redis_prefix = dlock:"
			echo "state_dir = $dir/state-p$p$n"
			echo "[cluster]"
			echo "node_id = p$p$n"
			echo "advertise = 127.0.0.1:$port"
			echo "[partition]"
			echo "id = p$p"
		} > "$dir/dlockd-p$p$n.conf"
		"$bin/dlockd" -c "$dir/dlockd-p$p$n.conf" \
			> >(sed -u "s/^/[p$p$n] /" >> "$dir/dlockd.log") 2>&1 &
		pids+=($!)
		wait_up "$port"
	done
done

# The map: made once (a restart keeps the one in Redis), then p0 gives
# p1 and p2 their thirds.
in_map() { # port partition: the daemon's map names the partition
	local i=0
	until printf 'MAP\n' | timeout 2 nc -q 1 127.0.0.1 "$1" | grep -q "^part $2 "; do
		i=$((i + 1))
		[ $i -gt 100 ] && return 1
		sleep 0.1
	done
}
if ask 7400 "PARTITION INIT" | grep -q '^OK'; then
	in_map 7400 p1 && ask 7400 "PARTITION MOVE 5461-10922 p1"
	in_map 7400 p2 && ask 7400 "PARTITION MOVE 10923-16383 p2"
fi
echo "make run-cluster: Redis Cluster $seeds"
echo "make run-cluster: p0 on 127.0.0.1:7400 (+ standby 7401), p1 on 7410 (7411), p2 on 7420 (7421)"
echo "make run-cluster: logs in run/cluster/dlockd.log; try: nc 127.0.0.1 7400, then MAP, LOCK foo"
echo "make run-cluster: Ctrl-C stops everything"
wait
