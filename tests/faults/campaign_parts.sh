#!/bin/bash
# SPDX-License-Identifier: MIT
# campaign_parts.sh -- the fault campaign on a partitioned service: load,
# a nemesis, then the checker (check.c), as campaign.sh, on
#
#   a Redis Cluster of 3 primaries and 3 replicas (tests/scripts/
#   run_cluster.sh: AOF, fsync always, node timeout 1 s), and
#   3 partitions p0 p1 p2, each an active and a standby dlockd that name
#   each other as peers (leadership lease 1 s), the map giving each a
#   third of the slots.
#
# The lock workers (worker.c on libdlock) take L0.. (spread over the three
# partitions), S0.. and P0.., each given only the two daemons of ONE
# partition (worker i: partition i mod 3): every other name they reach
# through the map and NO MOVED, and through the map again after a move.
# Exit status: 0 when the checker found nothing, 1 for a violation, 2 when
# the campaign could not run.
#
# Environment (defaults in brackets):
#   DLOCKD DLOCK WORKER CHECK  the binaries [build/...]
#   DURATION  seconds of faults [60]     SEED  the nemesis's seed [random]
#   WORKERS   lock workers [6]           LOCKS  names L0.. [6]
#   RWLOCKS   read/write locks S0.. [1]  SEMAPHORES  P0.. of 2 permits [1]
#   WORKER_TTLS  their grants' TTLs, ms [300,800,2000]
#   MAX_TTL   the daemons' max_ttl [10s]   OUT  [a new /tmp directory]
#   RC_BASE_PORT  the cluster's first port [a free one below 20000]
#   FAULTS    the kinds to draw from [all below]
#
# Fault kinds:
#   kill9_active    kill -9 a partition's active daemon, restart it (its
#                   standby takes over; it comes back as the standby)
#   stop_active     SIGSTOP a partition's active for 1..4 s
#   kill9_standby   kill -9 a partition's standby, restart it
#   kill9_primary   kill -9 a Redis primary; the cluster promotes its
#                   replica; the old one is restarted 1..3 s later and
#                   rejoins as a replica
#   failover_shard  CLUSTER FAILOVER on a replica (a planned fail-over)
#   migrate_slot    the slot of a partition's keys (or of the map) to
#                   another primary, 3 keys a batch, 0..100 ms apart
#   move_slots      PARTITION MOVE, on the giver's active, of 1..2000
#                   slots of one partition to another, or (half the
#                   time) of the slot of a name the workers use: its
#                   leases and waiters go along (refused while the last
#                   move's locks are not imported, or the giver is down)
#   kill_worker     kill -9 a lock worker, start another in its place
set -u

here=$(cd "$(dirname "$0")" && pwd)
top=$(cd "$here/../.." && pwd)
: "${DLOCKD:=$top/build/dlockd}" "${DLOCK:=$top/build/dlock}"
: "${WORKER:=$top/build/faults/worker}" "${CHECK:=$top/build/faults/check}"
: "${DURATION:=60}" "${SEED:=$((RANDOM * 32768 + RANDOM))}"
: "${WORKERS:=6}" "${LOCKS:=6}" "${RWLOCKS:=1}" "${SEMAPHORES:=1}"
: "${MAX_TTL:=10s}"
: "${FAULTS:=kill9_active stop_active kill9_standby kill9_primary failover_shard migrate_slot move_slots kill_worker}"
: "${OUT:=$(mktemp -d /tmp/dlockd-parts-XXXXXX)}"
: "${RC_BASE_PORT:=$((12000 + $$ % 700 * 10))}"
export WORKER_TTLS

RANDOM=$SEED
mkdir -p "$OUT/hist"
nemlog=$OUT/nemesis.log
: > "$nemlog"
: > "$OUT/forgets"

say() { printf 'faults: %s\n' "$*"; }
now_ms() { local t=${EPOCHREALTIME/./}; echo $((t / 1000)); }
rnd() { R=$((RANDOM % $1)); }
pause_ms() { [ "$1" -gt 0 ] || return 0; sleep "$(printf '%d.%03d' $(($1 / 1000)) $(($1 % 1000)))"; }

for b in "$DLOCKD" "$DLOCK" "$WORKER" "$CHECK"; do
	[ -x "$b" ] || { say "missing $b (make faults builds it)"; exit 2; }
done

# ---- the Redis Cluster ---------------------------------------------------------

rc=$OUT/rc
rcs() { RC_BASE_PORT=$RC_BASE_PORT sh "$top/tests/scripts/run_cluster.sh" "$@"; }
seeds=$(rcs "$rc" 3 1 2>> "$OUT/setup.log") || { say "no Redis Cluster (see $OUT/setup.log)"; exit 2; }
rport() { echo $((RC_BASE_PORT + $1)); }
mapfile -t rpid < "$rc/pids"
rcli() { redis-cli -p "$(rport "$1")" "${@:2}" 2>/dev/null; }
live_node() { # a node that answers
	local k
	for k in 0 1 2 3 4 5; do
		rcli "$k" PING | grep -q PONG && { echo "$k"; return; }
	done
}
keyslot() { rcli "$(live_node)" CLUSTER KEYSLOT "$1"; }
# The node serving slot $1 as primary now, per a live node's CLUSTER NODES.
primary_of() {
	rcli "$(live_node)" CLUSTER NODES |
		awk -v s="$1" -v base="$RC_BASE_PORT" '$3 ~ /master/ && $3 !~ /fail/ {
			for (i = 9; i <= NF; i++) {
				if ($i ~ /^\[/) continue
				n = split($i, r, "-")
				lo = r[1]; hi = (n == 2 ? r[2] : r[1])
				if (s + 0 >= lo + 0 && s + 0 <= hi + 0) {
					split($2, a, "[:@]"); print a[2] - base; exit
				}
			}
		}'
}
node_id() { rcli "$1" CLUSTER MYID; }
rnode_restart() { # k: node k again, its data and nodes.conf kept
	(cd "$rc/node$1" && exec redis-server --port "$(rport "$1")" \
		--bind 127.0.0.1 --dir "$rc/node$1" --daemonize no --save "" \
		--appendonly yes --appendfsync always \
		--cluster-enabled yes --cluster-config-file nodes.conf \
		--cluster-node-timeout 1000 \
		--cluster-port $((RC_BASE_PORT + 100 + $1)) \
		--cluster-require-full-coverage no \
		--cluster-allow-replica-migration no \
		--cluster-replica-validity-factor 0 \
		--repl-diskless-sync-delay 0 --repl-ping-replica-period 1) \
		< /dev/null >> "$rc/node$1/redis.log" 2>&1 &
	rpid[$1]=$!
	echo "${rpid[$1]}" > "$OUT/rpid$1"
}

# ---- the daemons ---------------------------------------------------------------

dbase=$((RC_BASE_PORT + 300))
dport() { echo $((dbase + 10 * $1 + $2)); } # partition node(0 a, 1 b)
declare -a dpid # index 2 * partition + node
for p in 0 1 2; do
	for n in 0 1; do
		i=$((2 * p + n))
		mkdir -p "$OUT/state$i"
		cat > "$OUT/dlockd$i.conf" <<EOF
[server]
bind = 127.0.0.1
port = $(dport $p $n)
[limits]
tick = 10ms
max_ttl = $MAX_TTL
default_ttl = 1s
[persistence]
redis = redis-cluster://$seeds
redis_prefix = dlf:
redis_timeout = 500ms
restore_grace = 2s
state_dir = $OUT/state$i
[cluster]
node_id = p$p$n
advertise = 127.0.0.1:$(dport $p $n)
leader_lease = 1s
peers = p$p$((1 - n))
[partition]
id = p$p
EOF
	done
done
dlockd_start() { # i
	"$DLOCKD" -c "$OUT/dlockd$1.conf" >> "$OUT/dlockd$1.log" 2>&1 &
	dpid[$1]=$!
}
ask() { # port request: the first line of the answer
	local line=""
	exec 3<>"/dev/tcp/127.0.0.1/$1" 2>/dev/null || return 1
	printf '%s\n' "$2" >&3
	read -r -t 5 line <&3
	exec 3>&-
	echo "${line%$'\r'}"
}
# The first slot of partition $2's first range, as the daemon on port $1
# tells its map ("" when it serves none).
first_slot_of() {
	local line n k want="slots p$2 "
	exec 3<>"/dev/tcp/127.0.0.1/$1" 2>/dev/null || return 1
	printf 'MAP\n' >&3
	read -r -t 5 line <&3
	n=$(echo "${line%$'\r'}" | awk '{ print $4 }')
	for k in $(seq 1 "${n:-0}"); do
		read -r -t 5 line <&3 || break
		line=${line%$'\r'}
		case "$line" in "$want"*) echo "${line#"$want"}" ;; esac
	done | head -1 | cut -d, -f1 | cut -d- -f1
	exec 3>&-
}
# The daemon (index) that is partition p's active now, or "".
active_of() {
	local n
	for n in 0 1; do
		ask "$(dport "$1" $n)" "HELLO" 2>/dev/null | grep -q ' role=active ' &&
			{ echo $((2 * $1 + n)); return; }
	done
}
servers_of() { echo "127.0.0.1:$(dport "$1" 0),127.0.0.1:$(dport "$1" 1)"; }

cleanup() {
	local k
	for p in "${dpid[@]}" ${rpid[*]}; do kill -CONT "$p" 2>/dev/null; done
	for p in "${worker_pid[@]}"; do kill -9 "$p" 2>/dev/null; done
	for p in "${dpid[@]}"; do kill -9 "$p" 2>/dev/null; done
	# the nodes restarted by the nemesis are this shell's children: every
	# child gone before the wait below, which would wait for it for ever
	for k in 0 1 2 3 4 5; do
		[ -f "$OUT/rpid$k" ] && kill -9 "$(cat "$OUT/rpid$k")" 2>/dev/null
	done
	pkill -9 -P $$ 2>/dev/null
	wait 2>/dev/null
	rcs stop "$rc" >/dev/null 2>&1
}
die() { say "$*" >&2; cleanup; exit 2; }
trap 'cleanup; exit 2' INT TERM

for i in 0 1 2 3 4 5; do dlockd_start "$i"; done
n=0
until [ -n "$(active_of 0)" ] && [ -n "$(active_of 1)" ] && [ -n "$(active_of 2)" ]; do
	n=$((n + 1)); [ $n -gt 300 ] && die "the daemons do not start (see $OUT/dlockd*.log)"
	sleep 0.05
done
a0=$(active_of 0)
r=$(ask "$(dport 0 $((a0 % 2)))" "PARTITION INIT")
case "$r" in OK*) ;; *) die "PARTITION INIT: $r" ;; esac
for p in 1 2; do
	n=0 # its daemons add it to the map
	until printf 'MAP\n' | timeout 2 nc -q 1 127.0.0.1 "$(dport 0 $((a0 % 2)))" |
		grep -q "^part p$p "; do
		n=$((n + 1)); [ $n -gt 100 ] && die "p$p is not in the map"
		sleep 0.1
	done
	r=$(ask "$(dport 0 $((a0 % 2)))" "PARTITION MOVE $((p * 16384 / 3))-$(((p + 1) * 16384 / 3 - 1)) p$p")
	case "$r" in OK*) ;; *) die "PARTITION MOVE: $r" ;; esac
done
sleep 1.2 # every daemon reads the map

# ---- load -----------------------------------------------------------------------

declare -a worker_pid
gen=0
worker_start() { # slot
	gen=$((gen + 1))
	local left=$((DURATION * 1000))
	[ -n "${t_end:-}" ] && left=$((t_end - $(now_ms)))
	[ "$left" -lt 0 ] && left=0
	"$WORKER" lock "$OUT/hist/w$1.$gen.hist" "$(servers_of $(($1 % 3)))" 0 \
		"w$1.$gen" "$LOCKS:$RWLOCKS:$SEMAPHORES:0" $((SEED + gen)) $((left + 60000)) \
		2>> "$OUT/workers.log" &
	worker_pid[$1]=$!
}

# ---- faults ---------------------------------------------------------------------

declare -A count
note() { local k=$1; shift; count[$k]=$((${count[$k]:-0} + 1)); echo "$(now_ms) $k $*" >> "$nemlog"; }

f_kill9_active() {
	local p i
	rnd 3; p=$R
	i=$(active_of "$p")
	[ -n "$i" ] || return
	kill -9 "${dpid[$i]}" 2>/dev/null; wait "${dpid[$i]}" 2>/dev/null
	rnd 1000; pause_ms "$R"
	dlockd_start "$i"
	note kill9_active "p$p node $i"
}
f_stop_active() {
	local p i
	rnd 3; p=$R
	i=$(active_of "$p")
	[ -n "$i" ] || return
	kill -STOP "${dpid[$i]}"
	rnd 3000; pause_ms $((1000 + R))
	kill -CONT "${dpid[$i]}"
	note stop_active "p$p node $i"
}
f_kill9_standby() {
	local p i
	rnd 3; p=$R
	i=$(active_of "$p")
	[ -n "$i" ] || return
	i=$((i ^ 1))
	kill -9 "${dpid[$i]}" 2>/dev/null; wait "${dpid[$i]}" 2>/dev/null
	dlockd_start "$i"
	note kill9_standby "p$p node $i"
}
f_kill9_primary() {
	local s k
	rnd 16384; s=$R
	k=$(primary_of "$s")
	[ -n "$k" ] || return
	kill -9 "${rpid[$k]}" 2>/dev/null
	wait "${rpid[$k]}" 2>/dev/null # a node of ours: reaped quietly
	rnd 2000; pause_ms $((1000 + R))
	rnode_restart "$k"
	note kill9_primary "node $k (slot $s)"
}
f_failover_shard() {
	local k
	rnd 6; k=$R
	rcli "$k" ROLE | head -1 | grep -q slave || return
	rcli "$k" CLUSTER FAILOVER > /dev/null
	note failover_shard "node $k"
}
f_migrate_slot() {
	local key s from to fid tid keys n=0
	rnd 4
	if [ "$R" = 3 ]; then key="dlf:{map}"; else key="dlf:{p$R}:"; fi
	s=$(keyslot "$key")
	from=$(primary_of "$s")
	[ -n "$from" ] || return
	rnd 2; to=$(( (from + 1 + R) % 3 ))
	to=$(primary_of $((to * 16384 / 3 + 7))) # a primary of another range
	[ -n "$to" ] && [ "$to" != "$from" ] || return
	fid=$(node_id "$from"); tid=$(node_id "$to")
	rcli "$to" CLUSTER SETSLOT "$s" IMPORTING "$fid" > /dev/null
	rcli "$from" CLUSTER SETSLOT "$s" MIGRATING "$tid" > /dev/null
	while :; do
		keys=$(rcli "$from" CLUSTER GETKEYSINSLOT "$s" 3)
		[ -n "$keys" ] || break
		# shellcheck disable=SC2086
		rcli "$from" MIGRATE 127.0.0.1 "$(rport "$to")" "" 0 5000 KEYS $keys > /dev/null
		n=$((n + 1)); [ $n -gt 200 ] && break
		rnd 100; pause_ms "$R"
	done
	for k in 0 1 2 3 4 5; do rcli "$k" CLUSTER SETSLOT "$s" NODE "$tid" > /dev/null; done
	note migrate_slot "$key slot $s node $from -> $to"
}
# The slot of a workers' name (L0.., S0.., P0..), and the partition
# serving it (its active answers STATUS): "<slot> <partition> <active>".
busy_slot() {
	local n name p i
	rnd $((LOCKS + RWLOCKS + SEMAPHORES)); n=$R
	if [ "$n" -lt "$LOCKS" ]; then name=L$n
	elif [ "$n" -lt $((LOCKS + RWLOCKS)) ]; then name=S$((n - LOCKS))
	else name=P$((n - LOCKS - RWLOCKS)); fi
	for p in 0 1 2; do
		i=$(active_of "$p")
		[ -n "$i" ] || continue
		case $(ask "$(dport "$p" $((i % 2)))" "STATUS $name") in
		"OK STATUS"*) echo "$(rcli "$(live_node)" CLUSTER KEYSLOT "$name") $p $i"
			return ;;
		esac
	done
}
f_move_slots() {
	local from to i lo len r b
	rnd 3; from=$R
	rnd 2
	if [ "$R" = 0 ] && b=$(busy_slot) && [ -n "$b" ]; then
		# half the moves take the slot of a name the workers use: it
		# holds or queues a lock most of the time, which goes along
		read -r lo from i <<< "$b"
		len=1
	else
		i=$(active_of "$from")
		[ -n "$i" ] || return
		# a range the giver holds: from its map's slots lines
		lo=$(first_slot_of "$(dport "$from" $((i % 2)))" "$from")
		[ -n "$lo" ] && [ "$lo" != "-" ] || return
		rnd 2000; len=$((1 + R))
	fi
	rnd 2; to=$(( (from + 1 + R) % 3 ))
	r=$(ask "$(dport "$from" $((i % 2)))" "PARTITION MOVE $lo-$((lo + len - 1 > 16383 ? 16383 : lo + len - 1)) p$to")
	note move_slots "p$from -> p$to: $lo+$len: $r"
}
f_kill_worker() {
	local i
	rnd "$WORKERS"; i=$R
	kill -9 "${worker_pid[$i]}" 2>/dev/null; wait "${worker_pid[$i]}" 2>/dev/null
	worker_start "$i"
	note kill_worker "slot $i"
}

# ---- run -------------------------------------------------------------------------

say "seed $SEED, $DURATION s, out $OUT, cluster $seeds"
for i in $(seq 0 $((WORKERS - 1))); do worker_start "$i"; done
read -r -a kinds <<< "$FAULTS"
t_end=$(($(now_ms) + DURATION * 1000))
while [ "$(now_ms)" -lt "$t_end" ]; do
	rnd 2500; pause_ms $((500 + R))
	rnd ${#kinds[@]}; "f_${kinds[$R]}"
done

# heal, settle, stop, check
for p in "${dpid[@]}" ${rpid[*]}; do kill -CONT "$p" 2>/dev/null; done
# a node restarted a moment ago may not answer yet: only a dead one is
# started again (two on one port left one running that nobody stopped)
for k in 0 1 2 3 4 5; do kill -0 "${rpid[$k]}" 2>/dev/null || rnode_restart "$k"; done
for i in 0 1 2 3 4 5; do kill -0 "${dpid[$i]}" 2>/dev/null || dlockd_start "$i"; done
sleep 3
for p in "${worker_pid[@]}"; do kill -TERM "$p" 2>/dev/null; done
for p in "${worker_pid[@]}"; do wait "$p" 2>/dev/null; done

total=0
for k in "${!count[@]}"; do total=$((total + count[$k])); done
say "faults injected: $total"
for k in $(echo "${!count[@]}" | tr ' ' '\n' | sort); do echo "  $k: ${count[$k]}"; done
say "moves made: $(grep -c 'move_slots.*OK PARTITION' "$nemlog") ($(grep -c 'move_slots.*OK PARTITION.*locks=[1-9]' "$nemlog") with locks), refused: $(grep -c 'move_slots.*ERR' "$nemlog")"
say "map epoch at the end: $(ask "$(dport 0 0)" MAP)"
"$CHECK" "$OUT/hist" "$OUT/forgets"
status=$?
cleanup
[ $status = 0 ] && say "no violation (seed $SEED)" || say "VIOLATIONS found (seed $SEED; histories in $OUT)"
exit $status
