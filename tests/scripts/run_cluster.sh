#!/bin/sh
# SPDX-License-Identifier: MIT
# run_cluster.sh -- a Redis Cluster on 127.0.0.1 for a person to try
# dlockd against (the shape of the tests' tests/rcluster.h):
#
#   run_cluster.sh <dir> [primaries=3] [replicas=1]   start it
#   run_cluster.sh stop <dir>                         stop it
#   run_cluster.sh                                    check this script:
#       start a cluster in a temporary directory, stop it (make scripts)
#
# Node i listens on port RC_BASE_PORT+i (default 7100) and its cluster bus
# on RC_BASE_PORT+100+i, with its data, nodes.conf and log in <dir>/node<i>
# (AOF with appendfsync RC_FSYNC, default always; node timeout 1 s). The
# first <primaries> nodes are primaries with the slots split evenly, the
# rest their replicas, as
# `redis-cli --cluster create` arranges them (it wants 3 primaries or
# more; for fewer, the script does by hand what it would). Once every node
# says cluster_state:ok, the seed list (127.0.0.1:7100,127.0.0.1:7101,...)
# is printed on stdout, the only thing printed there; the nodes' PIDs are
# in <dir>/pids. Starting again on a <dir> whose nodes all have a nodes.conf
# restarts that cluster (same ports) instead of creating one.
set -u

BASE=${RC_BASE_PORT:-7100}
FSYNC=${RC_FSYNC:-always} # appendfsync of every node

say() { echo "run_cluster.sh: $*" >&2; }
# A start that fails stops the nodes it started.
starting=""
die() {
	say "$*"
	if [ -n "$starting" ] && [ -f "$starting/pids" ]; then
		d=$starting
		starting=""
		stop "$d" 2>/dev/null
	fi
	exit 1
}

answers() { redis-cli -p "$1" PING 2>/dev/null | grep -q PONG; }

# stop <dir>: TERM every PID of <dir>/pids, wait (10 s) for them to go.
stop() {
	[ -f "$1/pids" ] || die "no $1/pids: nothing to stop"
	pids=$(cat "$1/pids")
	# shellcheck disable=SC2086
	kill $pids 2>/dev/null
	i=0
	for p in $pids; do
		while kill -0 "$p" 2>/dev/null; do
			i=$((i + 1))
			[ $i -gt 200 ] && die "PID $p is still running"
			sleep 0.05
		done
	done
	rm -f "$1/pids"
	say "stopped (data in $1)"
}

# What `redis-cli --cluster create` does, for fewer than the 3 primaries
# it insists on: epochs, slots, CLUSTER MEET, then replica i follows
# primary i % np (as in tests/rcluster.c).
create_by_hand() {
	i=0
	while [ $i -lt $n ]; do
		port=$((BASE + i))
		id=$(redis-cli -p $port CLUSTER MYID) || die "no CLUSTER MYID on $port"
		eval "id_$i=\$id"
		redis-cli -p $port CLUSTER SET-CONFIG-EPOCH $((i + 1)) > /dev/null
		if [ $i -lt "$np" ]; then
			lo=$(((i * 16384 + np - 1) / np))
			hi=$((((i + 1) * 16384 + np - 1) / np - 1))
			redis-cli -p $port CLUSTER ADDSLOTSRANGE $lo $hi | grep -q OK ||
				die "CLUSTER ADDSLOTSRANGE $lo $hi failed on $port"
		fi
		if [ $i -gt 0 ]; then
			redis-cli -p $port CLUSTER MEET 127.0.0.1 "$BASE" \
				$((BASE + 100)) | grep -q OK ||
				die "CLUSTER MEET failed on $port"
		fi
		i=$((i + 1))
	done
	# A replica learns of its primary by gossip: until then, REPLICATE
	# answers "Unknown node".
	i=$np
	while [ $i -lt $n ]; do
		port=$((BASE + i))
		eval "id=\$id_$((i % np))"
		t=0
		until redis-cli -p $port CLUSTER REPLICATE "$id" 2>/dev/null |
			grep -q OK; do
			t=$((t + 1))
			[ $t -gt 400 ] && die "node $port does not follow $id after 20 s"
			sleep 0.05
		done
		i=$((i + 1))
	done
}

# start <dir> <primaries> <replicas>
start() {
	dir=$1 np=$2 nr=$3
	case "$np$nr" in *[!0-9]*) die "primaries and replicas are numbers" ;; esac
	[ "$np" -ge 1 ] || die "at least one primary"
	n=$((np * (1 + nr)))
	[ "$n" -le 100 ] || die "at most 100 nodes"
	command -v redis-server >/dev/null && command -v redis-cli >/dev/null ||
		die "redis-server and redis-cli are needed (make deps)"
	if [ -f "$dir/pids" ]; then
		for p in $(cat "$dir/pids"); do
			kill -0 "$p" 2>/dev/null &&
				die "$dir runs a cluster already (PID $p): run_cluster.sh stop $dir"
		done
	fi
	mkdir -p "$dir" || exit 1
	dir=$(cd "$dir" && pwd)
	: > "$dir/pids"
	starting=$dir
	resume=1
	i=0
	while [ $i -lt $n ]; do
		[ -f "$dir/node$i/nodes.conf" ] || resume=0
		i=$((i + 1))
	done
	seeds="" nodes=""
	i=0
	while [ $i -lt $n ]; do
		port=$((BASE + i))
		answers $port && die "something answers on port $port already"
		mkdir -p "$dir/node$i"
		redis-server --port $port --bind 127.0.0.1 \
			--dir "$dir/node$i" --daemonize no --save "" \
			--appendonly yes --appendfsync "$FSYNC" \
			--cluster-enabled yes --cluster-config-file nodes.conf \
			--cluster-node-timeout 1000 \
			--cluster-port $((BASE + 100 + i)) \
			--cluster-require-full-coverage no \
			--cluster-allow-replica-migration no \
			--cluster-replica-validity-factor 0 \
			--repl-diskless-sync-delay 0 --repl-ping-replica-period 1 \
			< /dev/null > "$dir/node$i/redis.log" 2>&1 &
		echo $! >> "$dir/pids"
		seeds="$seeds${seeds:+,}127.0.0.1:$port"
		nodes="$nodes 127.0.0.1:$port"
		i=$((i + 1))
	done
	for node in $nodes; do
		port=${node#*:}
		t=0
		until answers "$port"; do
			t=$((t + 1))
			[ $t -gt 200 ] && die "nothing answers on port $port (see $dir/node$((port - BASE))/redis.log)"
			sleep 0.05
		done
	done
	if [ $resume = 1 ]; then
		say "$n nodes restarted from their nodes.conf"
	elif [ "$np" -lt 3 ]; then
		create_by_hand
	else
		# shellcheck disable=SC2086
		redis-cli --cluster create $nodes --cluster-replicas "$nr" \
			--cluster-yes > "$dir/create.log" 2>&1 ||
			{ cat "$dir/create.log" >&2; die "redis-cli --cluster create failed"; }
	fi
	for node in $nodes; do
		port=${node#*:}
		t=0
		until redis-cli -p "$port" CLUSTER INFO 2>/dev/null |
			grep -q '^cluster_state:ok'; do
			t=$((t + 1))
			[ $t -gt 400 ] && die "node $node is not cluster_state:ok after 20 s"
			sleep 0.05
		done
	done
	starting=""
	say "$np primaries, $nr replicas each, in $dir (PIDs in $dir/pids); stop: $0 stop $dir"
	echo "$seeds"
}

# No argument: start a cluster of 3 + 3 in a temporary directory, check
# its seed list and shape, stop it.
selftest() {
	tmp=$(mktemp -d "${TMPDIR:-/tmp}/dlockd-rcluster-XXXXXX") || exit 1
	trap '[ -f "$tmp/pids" ] && stop "$tmp" 2>/dev/null; rm -rf "$tmp"' EXIT
	want="127.0.0.1:$BASE"
	i=1
	while [ $i -lt 6 ]; do
		want="$want,127.0.0.1:$((BASE + i))"
		i=$((i + 1))
	done
	seeds=$(start "$tmp" 3 1) || die "FAIL: the cluster did not start"
	[ "$seeds" = "$want" ] || die "FAIL: seeds $seeds, not $want"
	[ "$(wc -l < "$tmp/pids")" -eq 6 ] || die "FAIL: not 6 PIDs in pids"
	masters=$(redis-cli -p "$BASE" CLUSTER NODES | grep -c master)
	slaves=$(redis-cli -p "$BASE" CLUSTER NODES | grep -c slave)
	[ "$masters" = 3 ] && [ "$slaves" = 3 ] ||
		die "FAIL: $masters primaries and $slaves replicas, not 3 and 3"
	redis-cli -c -p "$BASE" SET '{dlock}probe' 1 | grep -q OK ||
		die "FAIL: no SET through the cluster"
	stop "$tmp"
	say "ok"
}

case $# in
0) selftest ;;
*)
	if [ "$1" = stop ]; then
		[ $# = 2 ] || die "usage: $0 stop <dir>"
		stop "$2"
	else
		[ $# -le 3 ] || die "usage: $0 <dir> [primaries=3] [replicas=1]"
		start "$1" "${2:-3}" "${3:-1}"
	fi
	;;
esac
