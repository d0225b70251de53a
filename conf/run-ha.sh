#!/bin/bash
# SPDX-License-Identifier: MIT
# run-ha.sh -- `make run-ha`: the highly available setup on one machine,
# everything on loopback, data under run/ha:
#
#   Redis primary 127.0.0.1:7441, replicas :7442 and :7443 (AOF, fsync
#   always), three Sentinels :27441..27443 watching them as "dlock";
#   dlockd node a on 127.0.0.1:7420 and node b on :7421, both finding the
#   primary through the Sentinels, writes acknowledged by one replica
#   (min_replicas_ack = 1).
#
# Try: dlock --servers 127.0.0.1:7420,127.0.0.1:7421 run job -- sleep 60
# then kill -9 the active dlockd (or the Redis primary) and watch the job
# go on. Ctrl-C stops everything.
set -u
top=$(cd "$(dirname "$0")/.." && pwd)
dir=$top/run/ha
bin=${BUILD:-$top/build}
mkdir -p "$dir"
pids=()

stop() {
	trap - EXIT INT TERM
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done
	wait 2>/dev/null
	echo "make run-ha: stopped (data in run/ha)"
}
trap stop EXIT INT TERM

answers() { redis-cli -p "$1" PING 2>/dev/null | grep -q PONG; }
wait_port() {
	local i=0
	until answers "$1"; do
		i=$((i + 1))
		if [ $i -gt 200 ]; then
			echo "make run-ha: nothing answers on port $1 (logs in run/ha)"
			exit 1
		fi
		sleep 0.05
	done
}

redis() {           # port [replicaof-port]
	mkdir -p "$dir/redis$1"
	redis-server --port "$1" --bind 127.0.0.1 --dir "$dir/redis$1" \
		--appendonly yes --appendfsync always --save "" \
		--repl-diskless-sync-delay 0 \
		${2:+--replicaof 127.0.0.1 "$2"} \
		> "$dir/redis$1.log" 2>&1 &
	pids+=($!)
	wait_port "$1"
}

redis 7441
redis 7442 7441
redis 7443 7441
for p in 27441 27442 27443; do
	# Sentinel rewrites its file: a fresh one for each run, unless the
	# run before left one (then it knows the current primary).
	[ -f "$dir/sentinel$p.conf" ] || cat > "$dir/sentinel$p.conf" <<EOF
port $p
bind 127.0.0.1
dir $dir
sentinel monitor dlock 127.0.0.1 7441 2
sentinel down-after-milliseconds dlock 1000
sentinel failover-timeout dlock 5000
EOF
	redis-sentinel "$dir/sentinel$p.conf" > "$dir/sentinel$p.log" 2>&1 &
	pids+=($!)
	wait_port "$p"
done

url=sentinel://127.0.0.1:27441,127.0.0.1:27442,127.0.0.1:27443/dlock
for n in a b; do
	port=7420
	[ $n = b ] && port=7421
	mkdir -p "$dir/state-$n"
	cat > "$dir/dlockd-$n.conf" <<EOF
[server]
port = $port
[persistence]
redis = $url
min_replicas_ack = 1
state_dir = $dir/state-$n
[cluster]
node_id = $n
advertise = 127.0.0.1:$port
EOF
	# $! must be dlockd's own pid, not a pipe's last command (found by
	# a new user: a TERM to this script left both daemons running)
	"$bin/dlockd" -c "$dir/dlockd-$n.conf" > >(sed -u "s/^/[$n] /") 2>&1 &
	pids+=($!)
	sleep 0.3
done
echo "make run-ha: Redis 7441 (+ replicas 7442 7443), Sentinels 27441-27443,"
echo "make run-ha: dlockd a on 127.0.0.1:7420, b on 127.0.0.1:7421"
echo "make run-ha: try DLOCK_SERVERS=127.0.0.1:7420,127.0.0.1:7421 $bin/dlock stats"
echo "make run-ha: Ctrl-C stops everything"
wait
