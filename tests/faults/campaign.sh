#!/bin/bash
# SPDX-License-Identifier: MIT
# campaign.sh -- the fault campaign: load, a nemesis, then the checker.
#
# Starts a private redis-server (in a network namespace of its own when
# run as root, so that partitions are possible), dlockd against it, lock
# workers (worker.c, libdlock) and `dlock run` loops whose command records
# that it runs; then, for DURATION seconds, injects faults at random
# moments; then heals everything, stops the load and runs the history
# checker (check.c). Exit status: 0 when the checker found nothing, 1 when
# it found a violation, 2 when the campaign itself could not run.
#
# Environment (defaults in brackets):
#   DLOCKD DLOCK WORKER CHECK  the binaries [build/...]
#   DURATION   seconds of faults [60]
#   SEED       the nemesis's random seed [random; printed, for replay:
#              the same seed gives the same faults at the same moments]
#   WORKERS    lock workers [8]     RUNNERS  dlock run loops [2]
#   PYWORKERS  lock workers on the Python client (pyworker.py, run by
#              $PYTHON [python3]), judged as the others [2]
#   DLOCKD_PYTHON_CLIENT  the Python client pyworker.py imports
#              [client/python of the tree pyworker.py is in]
#   GOWORKERS  lock workers on the Go client ($GOWORKER [build/faults/
#              goworker], tests/faults/goworker), judged as the others [2]
#   JAVAWORKERS  lock workers on the Java client (JavaWorker, in the
#              class directory $JAVAWORKER [build/faults/javaworker], on
#              $DLOCKD_JAR [build/java/dlockd.jar], run by $JAVA [java];
#              tests/faults/javaworker), judged as the others [2]
#   COPYCATS   workers that say worker 0's owner id without its key,
#              through libdlock and by hand in turn (worker raw) [1]
#   MULTIS     multi-lock workers (worker multi: LOCK of two or three of
#              L0.. and M0..M3, by hand), each a new owner every 10 s [2]
#   WORKER_TTLS  the TTLs of the workers' grants, ms [300,800,2000]; the
#              self-test's 5000 makes a lease left held outlive a restart
#   LOCKS      lock names L0.. [3]
#   RWLOCKS    read/write locks S0.. (workers take them shared two times
#              in three) [1]
#   SEMAPHORES semaphores P0.. of 2 permits [1]
#   ELECTIONS  elections E0.. (locks with a value: LOCK value=), one
#              acquisition in four of the C lock workers (worker.c; the
#              Python, Go and Java workers take none) [2]
#   OBSERVERS  followers of the elections (worker observe: they watch
#              E* and read STATUS, and record every value they are told),
#              none without elections [1]
#   MAX_TTL    the daemons' max_ttl [24h, as conf/dlockd.conf ships it]:
#              a closure bounded by max_ttl instead of the lease horizon
#              stalls every lock, and is reported as a stalled closure
#   LOG_LEVEL  the daemons' log level [notice]; info logs each request's
#              connection and every reclaim, for a replay
#   FAULTS     the fault kinds to draw from [all of them, below]
#   CLOCK_STEPS  "both" or "forward" [both]
#   STALL_MS   crash_in_*: ms between stopping Redis (or its traffic) and killing
#              dlockd (dlockd's redis_timeout is 500 ms) [300]
#   OUT        directory for histories and logs [a new /tmp directory]
#   CLUSTER    1: two dlockd (nodes a and b, leadership lease 1 s) that
#              fail over; clients know both [0]
#   PEERS      with CLUSTER: 1 names each node the other's peer ([cluster]
#              peers: a lapsed active asks the other whether it led) [1]
#   REDIS_HA   1: Redis is a primary with two replicas and three Sentinels
#              (quorum 2, down after 1 s); dlockd finds the primary through
#              them and waits for one replica (min_replicas_ack = 1) [0]
#
# Fault kinds:
#   kill9_dlockd    kill -9 dlockd, restart it
#   clock_step      kill -9 dlockd, restart it with its wall clock moved
#                   by 10..60 s (libfaketime), forward or back
#   stop_dlockd     SIGSTOP dlockd for 1..4 s (longer than most TTLs)
#   crash_in_stall  SIGSTOP Redis, kill -9 dlockd 0.3 s later (replies
#                   waiting for Redis die with it), resume both
#   crash_in_partition  drop dlockd's Redis connection, kill -9 dlockd
#                   STALL_MS later, restart it, heal 1..2 s later: writes
#                   on the dead connection arrive after the new one's
#   kill9_redis     kill -9 Redis, restart it (AOF, appendfsync always)
#   stop_redis      SIGSTOP Redis for 0.2..3 s
#   slow_redis      kill -9 Redis, restart it loading for seconds
#                   (--key-load-delay)
#   partition       drop everything from dlockd to Redis for 0.2..3 s
#   partition_conn  drop dlockd's current Redis connection for 1..3 s,
#                   then let its retransmissions through (late writes)
#   kill_worker     kill -9 a lock worker (holding or waiting), start
#                   another in its place
#   kill_run        kill -9 a `dlock run` while its command runs
#   jobctl_run      a `dlock run` of its own, without a terminal or under
#                   script(1) on one, whose command, guard and dlock are
#                   stopped and continued (SIGSTOP/SIGCONT) in a random
#                   order, 2..6 times, each for 0..TTL+1.5 s (job control:
#                   Ctrl-Z, fg, a hung dlock)
# Redis that forgets (the daemons keep a state_dir; max_ttl is MAX_TTL;
# after a detected loss grants are closed until the lease horizon):
#   flushall        FLUSHALL under the running daemon(s)
#   old_copy        copy Redis's AOF, wait 0.5..2.5 s, kill -9 Redis and
#                   restart it from the copy (the last grants lost)
#   empty_redis     kill -9 Redis, restart it with no data at all
#   forget_while_down  kill -9 the active dlockd, then FLUSHALL or an older
#                   copy, then start it again: only its state file knows
#   forget_paused   as forget_while_down (FLUSHALL), with half the lock
#                   workers stopped (SIGSTOP) across it: they still believe
#                   their leases; the others go on asking
#   evict           let Redis evict (maxmemory 2 MB, allkeys-lru) and fill
#                   it; the daemon must refuse, and survive what was
#                   evicted before it noticed; then noeviction again
#   during_resync   drop the daemon's Redis connection (a re-sync follows)
#                   and 0..30 ms later kill -9 dlockd, FLUSHALL, or kill -9
#                   Redis
#   during_takeover (CLUSTER) kill -9 the active and, while the standby
#                   takes over, FLUSHALL, kill -9 the standby, or SIGSTOP it
#   replaced_node   (CLUSTER) a power cut of the whole cluster: kill -9 both
#                   daemons, Redis back from an older copy, kept, or
#                   flushed, one node's state_dir emptied (a replaced
#                   disk); that node starts first, the other 0..3 s later
#                   (0..30 s after a flush: the emptied node waits for it)
#   lossy_failover  (REDIS_HA) SIGSTOP a replica, kill -9 the primary and
#                   the other replica a second later, resume the stopped
#                   one: Sentinel promotes a replica that missed writes
# The lock workers also re-enter their locks and refresh them with other
# TTLs, shorter and longer than the lease's, lead elections (proclaiming
# new values), and ask to be told of waiters one time in three (worker.c).
# With CLUSTER=1 the dlockd faults hit the active daemon (the standby
# takes over, and the old one comes back as a standby), and:
#   kill9_standby   kill -9 the standby, restart it
#   stop_active     SIGSTOP the active for 1..4 s (past its leadership)
#   failover_redis  (REDIS_HA) kill -9 the Redis primary: Sentinel promotes
#                   a replica; the old one comes back as a replica
#   partition_active  drop everything the active sends to Redis for 1..3 s
#                   (the two daemons run as users daemon and nobody; an
#                   nftables rule in this namespace matches the owner)
set -u

here=$(cd "$(dirname "$0")" && pwd)
top=$(cd "$here/../.." && pwd)
: "${DLOCKD:=$top/build/dlockd}" "${DLOCK:=$top/build/dlock}"
: "${WORKER:=$top/build/faults/worker}" "${CHECK:=$top/build/faults/check}"
: "${DURATION:=60}" "${SEED:=$((RANDOM * 32768 + RANDOM))}"
: "${WORKERS:=8}" "${RUNNERS:=2}" "${LOCKS:=3}" "${CLOCK_STEPS:=both}"
: "${RWLOCKS:=1}" "${SEMAPHORES:=1}" "${COPYCATS:=1}" "${MULTIS:=2}"
: "${ELECTIONS:=2}" "${OBSERVERS:=1}"
[ "$ELECTIONS" = 0 ] && OBSERVERS=0
: "${STALL_MS:=300}" "${MAX_TTL:=24h}" "${LOG_LEVEL:=notice}"
: "${PYWORKERS:=2}" "${PYTHON:=python3}"
: "${GOWORKERS:=2}" "${GOWORKER:=$top/build/faults/goworker}"
: "${JAVAWORKERS:=2}" "${JAVA:=java}" "${JAVAWORKER:=$top/build/faults/javaworker}"
: "${DLOCKD_JAR:=$top/build/java/dlockd.jar}"
: "${CLUSTER:=0}" "${REDIS_HA:=0}" "${PEERS:=1}"
if [ "$REDIS_HA" = 1 ] && [ "$CLUSTER" = 1 ]; then
	: "${FAULTS:=failover_redis kill9_dlockd kill9_standby stop_active partition_active clock_step kill_worker kill_run flushall forget_while_down forget_paused during_takeover lossy_failover jobctl_run}"
elif [ "$REDIS_HA" = 1 ]; then
	: "${FAULTS:=failover_redis kill9_dlockd clock_step stop_dlockd kill_worker kill_run flushall forget_while_down forget_paused lossy_failover jobctl_run}"
elif [ "$CLUSTER" = 1 ]; then
	: "${FAULTS:=kill9_dlockd kill9_standby stop_active partition_active clock_step crash_in_stall crash_in_partition kill9_redis stop_redis partition kill_worker kill_run flushall old_copy forget_while_down forget_paused during_resync during_takeover replaced_node jobctl_run}"
else
	: "${FAULTS:=kill9_dlockd clock_step stop_dlockd crash_in_stall crash_in_partition kill9_redis stop_redis slow_redis partition partition_conn kill_worker kill_run flushall old_copy empty_redis forget_while_down forget_paused evict during_resync jobctl_run}"
fi
: "${OUT:=$(mktemp -d /tmp/dlockd-faults-XXXXXX)}"
FAKETIME_LIB=/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1

RANDOM=$SEED
mkdir -p "$OUT/hist" "$OUT/redis"
nemlog=$OUT/nemesis.log
: > "$nemlog"

say() { printf 'faults: %s\n' "$*"; }
die() { say "$*" >&2; cleanup; exit 2; }
now_ms() { local t=${EPOCHREALTIME/./}; echo $((t / 1000)); }
# R = 0 .. $1-1. Never $(...): a subshell would not advance the
# generator, and the same seed must give the same faults.
rnd() { R=$((RANDOM % $1)); }
pause_ms() { [ "$1" -gt 0 ] || return 0; sleep "$(printf '%d.%03d' $(($1 / 1000)) $(($1 % 1000)))"; }

for b in "$DLOCKD" "$DLOCK" "$WORKER" "$CHECK"; do
	[ -x "$b" ] || { say "missing $b (make faults builds it)"; exit 2; }
done
[ "$GOWORKERS" = 0 ] || [ -x "$GOWORKER" ] \
	|| { say "missing $GOWORKER (make faults builds it; GOWORKERS=0 runs without)"; exit 2; }
[ "$JAVAWORKERS" = 0 ] || { [ -f "$JAVAWORKER/JavaWorker.class" ] && [ -f "$DLOCKD_JAR" ]; } \
	|| { say "missing $JAVAWORKER/JavaWorker.class or $DLOCKD_JAR (make faults builds them; JAVAWORKERS=0 runs without)"; exit 2; }
command -v redis-server >/dev/null || { say "redis-server is needed"; exit 2; }
have_script=$(command -v script)  # jobctl_run on a terminal (util-linux)

# ---- the network: a namespace for Redis when we can --------------------------

ns=""
if [ "$(id -u)" = 0 ] && command -v ip >/dev/null && command -v nft >/dev/null; then
	ns=dlf$$
	veth=dlf$$
	a=$((200 + $$ % 50)) b=$((($$ / 50) % 250))
	host=10.$a.$b.1 rip=10.$a.$b.2
	if ! { ip netns add $ns && ip link add $veth type veth peer name ${veth}p &&
		ip link set ${veth}p netns $ns && ip addr add $host/24 dev $veth &&
		ip link set $veth up && ip -n $ns addr add $rip/24 dev ${veth}p &&
		ip -n $ns link set ${veth}p up && ip -n $ns link set lo up &&
		ip netns exec $ns nft add table inet dlf &&
		ip netns exec $ns nft add chain inet dlf in \
			'{ type filter hook input priority 0; }'; } 2>>"$OUT/setup.log"; then
		say "cannot build a network namespace (see $OUT/setup.log); partitions off"
		ip netns del $ns 2>/dev/null
		ns=""
	fi
fi
if [ -z "$ns" ]; then
	rip=127.0.0.1 host=127.0.0.1
	FAULTS=$(echo "$FAULTS" | tr ' ' '\n' | grep -v 'partition' | tr '\n' ' ')
	say "not root, or no ip/nft: Redis on loopback, no partitions"
fi
rport=$((20000 + $$ % 3000 * 3))
[ -n "$ns" ] && rport=6379
rcli() { redis-cli -h "$rip" -p "$rport" "$@" 2>/dev/null; }

# ---- processes --------------------------------------------------------------

redis_pid="" dlockd_pid="" stopping=0
users=() groups=()
declare -a dpid
declare -a worker_pid run_pid

redis_start() {     # [extra redis-server arguments]
	# ip netns exec execs redis-server: $! is Redis itself.
	${ns:+ip netns exec "$ns"} redis-server --port "$rport" --bind "$rip" --dir "$OUT/redis" \
		--appendonly yes --appendfsync always --save "" \
		--daemonize no --protected-mode no \
		--loading-process-events-interval-bytes 1024 "$@" \
		>> "$OUT/redis.log" 2>&1 &
	redis_pid=$!
	local i=0
	until rcli PING | grep -q -e PONG -e LOADING; do
		i=$((i + 1)); [ $i -gt 300 ] && die "redis-server does not start"
		sleep 0.02
	done
}

# REDIS_HA: Redis i listens on hports[i] (0 is the first primary), the
# Sentinels on sports; all in the namespace when there is one.
hports=($rport $((rport + 1)) $((rport + 2)))
sports=($((rport + 20000)) $((rport + 20001)) $((rport + 20002)))
declare -a hpid spid
hcli() { redis-cli -h "$rip" -p "$1" "${@:2}" 2>/dev/null; }
redis_ha_start() {  # i [redis-server arguments]
	local i=$1 n=0
	shift
	mkdir -p "$OUT/redis$i"
	${ns:+ip netns exec "$ns"} redis-server --port "${hports[$i]}" --bind "$rip" \
		--dir "$OUT/redis$i" --appendonly yes --appendfsync always --save "" \
		--daemonize no --protected-mode no --repl-diskless-sync-delay 0 "$@" \
		>> "$OUT/redis$i.log" 2>&1 &
	hpid[$i]=$!
	until hcli "${hports[$i]}" PING | grep -q -e PONG -e LOADING; do
		n=$((n + 1)); [ $n -gt 300 ] && die "redis-server $i does not start"
		sleep 0.02
	done
}
sentinel_start() {  # i
	local n=0
	cat > "$OUT/sentinel$1.conf" <<EOF
port ${sports[$1]}
bind $rip
dir $OUT
protected-mode no
sentinel monitor dm $rip ${hports[0]} 2
sentinel down-after-milliseconds dm 1000
sentinel failover-timeout dm 3000
EOF
	${ns:+ip netns exec "$ns"} redis-sentinel "$OUT/sentinel$1.conf" \
		>> "$OUT/sentinel$1.log" 2>&1 &
	spid[$1]=$!
	until hcli "${sports[$1]}" PING | grep -q PONG; do
		n=$((n + 1)); [ $n -gt 300 ] && die "redis-sentinel $1 does not start"
		sleep 0.02
	done
}
# The port of the primary the Sentinels name now.
primary_port() {
	local k p
	for k in 0 1 2; do
		p=$(hcli "${sports[$k]}" SENTINEL get-master-addr-by-name dm | sed -n 2p)
		[ -n "$p" ] && { echo "$p"; return; }
	done
}

# Node i (0, and 1 with CLUSTER=1) listens on dports[i]; clients are
# given every node ($conn: the dlock options, $servers for the workers).
nodes=1
[ "$CLUSTER" = 1 ] && nodes=2
names=(a b)
# As root, each node runs as a user of its own, so that a rule can cut
# one node off (partition_active); its binary is copied where that user
# can read it.
users=()
dbin=$DLOCKD
# the host's table of this run: campaigns side by side must not delete
# each other's (one name for all did: a finished run's cleanup left the
# other's partition_active faults without their rule)
fht=dlfh$$
if [ -n "$ns" ] && [ "$CLUSTER" = 1 ]; then
	users=(daemon nobody)
	groups=(daemon nogroup)
	chmod 755 "$OUT"
	cp "$DLOCKD" "$OUT/dlockd.bin" && dbin=$OUT/dlockd.bin
	nft add table inet "$fht" 2>>"$OUT/setup.log" &&
		nft add chain inet "$fht" out \
			'{ type filter hook output priority 0; }' 2>>"$OUT/setup.log"
fi
as_user() {         # node: the command prefix that runs as its user
	[ -n "${users[$1]:-}" ] &&
		echo "setpriv --reuid=${users[$1]} --regid=${groups[$1]} --clear-groups"
}
# Below Linux's ephemeral range (32768-60999): a port in it can be taken
# as the source port of some connection while dlockd is down, and its
# restart would find it in use.
dport=$((29000 + $$ % 1800 * 2))
dports=($dport $((dport + 1)))
servers=127.0.0.1:${dports[0]}
conn="--port $dport"
if [ "$nodes" = 2 ]; then
	servers=127.0.0.1:${dports[0]},127.0.0.1:${dports[1]}
	conn="--servers $servers"
fi
for i in 0 1; do
	mkdir -p "$OUT/state$i" && chmod 777 "$OUT/state$i"
	cat > "$OUT/dlockd$i.conf" <<EOF
[server]
bind = 127.0.0.1
port = ${dports[$i]}
log_level = $LOG_LEVEL
[limits]
tick = 10ms
max_ttl = $MAX_TTL
default_ttl = 1s
[persistence]
redis_timeout = 500ms
restore_grace = 2s
state_dir = $OUT/state$i
EOF
	[ "$REDIS_HA" = 1 ] && printf 'min_replicas_ack = 1\n' >> "$OUT/dlockd$i.conf"
	[ "$nodes" = 2 ] && printf '[cluster]\nnode_id = %s\nleader_lease = 1s\n' \
		"${names[$i]}" >> "$OUT/dlockd$i.conf"
	[ "$nodes" = 2 ] && [ "$PEERS" = 1 ] &&
		printf 'peers = %s\n' "${names[$((1 - i))]}" >> "$OUT/dlockd$i.conf"
done

dlockd_start() {    # [node] [clock offset for libfaketime, e.g. +30s]
	local i=${1:-0}
	if [ -n "${2:-}" ]; then
		# libfaketime is loaded by dlockd itself, after setpriv: its
		# semaphore must belong to the user that runs it
		$(as_user "$i") env LD_PRELOAD=$FAKETIME_LIB FAKETIME=$2 \
			FAKETIME_DONT_FAKE_MONOTONIC=1 \
			ASAN_OPTIONS=verify_asan_link_order=0 \
			"$dbin" -c "$OUT/dlockd$i.conf" --persist redis \
			--redis "$redis_url" >> "$OUT/dlockd$i.log" 2>&1 &
	else
		$(as_user "$i") "$dbin" -c "$OUT/dlockd$i.conf" --persist redis \
			--redis "$redis_url" >> "$OUT/dlockd$i.log" 2>&1 &
	fi
	dpid[$i]=$!
	dlockd_pid="${dpid[*]}"
}

# The node that is active now (its STATS say role_active 1), or "".
active_node() {
	local i
	for i in $(seq 0 $((nodes - 1))); do
		if "$DLOCK" --port "${dports[$i]}" --server-timeout 1s stats --raw 2>/dev/null |
				grep -q '^role_active 1'; then
			echo "$i"; return
		fi
	done
}

# ms until the service answers PING again (or 30000 and a note).
wait_dlockd() {
	local t0 i=0
	t0=$(now_ms)
	until "$DLOCK" $conn --server-timeout 1s ping >/dev/null 2>&1; do
		i=$((i + 1))
		if [ $i -gt 1500 ] || [ $(($(now_ms) - t0)) -gt 30000 ]; then
			echo 30000; return
		fi
		sleep 0.02
	done
	echo $(($(now_ms) - t0))
}

# ms until the service can persist again (the active's store_available 1).
wait_store() {
	local t0 i=0
	t0=$(now_ms)
	until "$DLOCK" $conn --server-timeout 1s stats --raw 2>/dev/null |
			grep -q '^store_available 1'; do
		i=$((i + 1))
		if [ $i -gt 1500 ] || [ $(($(now_ms) - t0)) -gt 30000 ]; then
			echo 30000; return
		fi
		sleep 0.02
	done
	echo $(($(now_ms) - t0))
}

gen=0
worker_start() {    # slot
	gen=$((gen + 1))
	local h=127.0.0.1 left=$((DURATION * 1000))
	[ "$nodes" = 2 ] && h=$servers
	# a replacement runs what is left of the campaign, not a whole one
	# (found: one started late under a day-long closure outlived the
	# campaign by 20 minutes, waiting in LOCK)
	[ -n "${t_end:-}" ] && left=$((t_end - $(now_ms)))
	[ "$left" -lt 0 ] && left=0
	"$WORKER" lock "$OUT/hist/w$1.$gen.hist" "$h" "$dport" \
		"w$1.$gen" "$LOCKS:$RWLOCKS:$SEMAPHORES:$ELECTIONS" $((SEED + gen)) $((left + 120000)) \
		2>> "$OUT/workers.log" &
	worker_pid[$1]=$!
	[ "$1" = 0 ] && echo "w0.$gen" > "$OUT/owner0"
}

# The Python client's workers (pyworker.py: the same records as worker.c,
# for the same checker), in slots of their own; the nemesis's draws do
# not count them, so a seed replays the same faults with or without.
declare -a lang_pid  # the Python, Go and Java clients' workers
pyworker_start() {  # slot
	local h=127.0.0.1
	[ "$nodes" = 2 ] && h=$servers
	"$PYTHON" "$here/pyworker.py" lock "$OUT/hist/p$1.hist" "$h" "$dport" \
		"p$1" "$LOCKS:$RWLOCKS:$SEMAPHORES" $((SEED + 5000 + $1)) $(((DURATION + 120) * 1000)) \
		2>> "$OUT/pyworkers.log" &
	lang_pid[$1]=$!
}

# The Go client's workers (tests/faults/goworker: the same arguments and
# records), in slots of their own, not counted by the nemesis either.
goworker_start() {  # slot
	local h=127.0.0.1
	[ "$nodes" = 2 ] && h=$servers
	"$GOWORKER" lock "$OUT/hist/g$1.hist" "$h" "$dport" \
		"g$1" "$LOCKS:$RWLOCKS:$SEMAPHORES" $((SEED + 6000 + $1)) $(((DURATION + 120) * 1000)) \
		2>> "$OUT/goworkers.log" &
	lang_pid[$((PYWORKERS + $1))]=$!
}

# The Java client's workers (tests/faults/javaworker), the same again;
# their histories are v<slot> ("j" is jobctl_run's).
javaworker_start() {  # slot
	local h=127.0.0.1
	[ "$nodes" = 2 ] && h=$servers
	"$JAVA" -cp "$DLOCKD_JAR:$JAVAWORKER" JavaWorker lock "$OUT/hist/v$1.hist" "$h" "$dport" \
		"v$1" "$LOCKS:$RWLOCKS:$SEMAPHORES" $((SEED + 7000 + $1)) $(((DURATION + 120) * 1000)) \
		2>> "$OUT/javaworkers.log" &
	lang_pid[$((PYWORKERS + GOWORKERS + $1))]=$!
}

# Followers of the elections (worker observe), after the other clients'
# workers in lang_pid; not counted by the nemesis either. Their histories
# are o<slot>: an owner that holds nothing.
observer_start() {  # slot
	local h=127.0.0.1
	[ "$nodes" = 2 ] && h=$servers
	"$WORKER" observe "$OUT/hist/o$1.hist" "$h" "$dport" "o$1" \
		"$LOCKS:$RWLOCKS:$SEMAPHORES:$ELECTIONS" $((SEED + 8000 + $1)) \
		$(((DURATION + 120) * 1000)) 2>> "$OUT/observers.log" &
	lang_pid[$((PYWORKERS + GOWORKERS + JAVAWORKERS + $1))]=$!
}

# Copycats: workers that say the owner id of worker slot 0 without its
# key, as two hosts given one DLOCK_OWNER would. The server must refuse
# them while that owner lives (they retry); a copycat let in would share
# the worker's locks, and its history (another file: another owner to
# the checker) would overlap the worker's. Every other run speaks the
# protocol by hand (worker raw): libdlock gives back a grant that another
# process of its id holds (holds=), which hides a shared id from the
# checker -- a client in another language or nc would not.
copycat() {         # slot
	local n=0 h=127.0.0.1 how
	[ "$nodes" = 2 ] && h=$servers
	while [ ! -e "$OUT/stop-runners" ]; do
		n=$((n + 1))
		how=lock; [ $((n % 2)) = 1 ] && [ "$LOCKS" -gt 0 ] && how=raw
		"$WORKER" $how "$OUT/hist/c$1.$n.hist" "$h" "$dport" \
			"$(cat "$OUT/owner0")" "$LOCKS:$RWLOCKS:$SEMAPHORES:$ELECTIONS" \
			$((SEED + 1000 * $1 + n)) 5000 2>> "$OUT/workers.log"
	done
}

# Multi-locks (worker multi): LOCK a b [c] of the exclusive locks,
# tried or waited for, held, released, by hand; a new owner each run.
multi() {           # slot
	local n=0 h=127.0.0.1
	[ "$nodes" = 2 ] && h=$servers
	while [ ! -e "$OUT/stop-runners" ]; do
		n=$((n + 1))
		"$WORKER" multi "$OUT/hist/m$1.$n.hist" "$h" "$dport" \
			"m$1.$n" "$LOCKS:$RWLOCKS:$SEMAPHORES:$ELECTIONS" \
			$((SEED + 9000 + 100 * $1 + n)) 10000 2>> "$OUT/workers.log"
	done
}

# A loop of `dlock run`s; each command records that it runs. Every run is
# a new owner (dlock picks a random id) with a history file of its own.
runner() {          # slot
	local n=0 ttl
	while [ ! -e "$OUT/stop-runners" ]; do
		n=$((n + 1))
		case $((RANDOM % 3)) in 0) ttl=600;; 1) ttl=1500;; *) ttl=4000;; esac
		"$DLOCK" $conn run "L$((RANDOM % LOCKS))" --ttl "${ttl}ms" \
			--wait 2s -- "$WORKER" child "$OUT/hist/r$1.$n.hist" \
			$((RANDOM % 3000)) >> "$OUT/runners.log" 2>&1
		sleep 0.0$((RANDOM % 10))
	done
}

cleanup() {
	[ -n "$ns" ] && ip netns exec "$ns" nft flush chain inet dlf in 2>/dev/null
	for p in $redis_pid ${hpid[*]:-} $dlockd_pid; do kill -CONT "$p" 2>/dev/null; done
	for p in "${worker_pid[@]}" "${run_pid[@]}" "${lang_pid[@]}"; do kill -9 "$p" 2>/dev/null; done
	pkill -9 -f "dlock $conn run" 2>/dev/null
	pkill -9 -f "$OUT/hist/r" 2>/dev/null
	pkill -9 -f "$OUT/hist/c" 2>/dev/null
	for p in $dlockd_pid; do kill -9 "$p" 2>/dev/null; done
	for p in $redis_pid ${hpid[*]:-} ${spid[*]:-}; do kill -9 "$p" 2>/dev/null; done
	wait 2>/dev/null
	[ ${#users[@]} = 2 ] && nft delete table inet "$fht" 2>/dev/null
	if [ -n "$ns" ]; then
		ip link del "$veth" 2>/dev/null
		ip netns del "$ns" 2>/dev/null
	fi
}
trap 'cleanup; exit 2' INT TERM

# ---- faults -----------------------------------------------------------------

declare -A count recov_n recov_sum recov_max
note() {            # kind detail...
	local k=$1; shift
	count[$k]=$((${count[$k]:-0} + 1))
	echo "$(now_ms) $k $*" >> "$nemlog"
}
recovered() {       # kind ms
	echo "$2" >> "$OUT/recovery.$1"
	recov_n[$1]=$((${recov_n[$1]:-0} + 1))
	recov_sum[$1]=$((${recov_sum[$1]:-0} + $2))
	[ "$2" -gt "${recov_max[$1]:-0}" ] && recov_max[$1]=$2
}

redis_url=redis://$rip:$rport/0
[ "$REDIS_HA" = 1 ] &&
	redis_url=sentinel://$rip:${sports[0]},$rip:${sports[1]},$rip:${sports[2]}/dm

# The node a dlockd fault hits: the active one (node 0 alone).
target=0
pick_active() {
	local n
	n=$(active_node)
	target=${n:-0}
}
kill_dlockd() {     # [node]
	local i=${1:-$target}
	kill -9 "${dpid[$i]}" 2>/dev/null; wait "${dpid[$i]}" 2>/dev/null
}
# Late writes Redis refused (FENCED), summed over its restarts (INFO
# errorstats starts again at 0 with each one).
fenced_total=0
fenced_now() {
	local k n t=0
	if [ "$REDIS_HA" = 1 ]; then
		for k in 0 1 2; do
			n=$(hcli "${hports[$k]}" INFO errorstats |
				sed -n 's/^errorstat_FENCED:count=\([0-9]*\).*/\1/p')
			t=$((t + ${n:-0}))
		done
		echo $t
		return
	fi
	rcli INFO errorstats | sed -n 's/^errorstat_FENCED:count=\([0-9]*\).*/\1/p'
}
kill_redis() {
	local n
	n=$(fenced_now); fenced_total=$((fenced_total + ${n:-0}))
	kill -9 "$redis_pid" 2>/dev/null; wait "$redis_pid" 2>/dev/null
}

f_failover_redis() {
	local p i k np ms
	rnd 1000
	p=$(primary_port)
	i=""
	for k in 0 1 2; do [ "${hports[$k]}" = "$p" ] && i=$k; done
	[ -n "$i" ] || return
	kill -9 "${hpid[$i]}" 2>/dev/null; wait "${hpid[$i]}" 2>/dev/null
	ms=$(wait_store)
	np=$(primary_port)
	note failover_redis "primary $p died, now $np"; recovered failover_redis "$ms"
	pause_ms $R
	if [ -n "$np" ] && [ "$np" != "$p" ]; then
		redis_ha_start "$i" --replicaof "$rip" "$np"
	else
		redis_ha_start "$i"
	fi
}
f_kill9_dlockd() {
	local ms
	rnd 1000; pick_active; kill_dlockd
	if [ "$nodes" = 2 ]; then
		# the standby takes over: that is the time to recover
		ms=$(wait_store); pause_ms $R; dlockd_start $target
	else
		pause_ms $R; dlockd_start $target; ms=$(wait_store)
	fi
	note kill9_dlockd "node $target"; recovered kill9_dlockd "$ms"
}
f_kill9_standby() {
	local s
	rnd 1000; pick_active; s=$((1 - target))
	kill_dlockd $s; pause_ms $R; dlockd_start $s
	note kill9_standby "node $s"
}
# While the active is paused or cut off for ms: the ms until the other
# node serves (store_available 1 there), or "" if it did not within ms.
wait_takeover() {   # ms
	local t0 s=$((1 - target))
	t0=$(now_ms)
	while [ $(($(now_ms) - t0)) -lt "$1" ]; do
		if "$DLOCK" --port "${dports[$s]}" --server-timeout 1s stats --raw 2>/dev/null |
				grep -q '^store_available 1'; then
			echo $(($(now_ms) - t0)); return
		fi
		sleep 0.02
	done
}
f_stop_active() {
	local ms t0 took
	rnd 3000; ms=$((1000 + R)); pick_active
	t0=$(now_ms)
	kill -STOP "${dpid[$target]}"; took=$(wait_takeover $ms)
	pause_ms $((ms - ($(now_ms) - t0))); kill -CONT "${dpid[$target]}"
	note stop_active "node $target ${ms}ms took over ${took:--}"
	[ -n "$took" ] && recovered stop_active "$took"
	wait_store > /dev/null
}
f_partition_active() {
	local ms t0 took
	rnd 2000; ms=$((1000 + R)); pick_active
	[ ${#users[@]} = 2 ] || return
	t0=$(now_ms)
	nft add rule inet "$fht" out meta skuid "${users[$target]}" ip daddr "$rip" drop
	took=$(wait_takeover $ms)
	pause_ms $((ms - ($(now_ms) - t0)))
	nft flush chain inet "$fht" out
	note partition_active "node $target ${ms}ms took over ${took:--}"
	[ -n "$took" ] && recovered partition_active "$took"
	wait_store > /dev/null
}
f_clock_step() {
	local s
	rnd 51; s=$((10 + R))
	rnd 2
	if [ "$CLOCK_STEPS" = both ] && [ $R = 1 ]; then s=-$s; else s=+$s; fi
	pick_active; kill_dlockd; dlockd_start $target "${s}s"
	note clock_step "node $target ${s}s"; recovered clock_step "$(wait_dlockd)"
}
f_stop_dlockd() {
	local ms
	rnd 3000; ms=$((1000 + R))
	kill -STOP "${dpid[0]}"; pause_ms $ms; kill -CONT "${dpid[0]}"
	note stop_dlockd "${ms}ms"
}
f_crash_in_stall() {
	pick_active
	kill -STOP "$redis_pid"; pause_ms "$STALL_MS"; kill_dlockd
	kill -CONT "$redis_pid"; dlockd_start $target
	note crash_in_stall; recovered crash_in_stall "$(wait_dlockd)"
}
f_kill9_redis() {
	rnd 2000; kill_redis; pause_ms $R; redis_start
	note kill9_redis; recovered kill9_redis "$(wait_store)"
}
f_stop_redis() {
	local ms
	rnd 2800; ms=$((200 + R))
	kill -STOP "$redis_pid"; pause_ms $ms; kill -CONT "$redis_pid"
	note stop_redis "${ms}ms"; recovered stop_redis "$(wait_store)"
}
f_slow_redis() {
	kill_redis; redis_start --key-load-delay 30
	note slow_redis; recovered slow_redis "$(wait_store)"
}
f_partition() {
	local ms
	rnd 2800; ms=$((200 + R))
	ip netns exec "$ns" nft add rule inet dlf in ip saddr "$host" drop
	pause_ms $ms
	ip netns exec "$ns" nft flush chain inet dlf in
	note partition "${ms}ms"; recovered partition "$(wait_store)"
}
# The source port of the target dlockd's connection to Redis (each
# names its connection dlockd:<node id>).
conn_port() {
	local name=dlockd:${names[$target]}
	[ "$nodes" = 1 ] && name=dlockd:$(hostname):${dports[0]}
	rcli CLIENT LIST | grep " name=$name " |
		grep -o " addr=[0-9.]*:[0-9]*" | sed 's/.*://' | head -1
}
drop_port() {
	ip netns exec "$ns" nft add rule inet dlf in ip saddr "$host" tcp sport "$1" drop
}
f_crash_in_partition() {
	local ms port
	rnd 1000; ms=$((1000 + R))
	pick_active
	port=$(conn_port)
	[ -n "$port" ] || return
	drop_port "$port"; pause_ms "$STALL_MS"; kill_dlockd; dlockd_start $target
	note crash_in_partition "port $port"
	recovered crash_in_partition "$(wait_dlockd)"
	pause_ms $ms
	ip netns exec "$ns" nft flush chain inet dlf in
}
f_partition_conn() {
	local ms port
	rnd 2000; ms=$((1000 + R))
	port=$(conn_port)
	[ -n "$port" ] || return
	drop_port "$port"
	pause_ms $ms
	ip netns exec "$ns" nft flush chain inet dlf in
	note partition_conn "port $port ${ms}ms"; recovered partition_conn "$(wait_store)"
}
f_kill_worker() {
	local i
	rnd "$WORKERS"; i=$R
	kill -9 "${worker_pid[$i]}" 2>/dev/null; wait "${worker_pid[$i]}" 2>/dev/null
	worker_start "$i"
	note kill_worker "slot $i"
}
f_kill_run() {
	local -a ps
	rnd 1000 # drawn whatever happens: the schedule stays the seed's
	mapfile -t ps < <(pgrep -f "dlock $conn run")
	[ ${#ps[@]} -gt 0 ] || return
	kill -9 "${ps[$((R % ${#ps[@]}))]}" 2>/dev/null
	note kill_run
}

# ---- Redis that forgets ----------------------------------------------------------

# The primary's redis-cli (the one Sentinel names with REDIS_HA).
pcli() {
	if [ "$REDIS_HA" = 1 ]; then hcli "$(primary_port)" "$@"; else rcli "$@"; fi
}
# ms until grants are open again on the active node after a loss that
# closed them (0: they were not closed).
wait_open() {
	local t0 v i=0
	t0=$(now_ms)
	while :; do
		v=$("$DLOCK" $conn --server-timeout 1s stats --raw 2>/dev/null |
			sed -n 's/^grants_closed_ms //p')
		[ -n "$v" ] && [ "$v" = 0 ] && break
		i=$((i + 1))
		if [ $i -gt 1500 ]; then
			echo "$(($(now_ms) - t0)) ${v:-?}" >> "$OUT/stalled"
			break
		fi
		sleep 0.02
	done
	echo $(($(now_ms) - t0))
}
f_flushall() {
	pcli FLUSHALL >/dev/null
	note flushall; recovered flushall "$(wait_store)"
}
# Redis restarted from its own data as it was R ms ago.
redis_back_to() {   # ms
	[ "$REDIS_HA" = 1 ] && return 1
	rm -rf "$OUT/redis/snap"
	cp -a "$OUT/redis/appendonlydir" "$OUT/redis/snap" 2>/dev/null || return 1
	pause_ms "$1"
	kill_redis
	rm -rf "$OUT/redis/appendonlydir"
	mv "$OUT/redis/snap" "$OUT/redis/appendonlydir"
	redis_start
}
f_old_copy() {
	rnd 2000
	redis_back_to $((500 + R)) || return
	note old_copy "$((500 + R))ms back"; recovered old_copy "$(wait_store)"
}
f_empty_redis() {
	[ "$REDIS_HA" = 1 ] && return
	kill_redis
	rm -rf "$OUT/redis/appendonlydir"
	redis_start
	note empty_redis; recovered empty_redis "$(wait_store)"
}
# Redis is made to forget now, with no daemon holding its table: leases
# granted before are lost (the checker is told when, check.c).
# A forget is noted as a window (check.c): the time before it, and the
# time after it, once the forgetting command has returned.
forget_begin() { forget_from=$("$WORKER" now); }
forget_end() { echo "$forget_from $("$WORKER" now)" >> "$OUT/forgets"; }
# Redis back from a copy of its AOF taken a second before "$@" (the
# daemons' end) runs: what was written in that second is forgotten, with
# no daemon holding its table (the window noted, check.c).
forget_older_copy() {
	rm -rf "$OUT/redis/snap"
	cp -a "$OUT/redis/appendonlydir" "$OUT/redis/snap"
	pause_ms 1000; "$@"; forget_begin
	kill_redis; rm -rf "$OUT/redis/appendonlydir"
	mv "$OUT/redis/snap" "$OUT/redis/appendonlydir"; redis_start
	forget_end
}
f_forget_while_down() {
	local how ms closed
	rnd 2; pick_active
	if [ $R = 0 ] || [ "$REDIS_HA" = 1 ]; then
		how=flushall
		kill_dlockd; forget_begin; pcli FLUSHALL >/dev/null; forget_end
	else
		how=old_copy
		forget_older_copy kill_dlockd
	fi
	dlockd_start $target
	ms=$(wait_store)
	closed=$(wait_open)
	note forget_while_down "node $target $how closed ${closed}ms"
	recovered forget_while_down "$ms"
	echo "$closed" >> "$OUT/closed.ms"
}
# Redis forgets while the active is down, and half the lock workers are
# stopped across it: holders that are slow or cut off, who still believe
# their leases and hear nothing of the loss. The others go on asking:
# none may get a lock a stopped worker may still believe it holds, so
# grants stay closed until the lease horizon (a planted closure that
# reopens early is caught here: make faults-selftest).
f_forget_paused() {
	local i ms closed half=$((WORKERS / 2))
	rnd 2000; pick_active
	for i in $(seq 0 $((half - 1))); do
		kill -STOP "${worker_pid[$i]}" 2>/dev/null
	done
	kill_dlockd; forget_begin; pcli FLUSHALL >/dev/null; forget_end
	dlockd_start $target
	ms=$(wait_store)
	closed=$(wait_open)
	pause_ms $R
	for i in $(seq 0 $((half - 1))); do
		kill -CONT "${worker_pid[$i]}" 2>/dev/null
	done
	note forget_paused "node $target closed ${closed}ms, $half workers stopped"
	recovered forget_paused "$ms"
	echo "$closed" >> "$OUT/closed.ms"
}
f_evict() {
	[ "$REDIS_HA" = 1 ] && return
	rcli CONFIG SET maxmemory 2mb >/dev/null
	rcli CONFIG SET maxmemory-policy allkeys-lru >/dev/null
	rcli EVAL "for i=1,4000 do redis.call('SET','fill:'..i,string.rep('x',1000)) end" 0 >/dev/null
	pause_ms 1200
	rcli CONFIG SET maxmemory-policy noeviction >/dev/null
	rcli CONFIG SET maxmemory 0 >/dev/null
	rcli EVAL "for _,k in ipairs(redis.call('KEYS','fill:*')) do redis.call('DEL',k) end" 0 >/dev/null
	note evict; recovered evict "$(wait_store)"
}
f_during_resync() {
	local k
	rnd 30; pcli CLIENT KILL TYPE normal >/dev/null; pause_ms $R
	rnd 3; k=$R
	case $k in
	0) pick_active; kill_dlockd; dlockd_start $target ;;
	1) pcli FLUSHALL >/dev/null ;;
	*) [ "$REDIS_HA" = 1 ] || { kill_redis; redis_start; } ;;
	esac
	note during_resync "second fault $k"; recovered during_resync "$(wait_store)"
}
f_during_takeover() {
	local s k
	[ "$nodes" = 2 ] || return
	rnd 1500; pick_active; s=$((1 - target))
	kill_dlockd; pause_ms $((500 + R))
	rnd 3; k=$R
	case $k in
	0) forget_begin; pcli FLUSHALL >/dev/null; forget_end ;;
	1) kill_dlockd $s; dlockd_start $s ;;
	*) kill -STOP "${dpid[$s]}"; pause_ms 1500; kill -CONT "${dpid[$s]}" ;;
	esac
	dlockd_start $target
	note during_takeover "second fault $k"; recovered during_takeover "$(wait_store)"
}
kill_both() { kill_dlockd 0; kill_dlockd 1; }
# Nothing bounds what the emptied node's earlier process told, but its
# peer's state file and Redis's record of the last take: no lease told
# before may be granted again while it may be believed (check.c).
f_replaced_node() {
	local e o ms closed how late
	[ "$nodes" = 2 ] && [ "$REDIS_HA" != 1 ] || return
	rnd 2; e=$R; o=$((1 - e))
	rnd 3
	case $R in
	0) how=old_copy; forget_older_copy kill_both ;;
	1) how=kept; kill_both ;;
	*) how=flushed; kill_both; forget_begin; pcli FLUSHALL >/dev/null; forget_end ;;
	esac
	rm -f "$OUT/state$e"/dlockd*state* "$OUT/state$e/dlockd.lock"
	dlockd_start $e
	if [ $how = flushed ]; then rnd 30000; else rnd 3000; fi
	late=$R; pause_ms $late
	dlockd_start $o
	ms=$(wait_store)
	closed=$(wait_open)
	note replaced_node "node $e emptied, Redis $how, node $o ${late}ms later, closed ${closed}ms"
	recovered replaced_node "$ms"
	echo "$closed" >> "$OUT/closed.ms"
}
f_lossy_failover() {
	local p i k a b ms np t0
	[ "$REDIS_HA" = 1 ] || return
	p=$(primary_port)
	i=""
	for k in 0 1 2; do [ "${hports[$k]}" = "$p" ] && i=$k; done
	[ -n "$i" ] || return
	a=$(((i + 1) % 3)) b=$(((i + 2) % 3))
	kill -STOP "${hpid[$a]}"
	pause_ms 1000
	kill -9 "${hpid[$i]}" "${hpid[$b]}" 2>/dev/null
	wait "${hpid[$i]}" "${hpid[$b]}" 2>/dev/null
	kill -CONT "${hpid[$a]}"
	# Sentinel promotes the survivor; the two killed come back as its
	# replicas at once: with min_replicas_ack = 1 nothing is written
	# until one acknowledges (waiting for the store first measured that
	# wait: 30 s, every time)
	t0=$(now_ms)
	for k in $(seq 1 1000); do
		np=$(primary_port)
		[ -n "$np" ] && [ "$np" != "$p" ] && break
		sleep 0.02
	done
	for k in $i $b; do
		if [ -n "$np" ] && [ "$np" != "${hports[$k]}" ]; then
			redis_ha_start "$k" --replicaof "$rip" "$np"
		else
			redis_ha_start "$k"
		fi
	done
	ms=$(wait_store)
	[ "$ms" = 30000 ] || ms=$(($(now_ms) - t0))
	note lossy_failover "primary $p and replica ${hports[$b]} died, ${hports[$a]} missed writes, now $np"
	recovered lossy_failover "$ms"
}

# jobctl_run: the `dlock run` of one episode runs its command (a worker
# child, recording that it runs, as the runners' do) for longer than the
# whole episode. Its three processes are found by their parent links:
# dlock is what the campaign started or, with a terminal, the child of
# the shell that script(1) runs there (a non-interactive shell, which
# waits for dlock and ignores its stops); the guard is dlock's only child,
# the command the guard's. Every draw is made up front, whatever happens:
# the schedule stays the seed's.
jgen=0
f_jobctl_run() {
	local ttl tty lock hist ms=1000 n k cmd="" guard="" dl="" pid rc i
	local -a who pause targets=(cmd guard dlock)
	local -A proc stopped
	jgen=$((jgen + 1))
	rnd 3; ttl=$((R == 0 ? 600 : R == 1 ? 1000 : 2000))
	rnd 2; tty=$R
	rnd "$LOCKS"; lock=L$R
	rnd 5; n=$((2 + R))
	for ((k = 0; k < n; k++)); do
		rnd 3; who[k]=${targets[R]}
		rnd 10
		if [ $R -lt 4 ]; then rnd 300; pause[k]=$R
		elif [ $R -lt 7 ]; then rnd $((ttl - 300)); pause[k]=$((300 + R))
		else rnd 1500; pause[k]=$((ttl + R)); fi
		ms=$((ms + pause[k]))
	done
	hist=$OUT/hist/j$jgen.hist
	[ "$tty" = 1 ] && [ -z "$have_script" ] && tty=0
	if [ "$tty" = 1 ]; then
		SHELL=/bin/sh script -qec "$DLOCK $conn run $lock --ttl ${ttl}ms --wait 10s -- $WORKER child $hist $ms; exit \$?" \
			/dev/null < /dev/null >> "$OUT/jobctl.log" 2>&1 &
	else
		"$DLOCK" $conn run "$lock" --ttl "${ttl}ms" --wait 10s -- \
			"$WORKER" child "$hist" "$ms" < /dev/null >> "$OUT/jobctl.log" 2>&1 &
	fi
	pid=$!
	for ((i = 0; i < 600; i++)); do
		dl=$pid
		[ "$tty" = 1 ] && dl=$(pgrep -P "$(pgrep -P "$pid" | head -1)" 2>/dev/null | head -1)
		[ -n "$dl" ] && guard=$(pgrep -P "$dl" 2>/dev/null | head -1)
		[ -n "$guard" ] && cmd=$(pgrep -P "$guard" 2>/dev/null | head -1)
		[ -z "$cmd" ] && kill -0 "$pid" 2>/dev/null || break
		sleep 0.02
	done
	# never stop anything else (the campaign itself)
	[ "$(cat "/proc/$dl/comm" 2>/dev/null)" = dlock ] &&
		tr '\0' ' ' < "/proc/$guard/cmdline" 2>/dev/null |
		grep -q '^dlock --run-guard ' || cmd=""
	if [ -n "$cmd" ]; then
		proc=([cmd]=$cmd [guard]=$guard [dlock]=$dl)
		for ((k = 0; k < n; k++)); do
			if [ "${stopped[${who[k]}]:-0}" = 1 ]; then
				kill -CONT "${proc[${who[k]}]}" 2>/dev/null
				stopped[${who[k]}]=0
			else
				kill -STOP "${proc[${who[k]}]}" 2>/dev/null
				stopped[${who[k]}]=1
			fi
			pause_ms "${pause[k]}"
		done
		kill -CONT "$cmd" "$guard" "$dl" 2>/dev/null
	fi
	for ((i = 0; i < 1000; i++)); do
		kill -0 "$pid" 2>/dev/null || break
		sleep 0.02
	done
	kill -0 "$pid" 2>/dev/null && kill -9 "$pid" "$dl" 2>/dev/null
	wait "$pid" 2>/dev/null
	rc=$?
	[ $i -lt 1000 ] || rc="$rc (did not end: killed)"
	[ -n "$cmd" ] || rc="$rc (never ran)"
	note jobctl_run "j$jgen tty $tty ttl $ttl $(for ((k = 0; k < n; k++)); do printf '%s/%s ' "${who[k]}" "${pause[k]}"; done)exit $rc"
}

# ---- the campaign -------------------------------------------------------------

say "seed $SEED, ${DURATION} s, $WORKERS workers, $RUNNERS dlock-run loops, locks L0..L$((LOCKS - 1)) + $RWLOCKS read/write + $SEMAPHORES semaphores + $ELECTIONS elections ($OBSERVERS observers), $nodes dlockd, out $OUT"
say "replay: SEED=$SEED DURATION=$DURATION make faults"
if [ "$REDIS_HA" = 1 ]; then
	redis_ha_start 0
	redis_ha_start 1 --replicaof "$rip" "${hports[0]}"
	redis_ha_start 2 --replicaof "$rip" "${hports[0]}"
	for k in 0 1 2; do sentinel_start $k; done
	redis_pid="${hpid[*]} ${spid[*]}"
	sleep 1
else
	redis_start
	# Keys for a slow load: with --key-load-delay 30, loading takes seconds.
	rcli EVAL "for i=1,20000 do redis.call('SET','pad:'..i,'x') end" 0 >/dev/null
	rcli BGREWRITEAOF >/dev/null
fi
# A cluster's nodes start together: a first start waits for its peers
# (it cannot tell a first start from a Redis that lost everything).
dlockd_start 0
[ "$nodes" = 2 ] && dlockd_start 1
[ "$(wait_dlockd)" -lt 30000 ] || die "dlockd does not start (see $OUT/dlockd0.log)"
[ "$nodes" = 2 ] && sleep 0.5
for i in $(seq 0 $((WORKERS - 1))); do worker_start "$i"; done
for i in $(seq 0 $((PYWORKERS - 1))); do pyworker_start "$i"; done
for i in $(seq 0 $((GOWORKERS - 1))); do goworker_start "$i"; done
for i in $(seq 0 $((JAVAWORKERS - 1))); do javaworker_start "$i"; done
for i in $(seq 0 $((OBSERVERS - 1))); do observer_start "$i"; done
for i in $(seq 0 $((RUNNERS - 1))); do
	runner "$i" 2>/dev/null & run_pid[$i]=$!
done
for i in $(seq 1 "$COPYCATS"); do
	copycat "$i" 2>/dev/null & run_pid[$((RUNNERS + i))]=$!
done
for i in $(seq 1 "$MULTIS"); do
	multi "$i" 2>/dev/null & run_pid[$((RUNNERS + COPYCATS + i))]=$!
done

read -r -a kinds <<< "$FAULTS"
t_end=$(($(now_ms) + DURATION * 1000))
while [ "$(now_ms)" -lt "$t_end" ]; do
	rnd 2500; pause_ms $((500 + R))
	rnd ${#kinds[@]}; "f_${kinds[$R]}"
done

# ---- heal, settle, stop, check --------------------------------------------------

[ -n "$ns" ] && ip netns exec "$ns" nft flush chain inet dlf in
kill -CONT $redis_pid $dlockd_pid 2>/dev/null
if [ "$REDIS_HA" = 1 ]; then
	for k in 0 1 2; do
		kill -0 "${hpid[$k]}" 2>/dev/null || redis_ha_start $k --replicaof "$rip" "$(primary_port)"
	done
else
	kill -0 "$redis_pid" 2>/dev/null || redis_start
fi
for i in $(seq 0 $((nodes - 1))); do
	kill -0 "${dpid[$i]}" 2>/dev/null || dlockd_start "$i"
done
wait_store > /dev/null
sleep 2
touch "$OUT/stop-runners"
for p in "${worker_pid[@]}" "${lang_pid[@]}"; do kill -TERM "$p" 2>/dev/null; done
for p in "${worker_pid[@]}" "${run_pid[@]}" "${lang_pid[@]}"; do wait "$p" 2>/dev/null; done
# A client's workers that recorded nothing did not run (a missing
# module, a bad path): a campaign without them proves less than it says.
for k in "p:$PYWORKERS:pyworkers" "g:$GOWORKERS:goworkers" "v:$JAVAWORKERS:javaworkers" "o:$OBSERVERS:observers"; do
	IFS=: read -r p n log <<< "$k"
	for i in $(seq 0 $((n - 1))); do
		[ -s "$OUT/hist/$p$i.hist" ] || die "worker $p$i recorded nothing (see $OUT/$log.log)"
	done
done
# Commands of killed `dlock run`s that were never stopped run out by
# themselves (at most 3 s); their records are part of the history.
sleep 3
for p in $dlockd_pid; do kill -TERM "$p" 2>/dev/null; wait "$p" 2>/dev/null; done
dlockd_pid=""

total=0
for k in "${!count[@]}"; do total=$((total + count[$k])); done
say "faults injected: $total"
for k in $(echo "${!count[@]}" | tr ' ' '\n' | sort); do
	line="  $k: ${count[$k]}"
	if [ "${recov_n[$k]:-0}" -gt 0 ]; then
		p50=$(sort -n "$OUT/recovery.$k" | awk '{v[NR]=$1} END {print v[int((NR+1)/2)]}')
		line="$line, back in p50 $p50 ms, avg $((recov_sum[$k] / recov_n[$k])) ms, max ${recov_max[$k]} ms"
	fi
	echo "$line"
done
fenced=$(fenced_now)
say "late writes refused by the fence: $((fenced_total + ${fenced:-0}))"
say "Redis found gone back (WENT BACK in the daemons' logs): $(cat "$OUT"/dlockd*.log | grep -c 'WENT BACK')"
say "leases reclaimed after a loss (RECLAIMED in the daemons' logs): $(cat "$OUT"/dlockd*.log | grep -c 'RECLAIMED')"
if [ -s "$OUT/closed.ms" ]; then
	say "grants closed after a loss the daemon found: $(sort -n "$OUT/closed.ms" | tr '\n' ' ')ms (p50 $(sort -n "$OUT/closed.ms" | awk '{v[NR]=$1} END {print v[int((NR+1)/2)]}') ms, max $(sort -n "$OUT/closed.ms" | tail -1) ms)"
fi
if [ -s "$OUT/stalled" ]; then
	say "STALLED closures (still closed after the wait; ms waited, grants_closed_ms left): $(tr '\n' ';' < "$OUT/stalled")"
fi
"$CHECK" "$OUT/hist" "$OUT/forgets"
rc=$?
cleanup
[ $rc = 0 ] && say "no violation (seed $SEED)" || say "VIOLATIONS found (seed $SEED; histories in $OUT)"
exit $rc
