#!/bin/sh
# SPDX-License-Identifier: MIT
# run.sh -- `make bench`: dlockd against the Redis recipe it replaces
# (SET NX PX + Lua compare-and-delete), side by side, in one run on this
# machine. Figures are ratios; nothing here is a pass/fail test.
#
# It starts its own processes, each on a free port with its data under one
# temporary directory, and stops them by PID (a trap cleans up):
#   redis-servers: "ra" appendfsync always, "re" appendfsync everysec,
#                  "rn" no AOF and no RDB, "rr" (always) for the restart
#   dlockds:       "dn" --persist none, "da" -> ra, "de" -> re,
#                  "dm" --persist none for the memory fill, "dr" -> rr
# and drives them with tests/bench/bench (one thread, epoll, one process).
#
# Every load figure is the median of BENCH_REPS runs of BENCH_DURATION s
# after BENCH_WARMUP s; the runs of one scenario alternate between the
# servers so that a noisy moment hits both sides. All runs are kept in
# $OUT/raw.txt, the table in $OUT/results.txt.
#
# Environment: DLOCKD, BENCH (binaries), OUT (build/bench), BENCH_REPS (3),
# BENCH_DURATION (2), BENCH_WARMUP (0.5), BENCH_CONNS (50), BENCH_FILL
# (1000000), BENCH_FILL_SMALL (100000), BENCH_PIN1 (1: run the 1-connection
# scenarios with every process on CPU 0, see below), BENCH_NOISE (0.3) and
# BENCH_RETRIES (25): when a run is repeated for noise, see one();
# BENCH_MODE_CONNS (64): clients of the shared-lock and semaphore rows;
# BENCH_TLS_CONNS (8): connections at once of the handshake row;
# BENCH_ONLY: run a subset only -- "tls": the TLS rows (section E) alone.
set -u

top=$(cd "$(dirname "$0")/../.." && pwd)
DLOCKD=${DLOCKD:-$top/build/dlockd}
BENCH=${BENCH:-$top/build/tests/bench/bench}
FCALL=${FCALL:-$top/build/tests/bench/fcall}
HTAB=${HTAB:-$top/build/tests/bench/htab}
OUT=${OUT:-$top/build/bench}
REPS=${BENCH_REPS:-3}
DURATION=${BENCH_DURATION:-2}
WARMUP=${BENCH_WARMUP:-0.5}
CONNS=${BENCH_CONNS:-50}
FILL=${BENCH_FILL:-1000000}
FILL_SMALL=${BENCH_FILL_SMALL:-100000}
PIN1=${BENCH_PIN1:-1}
MCONNS=${BENCH_MODE_CONNS:-64}
TLS_CONNS=${BENCH_TLS_CONNS:-8}
ONLY=${BENCH_ONLY:-}
sd_tls=""

die() {
	echo "run.sh: $*" >&2
	exit 1
}

case "$ONLY" in
"" | tls) ;;
*) die "BENCH_ONLY=$ONLY: the subsets are: tls" ;;
esac
for x in "$DLOCKD" "$BENCH" "$FCALL" "$HTAB"; do
	[ -x "$x" ] || die "$x is missing (make bench builds it)"
done
command -v openssl >/dev/null || die "openssl missing (make deps)"
command -v redis-server >/dev/null || die "redis-server missing (make deps)"
command -v redis-cli >/dev/null || die "redis-cli missing (make deps)"

mkdir -p "$OUT" || die "cannot create $OUT"
tmp=$(mktemp -d "${TMPDIR:-/tmp}/dlockd-bench-XXXXXX") || die "mktemp"
pids=""
cleanup() {
	for p in $pids; do kill "$p" 2>/dev/null; done
	for p in $pids; do wait "$p" 2>/dev/null; done
	rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

RAW=$OUT/raw.txt
RES=$OUT/results.txt
: > "$RAW"
mkdir -p "$tmp/r"
errors=0

# ---- processes ---------------------------------------------------------------

forget() { # pid: no longer ours to clean up
	pids=$(echo " $pids " | sed "s/ $1 / /; s/^ *//; s/ *$//")
}

stop() { # pid: SIGTERM, wait (SIGKILL after 30 s); sets stop_ms
	s_t0=$(date +%s%N)
	kill -TERM "$1" 2>/dev/null
	n=0
	while kill -0 "$1" 2>/dev/null; do
		# a zombie (exited, not yet reaped) is reaped by wait below
		[ "$(awk '{print $3}' "/proc/$1/stat" 2>/dev/null)" = Z ] && break
		n=$((n + 1))
		if [ $n -gt 3000 ]; then
			echo "run.sh: pid $1 ignored SIGTERM for 30 s: SIGKILL" >&2
			kill -KILL "$1" 2>/dev/null
			break
		fi
		sleep 0.01
	done
	wait "$1" 2>/dev/null
	stop_ms=$((($(date +%s%N) - s_t0) / 1000000))
	forget "$1"
}

start_redis() { # name always|everysec|off
	sr_dir=$tmp/$1
	mkdir -p "$sr_dir"
	sr_port=$("$BENCH" freeport) || die "no free port"
	if [ "$2" = off ]; then
		set -- "$1" "$2" --appendonly no
	else
		set -- "$1" "$2" --appendonly yes --appendfsync "$2"
	fi
	sr_name=$1
	shift 2
	redis-server --port "$sr_port" --bind 127.0.0.1 --dir "$sr_dir" \
		--save "" --auto-aof-rewrite-percentage 0 \
		--maxmemory-policy noeviction --logfile "$sr_dir/redis.log" \
		--daemonize no "$@" </dev/null >/dev/null 2>&1 &
	sr_pid=$!
	pids="$pids $sr_pid"
	eval "${sr_name}_pid=$sr_pid ${sr_name}_port=$sr_port"
	"$BENCH" waitport --proto redis --port "$sr_port" --timeout-ms 10000 \
		>/dev/null ||
		die "redis-server $sr_name did not start: $(tail -3 "$sr_dir/redis.log")"
}

# start_dlockd name port|- [flags]: waits until it answers PING; sets
# <name>_pid, <name>_port, <name>_ready (ms from just before exec).
start_dlockd() {
	sd_name=$1
	sd_port=$2
	shift 2
	[ "$sd_port" = - ] && { sd_port=$("$BENCH" freeport) || die "no port"; }
	sd_t0=$(date +%s%N)
	"$DLOCKD" -c "${sd_conf:-$tmp/dlockd.conf}" --port "$sd_port" "$@" \
		</dev/null 2>>"$tmp/$sd_name.log" &
	sd_pid=$!
	pids="$pids $sd_pid"
	sd_ready=$("$BENCH" waitport --port "$sd_port" --since-ns "$sd_t0" \
		--timeout-ms 120000 ${sd_tls:+--tls "$sd_tls"}) ||
		die "dlockd $sd_name did not start: $(tail -5 "$tmp/$sd_name.log")"
	eval "${sd_name}_pid=$sd_pid ${sd_name}_port=$sd_port"
	eval "${sd_name}_ready=${sd_ready#ready_ms=}"
}

hz=$(getconf CLK_TCK)
ticks() { # pid: its CPU time so far (utime + stime), in clock ticks
	awk '{ print $14 + $15 }' "/proc/$1/stat"
}

rss_kb() { # pid
	awk '/^VmRSS:/ {print $2}' "/proc/$1/status"
}

# ---- measuring ---------------------------------------------------------------

# one ROW COL [taskset prefix...] -- bench args: one run, its line kept.
# Other users of the machine show up as cpu_other (CPU of processes not
# measured), a busy host as cpu_steal: a run with more than BENCH_NOISE
# cores of both together is repeated, at most twice (and at most
# BENCH_RETRIES times in all), and the quietest attempt kept. Every attempt
# gets its own names and keys.
NOISE=${BENCH_NOISE:-0.3}
retries_left=${BENCH_RETRIES:-25}
retried=0
seq=0
one() {
	o_row=$1 o_col=$2
	shift 2
	o_pre=""
	while [ "$1" != -- ]; do o_pre="$o_pre $1"; shift; done
	shift
	o_best="" o_bestother=999 o_try=0
	while :; do
		seq=$((seq + 1))
		if o_line=$($o_pre "$BENCH" "$@" --warmup "$WARMUP" \
			--duration "$DURATION" --tag "b$seq" 2>"$tmp/err"); then
			o_other=$(echo "$o_line" | awk '{ for (i = 1; i <= NF; i++)
				if ($i ~ /^cpu_(other|steal)=/) { sub(/^[^=]*=/, "", $i); n += $i }
				print n + 0 }')
			echo "$o_row $o_col try$o_try $o_line" >> "$RAW"
			if awk -v a="${o_other:-0}" -v b="$o_bestother" \
				'BEGIN { exit !(a < b) }'; then
				o_best=$o_line o_bestother=${o_other:-0}
			fi
		else
			errors=$((errors + 1))
			echo "$o_row $o_col FAILED: $(cat "$tmp/err")" >> "$RAW"
			echo "run.sh: $o_row $o_col failed: $(cat "$tmp/err")" >&2
			break
		fi
		awk -v a="$o_bestother" -v n="$NOISE" 'BEGIN { exit !(a > n) }' ||
			break
		[ $o_try -lt 2 ] && [ "$retries_left" -gt 0 ] || break
		o_try=$((o_try + 1))
		retries_left=$((retries_left - 1))
		retried=$((retried + 1))
	done
	[ -n "$o_best" ] && echo "$o_best" >> "$tmp/r/$o_row.$o_col"
}

# med ROW COL KEY: median of KEY over the runs ("-" when none)
med() {
	[ -s "$tmp/r/$1.$2" ] || { echo -; return; }
	awk -v k="$3" '{ for (i = 1; i <= NF; i++)
		if (index($i, k "=") == 1) print substr($i, length(k) + 2) }' \
		"$tmp/r/$1.$2" | sort -g |
		awk '{ v[NR] = $1 } END { if (!NR) { print "-"; exit }
		if (NR % 2) print v[(NR + 1) / 2];
		else print (v[NR / 2] + v[NR / 2 + 1]) / 2 }'
}

# spread ROW COL KEY: (max - min) / median, as a percentage
spread() {
	[ -s "$tmp/r/$1.$2" ] || { echo 0; return; }
	awk -v k="$3" '{ for (i = 1; i <= NF; i++)
		if (index($i, k "=") == 1) print substr($i, length(k) + 2) }' \
		"$tmp/r/$1.$2" | sort -g |
		awk '{ v[NR] = $1 } END { if (NR < 2) { print 0; exit }
		m = NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2;
		print (m > 0 ? int(100 * (v[NR] - v[1]) / m + 0.5) : 0) }'
}

ratio() { # a b -> a/b with 2 decimals, "-" if either is missing
	awk -v a="$1" -v b="$2" 'BEGIN { if (a == "-" || b == "-" || b + 0 == 0)
		print "-"; else printf "%.2f\n", a / b }'
}

int() { # a number, rounded ("-" stays)
	awk -v a="$1" 'BEGIN { if (a == "-") print "-"; else printf "%.0f\n", a }'
}

sum() { # a + b with 2 decimals
	awk -v a="$1" -v b="$2" 'BEGIN { if (a == "-" || b == "-") print "-";
		else printf "%.2f\n", a + b }'
}

pin_servers() { # cpu list: every thread of every server process
	[ "$PIN1" = 1 ] && [ -n "$PIN_CPUS" ] || return 0
	for p in $pids; do taskset -apc "$1" "$p" >/dev/null 2>&1; done
}

# ---- TLS -------------------------------------------------------------------------

# The same daemon (--persist none) with its TCP port in plaintext ("tp") and
# in TLS ("tt": an ECDSA P-256 certificate from a CA made here, TLS 1.3),
# driven alike, runs alternating: pairs at 1 and $CONNS connections, and
# connections made and closed ($TLS_CONNS at once: connect, PING, close;
# over TLS each one a full handshake, and close_notify).
tls_certs() {
	mkdir -p "$tmp/tls" && (
		cd "$tmp/tls" &&
			ec="-newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes" &&
			openssl req -x509 $ec -keyout ca.key -out ca.pem -days 2 \
				-subj "/CN=bench CA" &&
			openssl req $ec -keyout server.key -out server.csr \
				-subj "/CN=127.0.0.1" &&
			printf 'subjectAltName=IP:127.0.0.1\n' > ext &&
			openssl x509 -req -in server.csr -CA ca.pem -CAkey ca.key \
				-CAcreateserial -days 2 -extfile ext -out server.pem
	) > /dev/null 2>&1 || die "openssl could not make the certificates"
}

run_tls() {
	tls_certs
	start_dlockd tp - --persist none
	sd_tls=$tmp/tls/ca.pem
	start_dlockd tt - --persist none --tls-cert "$tmp/tls/server.pem" \
		--tls-key "$tmp/tls/server.key"
	sd_tls=""
	echo "make bench: TLS against plaintext: pairs, 1 and $CONNS connections;" \
		"connections, $TLS_CONNS at once" >&2
	rep=0
	while [ $rep -lt "$REPS" ]; do
		for c in tp tt; do
			# (not $p: pin_servers loops over it)
			eval "port=\$${c}_port dp=\$${c}_pid"
			tls=""
			[ $c = tt ] && tls="--tls $tmp/tls/ca.pem"
			pre=""
			if [ "$PIN1" = 1 ]; then pin_servers 0; pre="taskset -c 0"; fi
			one tp1 "$c" $pre -- dlock-pairs --port "$port" --conns 1 \
				--pid "dlockd:$dp" $tls
			[ "$PIN1" = 1 ] && pin_servers "$PIN_CPUS"
			one tpm "$c" -- dlock-pairs --port "$port" --conns "$CONNS" \
				--pid "dlockd:$dp" $tls
			one tcx "$c" -- dlock-connects --port "$port" \
				--conns "$TLS_CONNS" --pid "dlockd:$dp" $tls
		done
		rep=$((rep + 1))
	done
	stop "$tp_pid"
	stop "$tt_pid"
}

# per_op ROW COL: server CPU per operation, us
per_op() {
	awk -v c="$(med "$1" "$2" cpu_dlockd)" -v r="$(med "$1" "$2" rate)" 'BEGIN {
		if (c == "-" || r == "-" || r + 0 == 0) print "-";
		else printf "%.1f\n", c * 1e6 / r }'
}

table_tls() {
	echo
	echo "E. TLS: one dlockd build (--persist none), its TCP port in plaintext"
	echo "  against TLS (TLS 1.3, ECDSA P-256 server certificate, verified by the"
	echo "  load generator); ratio = TLS / plaintext. Connections: $TLS_CONNS at"
	echo "  once, each connect, PING -> OK PONG, close, again (over TLS a full"
	echo "  handshake each: handshakes/s)."
	printf '%-40s %12s %14s %7s\n' "scenario" "plaintext" "TLS" "ratio"
	label="lock+unlock pairs/s, 1 conn"
	[ "$PIN1" = 1 ] && label="$label (CPU 0)"
	a=$(med tp1 tp rate) b=$(med tp1 tt rate)
	printf '%-40s %12s %14s %7s\n' "$label" "$(int "$a")" "$(int "$b")" \
		"$(ratio "$b" "$a")"
	a=$(med tpm tp rate) b=$(med tpm tt rate)
	printf '%-40s %12s %14s %7s\n' "lock+unlock pairs/s, $CONNS conns" \
		"$(int "$a")" "$(int "$b")" "$(ratio "$b" "$a")"
	printf '%-40s %12s %14s\n' "  pair latency p50/p99 us, $CONNS conns" \
		"$(int "$(med tpm tp p50_us)")/$(int "$(med tpm tp p99_us)")" \
		"$(int "$(med tpm tt p50_us)")/$(int "$(med tpm tt p99_us)")"
	a=$(per_op tpm tp) b=$(per_op tpm tt)
	printf '%-40s %12s %14s %7s\n' "  server CPU per pair, us" "$a" "$b" \
		"$(ratio "$b" "$a")"
	a=$(med tcx tp rate) b=$(med tcx tt rate)
	printf '%-40s %12s %14s %7s\n' "connections/s (TLS: handshakes/s)" \
		"$(int "$a")" "$(int "$b")" "$(ratio "$b" "$a")"
	a=$(per_op tcx tp) b=$(per_op tcx tt)
	printf '%-40s %12s %14s %7s\n' "  server CPU per connection, us" "$a" \
		"$b" "$(ratio "$b" "$a")"
	printf '%-40s %12s %14s\n' "  load generator CPU, cores" \
		"$(med tcx tp cpu_bench)" "$(med tcx tt cpu_bench)"
	printf '%-40s %12s %14s\n' "  connection p50/p99 us" \
		"$(int "$(med tcx tp p50_us)")/$(int "$(med tcx tp p99_us)")" \
		"$(int "$(med tcx tt p50_us)")/$(int "$(med tcx tt p99_us)")"
}

# ---- the machine ---------------------------------------------------------------

ncpu=$(nproc)
PIN_CPUS=""
if [ "$ncpu" -ge 2 ] && command -v taskset >/dev/null; then
	PIN_CPUS="0-$((ncpu - 1))"
else
	PIN1=0
fi
cpu_model=$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1)
fs=$(df -PT "$tmp" | awk 'NR == 2 {print $2 " on " $1}')
started=$(date -u '+%Y-%m-%d %H:%M:%S UTC')
rev=$(git -C "$top" describe --always --dirty 2>/dev/null || echo unknown)
t_begin=$(date +%s)

cat > "$tmp/dlockd.conf" <<EOF
; make bench: the defaults, but one owner may hold the fill's leases
[limits]
max_locks_per_owner = 2000000
EOF

echo "make bench: $ncpu CPUs ($cpu_model), $REPS x ${DURATION}s per" \
	"figure, temp dir $tmp ($fs); this takes a few minutes" >&2

report_head() {
	echo "dlockd benchmark: dlockd against the Redis recipe it replaces"
	echo "  (recipe: SET <key> <unique> NX PX 10000, then EVALSHA of the"
	echo "  compare-and-delete script; handoff: SET NX PX retried on nil)"
	echo "date:    $started (took ${t_total} s)"
	echo "machine: $(uname -n), nproc=$ncpu, $cpu_model, Linux $(uname -r)"
	echo "         load average at the end: $(cut -d' ' -f1-3 /proc/loadavg)"
	echo "redis:   $(redis-server --version | cut -d' ' -f1-3), data on $fs"
	echo "dlockd:  $DLOCKD ($("$DLOCKD" --version 2>&1 | head -1), git $rev)"
	echo "tls:     $(openssl version)"
	echo "method:  load generator tests/bench/bench on the same machine (one"
	echo "         thread, epoll, one request in flight per connection);"
	echo "         each figure the median of $REPS runs of ${DURATION} s after" \
		"${WARMUP} s warm-up,"
	echo "         runs alternating between the columns; ratio = dlockd / recipe"
}

if [ "$ONLY" = tls ]; then
	run_tls
	t_total=$(($(date +%s) - t_begin))
	{
		report_head
		table_tls
		echo "Noise: runs repeated for noise: $retried (the quietest" \
			"attempt of each kept; cpu_other in $RAW)"
		[ "$errors" -eq 0 ] || echo "ERRORS: $errors runs failed, see $RAW"
	} | tee "$RES"
	echo "(table in $RES, every run in $RAW)"
	[ "$errors" -eq 0 ]
	exit
fi

start_redis ra always
start_redis re everysec
start_redis rn off
start_dlockd dn - --persist none
start_dlockd da - --persist redis --redis "redis://127.0.0.1:$ra_port/0"
start_dlockd de - --persist redis --redis "redis://127.0.0.1:$re_port/0"
# "dw": as da, but releases wait for Redis too (durable_release = yes),
# to show what the default (answered at once) saves; its own db of ra
cp "$tmp/dlockd.conf" "$tmp/dlockd-dw.conf"
printf '[persistence]\ndurable_release = yes\n' >> "$tmp/dlockd-dw.conf"
sd_conf=$tmp/dlockd-dw.conf
start_dlockd dw - --persist redis --redis "redis://127.0.0.1:$ra_port/1"
sd_conf=""

# The columns: a dlockd, or a redis-server running the recipe.
dcols="da de dn dw"
rcols="ra re rn"
backing_da=$ra_pid backing_de=$re_pid backing_dw=$ra_pid

dl_pids() { # col: --pid flags for a dlockd column
	eval "p=\$${1}_pid b=\${backing_$1:-}"
	echo "--pid dlockd:$p${b:+ --pid redis:$b}"
}

# ---- load scenarios -------------------------------------------------------------

# 1 connection: latency-bound. On this VM a wake-up across vCPUs costs
# ~100 us, so where the scheduler happens to put two processes swings these
# figures 4x from run to run; with BENCH_PIN1=1 every process runs on CPU 0
# for them (the same for both sides), which measures the software path.
row_p1() {
	pre=""
	if [ "$PIN1" = 1 ]; then pin_servers 0; pre="taskset -c 0"; fi
	rep=0
	while [ $rep -lt "$REPS" ]; do
		for c in $dcols; do
			eval "port=\$${c}_port"
			one p1 "$c" $pre -- dlock-pairs --port "$port" --conns 1 \
				$(dl_pids "$c")
		done
		for c in $rcols; do
			eval "port=\$${c}_port p=\$${c}_pid"
			one p1 "$c" $pre -- redis-pairs --port "$port" --conns 1 \
				--pid "redis:$p"
		done
		rep=$((rep + 1))
	done
	[ "$PIN1" = 1 ] && pin_servers "$PIN_CPUS"
}

row_many() { # row dlock-mode redis-mode [extra redis flags]
	rm_row=$1 rm_dmode=$2 rm_rmode=$3
	shift 3
	rep=0
	while [ $rep -lt "$REPS" ]; do
		if [ -n "$rm_dmode" ]; then
			for c in $dcols; do
				eval "port=\$${c}_port"
				stats=""
				[ "$c" != dn ] && stats=--stats
				one "$rm_row" "$c" -- "$rm_dmode" --port "$port" \
					--conns "$CONNS" $stats $(dl_pids "$c")
			done
		fi
		for c in $rcols; do
			eval "port=\$${c}_port p=\$${c}_pid"
			one "$rm_row" "$c" -- "$rm_rmode" --port "$port" \
				--conns "$CONNS" --pid "redis:$p" "$@"
		done
		rep=$((rep + 1))
	done
}

echo "make bench: lock+unlock pairs, 1 connection" >&2
row_p1
echo "make bench: lock+unlock pairs, $CONNS connections" >&2
row_many pm dlock-pairs redis-pairs
echo "make bench: handoffs, $CONNS connections on one lock" >&2
row_many hm dlock-handoff redis-handoff
echo "make bench: handoffs, the recipe retrying after 1 ms" >&2
row_many hs "" redis-handoff --sleep-ms 1

# Shared locks and semaphores: $MCONNS clients on one lock, each granted
# lock releases at once and asks again. dlockd queues them (wait=inf); the
# Redisson-style recipes (bench.c: redis-rw, redis-sem) retry a refusal
# after 1 ms, as a Redisson client does when its unlock message comes.
# row_modes ROW "dlock-handoff flags" "redis mode and flags"
row_modes() {
	rep=0
	while [ $rep -lt "$REPS" ]; do
		for c in da de dn; do
			eval "port=\$${c}_port"
			one "$1" "$c" -- dlock-handoff --port "$port" \
				--conns "$MCONNS" $2 $(dl_pids "$c")
		done
		for c in $rcols; do
			eval "port=\$${c}_port p=\$${c}_pid"
			one "$1" "$c" -- $3 --port "$port" --conns "$MCONNS" \
				--sleep-ms 1 --pid "redis:$p"
		done
		rep=$((rep + 1))
	done
}
echo "make bench: $MCONNS readers on one shared lock" >&2
row_modes rd --shared "redis-rw --write-pct 0"
echo "make bench: a semaphore of 8, $MCONNS clients" >&2
row_modes sm "--limit 8" "redis-sem --limit 8"
echo "make bench: $MCONNS clients, 90% reads, 10% writes" >&2
row_modes mx "--write-pct 10" "redis-rw --write-pct 10"

stop "$dn_pid"
stop "$da_pid"
stop "$de_pid"
stop "$dw_pid"
stop "$re_pid"

# ---- memory per held lease ------------------------------------------------------

echo "make bench: memory, $FILL leases held" >&2
start_dlockd dm - --persist none
m_before=$(rss_kb "$dm_pid")
m_fill=$("$BENCH" fill --port "$dm_port" --count "$FILL" --ttl 60m \
	--tag lease --owner bench) || errors=$((errors + 1))
echo "mem dlockd $m_fill" >> "$RAW"
sleep 0.2
m_after=$(rss_kb "$dm_pid")
stop "$dm_pid"

# the recipe's equivalent: one SET NX PX key per held lock, no AOF
rm_before=$(rss_kb "$rn_pid")
rm_used0=$(redis-cli -p "$rn_port" info memory |
	sed -n 's/^used_memory:\([0-9]*\).*/\1/p')
rm_fill=$("$BENCH" redis-fill --port "$rn_port" --count "$FILL" \
	--px 3600000 --tag lease) || errors=$((errors + 1))
echo "mem redis $rm_fill" >> "$RAW"
rm_after=$(rss_kb "$rn_pid")
rm_used1=$(redis-cli -p "$rn_port" info memory |
	sed -n 's/^used_memory:\([0-9]*\).*/\1/p')
redis-cli -p "$rn_port" flushall >/dev/null
stop "$rn_pid"

# ---- restart --------------------------------------------------------------------

# restart_case N: fill N leases through dlockd (persist=redis, Redis
# appendfsync always), SIGTERM, start again; time from exec to a PING
# answered, and what the daemon logs about its load.
start_redis rr always
restart_case() {
	redis-cli -p "$rr_port" flushall >/dev/null
	start_dlockd dr - --persist redis --redis "redis://127.0.0.1:$rr_port/0"
	rc_fill=$("$BENCH" fill --port "$dr_port" --count "$1" --ttl 60m \
		--tag "r$1" --owner bench) || errors=$((errors + 1))
	echo "restart $1 fill $rc_fill" >> "$RAW"
	stop "$dr_pid"
	rc_stop=$stop_ms
	: > "$tmp/dr.log"
	redis-cli -p "$rr_port" config resetstat >/dev/null
	rc_r0=$(ticks "$rr_pid")
	start_dlockd dr "$dr_port" --persist redis \
		--redis "redis://127.0.0.1:$rr_port/0"
	rc_ready=$dr_ready
	# where the start-up went: CPU of each process, Redis's own time in
	# the commands of the load
	rc_dcpu=$(ticks "$dr_pid")
	rc_rcpu=$(($(ticks "$rr_pid") - rc_r0))
	rc_cmds=$(redis-cli -p "$rr_port" info commandstats | tr -d '\r' |
		awk -F'[:,=]' '/^cmdstat_/ && !/^cmdstat_(config|select|ping|info|client|auth|hello|command)[:|]/ {
			sub("cmdstat_", "", $1)
			printf "%s%s x%s %.0f ms", sep, $1, $3, $5 / 1000; sep = ", " }')
	rc_log=$(sed -n 's/.* N \(loaded .* ms\) (.*/\1/p' "$tmp/dr.log" | tail -1)
	echo "restart $1 ready_ms=$rc_ready stop_ms=$rc_stop dlockd_cpu_ticks=$rc_dcpu redis_cpu_ticks=$rc_rcpu redis: $rc_cmds; log: $rc_log" >> "$RAW"
	stop "$dr_pid"
	rc_secs=$(echo "$rc_fill" | sed -n 's/.* secs=\([^ ]*\).*/\1/p')
	{
		printf '  %7s leases: ready %s ms after exec (log: "%s");\n' \
			"$1" "$(int "$rc_ready")" "$rc_log"
		printf '  %7s         CPU until ready: dlockd %s ms, redis-server %s ms;\n' "" \
			"$((rc_dcpu * 1000 / hz))" "$((rc_rcpu * 1000 / hz))"
		printf '  %7s         redis-server time in commands: %s\n' "" "$rc_cmds"
		printf '  %7s         filled in %s s, SIGTERM drain %s ms\n' "" \
			"${rc_secs:--}" "$rc_stop"
	} >> "$tmp/restart.txt"
	big_ready=$rc_ready
}
echo "make bench: restart with $FILL_SMALL and $FILL leases" >&2
: > "$tmp/restart.txt"
restart_case "$FILL_SMALL"
restart_case "$FILL"

# ---- the fence's cost in Redis ------------------------------------------------

# The same batches applied by dlockd's function (fence checked) and by the
# MULTI/EXEC transaction of the same writes (tests/bench/fcall.c), against
# the Redis of the restart cases, whose library that dlockd loaded.
echo "make bench: fenced function against MULTI/EXEC" >&2
: > "$tmp/fcall.txt"
for n in 1 10 50; do
	"$FCALL" "$rr_port" "$n" "$DURATION" "$REPS" >> "$tmp/fcall.txt" ||
		errors=$((errors + 1))
done
cat "$tmp/fcall.txt" >> "$RAW"
stop "$rr_pid"
stop "$ra_pid"
echo "make bench: hash table growth" >&2
"$HTAB" 2000000 > "$tmp/htab.txt" || errors=$((errors + 1))
cat "$tmp/htab.txt" >> "$RAW"
run_tls
t_total=$(($(date +%s) - t_begin))

# ---- the table ---------------------------------------------------------------------

cell() { # row col key -> median as an integer
	int "$(med "$1" "$2" "$3")"
}

table() { # title dlockd-col redis-col dlockd-label redis-label
	d=$2 r=$3
	echo
	echo "$1"
	echo "  dlockd column: $4"
	echo "  recipe column: $5"
	printf '%-40s %12s %14s %7s\n' "scenario" "dlockd" "redis recipe" "ratio"
	for row in p1 pm; do
		if [ $row = p1 ]; then
			label="lock+unlock pairs/s, 1 conn"
			[ "$PIN1" = 1 ] && label="$label (CPU 0)"
		else
			label="lock+unlock pairs/s, $CONNS conns"
		fi
		a=$(med $row "$d" rate) b=$(med $row "$r" rate)
		printf '%-40s %12s %14s %7s\n' "$label" "$(int "$a")" \
			"$(int "$b")" "$(ratio "$a" "$b")"
	done
	printf '%-40s %12s %14s\n' "  pair latency p50/p99 us, $CONNS conns" \
		"$(cell pm "$d" p50_us)/$(cell pm "$d" p99_us)" \
		"$(cell pm "$r" p50_us)/$(cell pm "$r" p99_us)"
	sc=$(med pm "$d" cpu_dlockd)
	[ "$d" != dn ] && sc=$(sum "$sc" "$(med pm "$d" cpu_redis)")
	printf '%-40s %12s %14s\n' "  server CPU, cores, $CONNS conns" \
		"$sc" "$(med pm "$r" cpu_redis)"
	a=$(awk -v c="$sc" -v r="$(med pm "$d" rate)" 'BEGIN {
		if (c == "-" || r == "-" || r + 0 == 0) print "-";
		else printf "%.1f\n", c * 1e6 / r }')
	b=$(awk -v c="$(med pm "$r" cpu_redis)" -v r="$(med pm "$r" rate)" 'BEGIN {
		if (c == "-" || r == "-" || r + 0 == 0) print "-";
		else printf "%.1f\n", c * 1e6 / r }')
	printf '%-40s %12s %14s %7s\n' "  server CPU per pair, us" "$a" "$b" \
		"$(ratio "$a" "$b")"
	a=$(med hm "$d" rate) b=$(med hm "$r" rate)
	printf '%-40s %12s %14s %7s\n' "handoffs/s, $CONNS conns, one lock" \
		"$(int "$a")" "$(int "$b")" "$(ratio "$a" "$b")"
	printf '%-40s %12s %14s\n' "  lock attempts per grant" \
		"$(med hm "$d" attempts_per_grant)" \
		"$(med hm "$r" attempts_per_grant)"
	printf '%-40s %12s %14s\n' "  failed attempts/s" "(queued)" \
		"$(cell hm "$r" fail_rate)"
	printf '%-40s %12s %14s\n' "  grants per conn in ${DURATION}s, min..max" \
		"$(cell hm "$d" grants_per_conn_min)..$(cell hm "$d" grants_per_conn_max)" \
		"$(cell hm "$r" grants_per_conn_min)..$(cell hm "$r" grants_per_conn_max)"
	b=$(med hs "$r" rate)
	printf '%-40s %12s %14s %7s\n' "handoffs/s, recipe retrying after 1 ms" \
		"" "$(int "$b")" "$(ratio "$a" "$b")"
	printf '%-40s %12s %14s\n' "  failed attempts/s" "" \
		"$(cell hs "$r" fail_rate)"
}

# D: the shared-lock and semaphore rows, for the three durabilities.
# d_rate LABEL ROW KEY: dlockd column $d against recipe column $r, ratio
d_rate() {
	a=$(med "$2" "$d" "$3") b=$(med "$2" "$r" "$3")
	printf '%-40s %12s %14s %7s\n' "$1" "$(int "$a")" "$(int "$b")" \
		"$(ratio "$a" "$b")"
}
# d_pair LABEL DLOCKD RECIPE: two cells, no ratio
d_pair() {
	printf '%-40s %12s %14s\n' "$1" "$2" "$3"
}
# waits ROW COL: "p99/max" of its acquisition waits, in ms
waits() {
	awk -v a="$(med "$1" "$2" wait_p99_us)" -v b="$(med "$1" "$2" wait_max_us)" \
		'BEGIN { printf "%.1f/%.0f", a / 1000, b / 1000 }'
}
table_modes() {
	echo
	echo "D. shared locks and semaphores: $MCONNS clients on ONE lock, each"
	echo "  releasing as soon as granted and asking again; dlockd queues them"
	echo "  (LOCK wait=inf, FIFO across modes), the recipes retry a refusal after"
	echo "  1 ms. Recipes (Lua, bench.c): read/write = Redisson's RReadWriteLock"
	echo "  core (a hash of holders under one PEXPIRE; reads admitted while the"
	echo "  lock is read-held, even with a writer retrying); semaphore = the"
	echo "  sorted set of expiring permits (RPermitExpirableSemaphore's model)."
	echo "  Wait = from an acquisition's first try to its grant (of the writes"
	echo "  only, in the mixed row); 100000 = 100 ms or more."
	printf '%-40s %12s %14s %7s\n' "scenario" "dlockd" "redis recipe" "ratio"
	for pair in "da ra always" "de re everysec" "dn rn none"; do
		set -- $pair
		d=$1 r=$2
		echo "  [durability: $3]"
		d_rate "$MCONNS readers, grants/s" rd rate
		d_rate "semaphore of 8, $MCONNS clients, grants/s" sm rate
		d_pair "  attempts per grant" \
			"$(med sm "$d" attempts_per_grant)" \
			"$(med sm "$r" attempts_per_grant)"
		d_pair "  wait p99 / max, ms" "$(waits sm "$d")" "$(waits sm "$r")"
		d_pair "  grants per client in ${DURATION}s, min..max" \
			"$(cell sm "$d" grants_per_conn_min)..$(cell sm "$d" grants_per_conn_max)" \
			"$(cell sm "$r" grants_per_conn_min)..$(cell sm "$r" grants_per_conn_max)"
		d_rate "90/10 reads/writes, grants/s" mx rate
		d_rate "  of which writes/s" mx write_rate
		d_pair "  write wait p99 / max, ms" "$(waits mx "$d")" \
			"$(waits mx "$r")"
	done
}

report() {
	report_head
	table "A. durable: every acknowledged write fsync'ed (appendfsync always)" \
		da ra "dlockd --persist redis -> redis-server appendonly yes, appendfsync always" \
		"redis-server appendonly yes, appendfsync always"
	table "B. appendfsync everysec (a machine crash may lose the last second)" \
		de re "dlockd --persist redis -> redis-server appendonly yes, appendfsync everysec" \
		"redis-server appendonly yes, appendfsync everysec"
	table "C. memory only (a restart loses everything)" \
		dn rn "dlockd --persist none" \
		"redis-server appendonly no, save \"\" (no persistence)"
	table_modes
	table_tls
	echo
	echo "Persistence cost, pairs/s at $CONNS conns:"
	echo "  persist=redis (always) / persist=none:   $(ratio "$(med pm da rate)" "$(med pm dn rate)")"
	echo "  persist=redis (everysec) / persist=none: $(ratio "$(med pm de rate)" "$(med pm dn rate)")"
	echo "Releases waiting for Redis too (durable_release = yes; the default"
	echo "answers UNLOCK at once), appendfsync always, pairs/s:"
	printf '  1 conn%s: %s waiting, %s not (%s); %s conns: %s waiting, %s not (%s)\n' \
		"$([ "$PIN1" = 1 ] && echo ' (CPU 0)')" \
		"$(int "$(med p1 dw rate)")" "$(int "$(med p1 da rate)")" \
		"$(ratio "$(med p1 da rate)" "$(med p1 dw rate)")" "$CONNS" \
		"$(int "$(med pm dw rate)")" "$(int "$(med pm da rate)")" \
		"$(ratio "$(med pm da rate)" "$(med pm dw rate)")"
	echo "Write batches (dlockd STATS over the $CONNS-conn pairs runs; a batch is"
	echo "one FCALL of the changed locks, sent when the previous one is answered:"
	echo "group commit; releases ride along with grants):"
	for c in da de; do
		[ $c = da ] && pol=always || pol=everysec
		printf '  %-8s %s client commands per batch, %s Redis round trips per batch,\n' \
			"$pol:" "$(med pm $c commands_per_batch)" \
			"$(med pm $c round_trips_per_batch)"
		printf '  %-8s %s lock records written per batch, %s batches/s, mean batch round trip %s us\n' \
			"" "$(med pm $c writes_per_batch)" \
			"$(int "$(awk -v b="$(med pm $c stat_store_batches)" -v s="$DURATION" 'BEGIN{print b/s}')")" \
			"$(med pm $c stat_store_latency_us_avg)"
	done
	echo "The fence's cost in Redis (tests/bench/fcall: the same batches of lock"
	echo "changes, grants and releases alternating, applied by FCALL dlock_apply_v11"
	echo "-- fence checked, records HSET/HDEL in their buckets; the token mark only when due, as"
	echo "dlockd sends it -- by the same function given a token in every batch"
	echo "(GET + SET of the token key: what version 3 did), and by MULTI, the same"
	echo "HSET/HDEL + SET token, EXEC; each one round trip per batch, 4"
	echo "batches in flight; Redis appendfsync always; CPU = Redis main thread,"
	echo "INFO cpu, per lock change; medians of $REPS runs of ${DURATION} s):"
	printf '  %-9s %11s %11s %11s %10s %10s %10s %7s %7s\n' "locks/bat" \
		"fcall chg/s" "+tok chg/s" "multi chg/s" "fcall us" "+tok us" \
		"multi us" "f/+tok" "f/m"
	for n in 1 10 50; do
		fl=$(grep "^fcall locks=$n " "$tmp/fcall.txt")
		tl=$(grep "^fcall_tok locks=$n " "$tmp/fcall.txt")
		ml=$(grep "^multi locks=$n " "$tmp/fcall.txt")
		fv() { echo "$1" | tr ' ' '\n' | sed -n "s/^$2=//p"; }
		fc=$(fv "$fl" redis_cpu_us_per_change)
		tc=$(fv "$tl" redis_cpu_us_per_change)
		mc=$(fv "$ml" redis_cpu_us_per_change)
		printf '  %-9s %11s %11s %11s %10s %10s %10s %7s %7s\n' "$n" \
			"$(fv "$fl" changes_s)" "$(fv "$tl" changes_s)" \
			"$(fv "$ml" changes_s)" "$fc" "$tc" "$mc" \
			"$(ratio "$fc" "$tc")" "$(ratio "$fc" "$mc")"
	done
	echo "Memory per held lease (dlockd --persist none, $FILL leases, one owner,"
	echo "names of 13 bytes, VmRSS from /proc/<pid>/status before and after):"
	awk -v b="$m_before" -v a="$m_after" -v n="$FILL" 'BEGIN {
		printf "  dlockd:  %.1f MB -> %.1f MB: %.0f bytes per lease (target <= 120)\n",
			b / 1024, a / 1024, (a - b) * 1024 / n }'
	awk -v b="$rm_before" -v a="$rm_after" -v u0="$rm_used0" -v u1="$rm_used1" -v n="$FILL" 'BEGIN {
		printf "  recipe:  redis-server (no AOF) %.1f MB -> %.1f MB: %.0f bytes per key", b / 1024, a / 1024, (a - b) * 1024 / n
		printf " (used_memory: %.0f)\n", (u1 - u0) / n }'
	echo "  (dlockd filled in $(echo "$m_fill" | sed -n 's/.*secs=\([^ ]*\) rate=\([^ ]*\).*/\1 s, \2 grants\/s, pipelined/p'))"
	echo "Restart (--persist redis, Redis appendfsync always; fill, SIGTERM,"
	echo "start again; ready = from just before exec until it answers PING):"
	cat "$tmp/restart.txt"
	awk -v r="$big_ready" 'BEGIN { if (r != "") printf "  target: %s leases ready in under 1000 ms: %s\n", '"$FILL"', (r < 1000 ? "met" : "NOT met") }'
	echo "Longest loop pause of a growing lock table (tests/bench/htab: the"
	echo "longest single insert while the hash grows to 2,000,000 names; the"
	echo "one-shot rehash is how dlockd grew before, target <= 1 ms):"
	sed 's/^/  /' "$tmp/htab.txt"
	echo "Noise: the most CPU that processes not ours used during a run (other"
	echo "users of the machine; kernel threads and interrupts not counted), and"
	echo "the most the hypervisor stole:"
	awk '{ for (i = 1; i <= NF; i++) {
		if (index($i, "cpu_other=") == 1) { v = substr($i, 11) + 0; if (v > o) o = v }
		if (index($i, "cpu_steal=") == 1) { v = substr($i, 11) + 0; if (v > s) s = v }
		if (index($i, "cpu_other=") == 1) { n++; x = substr($i, 11) + 0 }
		if (index($i, "cpu_steal=") == 1 && x + substr($i, 11) > t) busy++ } }
		END { printf "  other %.2f cores, steal %.2f cores; %d of %d runs had other + steal > %s cores\n", o, s, busy, n, t }' t="$NOISE" "$RAW"
	echo "  runs repeated for noise: $retried (the quietest attempt of each kept)"
	worst=0 where=""
	for f in "$tmp"/r/*; do
		[ -e "$f" ] || continue
		k=${f##*/}
		s=$(spread "${k%%.*}" "${k#*.}" rate)
		if [ "$s" -gt "$worst" ]; then worst=$s where=$k; fi
	done
	echo "  largest spread of a rate across its $REPS runs: ${worst}% ($where)"
	[ "$errors" -eq 0 ] || echo "ERRORS: $errors runs failed, see $RAW"
}

report | tee "$RES"
echo "(table in $RES, every run in $RAW)"
[ "$errors" -eq 0 ]
