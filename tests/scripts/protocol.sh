#!/bin/sh
# SPDX-License-Identifier: MIT
# protocol.sh -- the dlockd protocol, spoken by hand with nc.
#
# This script is documentation that checks itself: it starts a daemon and
# talks to it the way a person would with `nc`, two clients taking turns on
# one lock, then compares every reply with the transcript written below.
#
#   DLOCKD=build/dlockd sh tests/scripts/protocol.sh      (make scripts)
#
# Fencing tokens and remaining milliseconds change from run to run; before
# comparing, they are replaced by <token> and <ms>. Everything else must
# match exactly. Exits 0 when all replies match, 1 otherwise; the daemon is
# stopped either way.
set -u

DLOCKD=${DLOCKD:-build/dlockd}
HOST=127.0.0.1
NC="nc -N -w 5" # -N: half-close after stdin ends, so the server finishes
		# its replies and closes; -w 5: never hang on a dead server

dir=$(mktemp -d "${TMPDIR:-/tmp}/dlockd-protocol-XXXXXX") || exit 1
pid=""   # the daemon
apid=""  # client A's nc
fails=0

cleanup() {
	exec 3>&-
	[ -n "$apid" ] && kill "$apid" 2>/dev/null
	if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then
		kill -KILL "$pid" 2>/dev/null
		wait "$pid" 2>/dev/null
	fi
	rm -rf "$dir"
}
trap cleanup EXIT
trap 'exit 1' INT TERM HUP
trap '' PIPE # a client that died shows up as missing replies, not a kill

fail() {
	echo "FAIL: $*"
	[ -f "$dir/dlockd.log" ] && { echo "--- dlockd log:"; cat "$dir/dlockd.log"; }
	exit 1
}

# Lines in file $1 (0 while it does not exist).
count_lines() {
	wc -l 2>/dev/null < "$1" || echo 0
}

# Wait until file $1 has at least $2 lines (5 s at most).
wait_lines() {
	i=0
	while [ "$(count_lines "$1")" -lt "$2" ]; do
		i=$((i + 1))
		[ "$i" -gt 50 ] && fail "no reply in $1 after 5 s"
		sleep 0.1
	done
}

# Make a transcript comparable: drop the CR of CRLF, stand-ins for the
# values that differ between runs, the HELLO limits cut short. A grant
# states the TTL that remains when it is sent: the 30000 asked, or a few
# ms less on a slow machine.
normalize() {
	tr -d '\r' < "$1" | sed \
		-e 's/^\(OK HELLO version=\)[^ ]* \(owner=[^ ]*\) .*/\1<v> \2 .../' \
		-e 's/ [0-9]\{10,\}/ <token>/g' \
		-e 's/token=[1-9][0-9]*/token=<token>/' \
		-e 's/ttl_ms=[1-9][0-9]*/ttl_ms=<ms>/' \
		-e 's/held_ms=[0-9]*/held_ms=<ms>/' \
		-e 's/^\(NO BUSY [^ ]*\) [0-9]*/\1 <ms>/' \
		-e 's/^\(OK GRANTED [^ ]* <token>\) 29[0-9][0-9][0-9]\( \|$\)/\1 30000\2/'
}

# Compare transcript $1 (what a client received) with the expected lines
# on stdin, printing each check.
check() {
	normalize "$1" > "$1.norm"
	n=0
	while IFS= read -r want; do
		n=$((n + 1))
		got=$(sed -n "${n}p" "$1.norm")
		if [ "$got" = "$want" ]; then
			echo "  ok    $want"
		else
			echo "  FAIL  expected: $want"
			echo "             got: ${got:-(nothing)}"
			fails=$((fails + 1))
		fi
	done
	extra=$(sed -n "$((n + 1)),\$p" "$1.norm")
	if [ -n "$extra" ]; then
		echo "  FAIL  unexpected lines:"
		echo "$extra" | sed 's/^/          /'
		fails=$((fails + 1))
	fi
}

# The Nth word of line L of file F (CR removed).
word() {
	sed -n "${2}p" "$1" | tr -d '\r' | cut -d ' ' -f "$3"
}

[ -x "$DLOCKD" ] || fail "$DLOCKD is not an executable (set DLOCKD)"
command -v nc > /dev/null || fail "nc (netcat-openbsd) is needed"

# ---- 1. start the daemon ----------------------------------------------------
#
# Memory only (--persist none), on a port of our own: try ports from a
# range picked by our PID until one is free. The daemon logs "ready" once
# it listens and exits (status 4) when the port is taken.
port=$((20000 + $$ % 10000))
tries=0
while :; do
	: > "$dir/dlockd.log"
	"$DLOCKD" --persist none --port "$port" 2> "$dir/dlockd.log" &
	pid=$!
	i=0
	while kill -0 "$pid" 2>/dev/null &&
	      ! grep -q ' ready ' "$dir/dlockd.log"; do
		i=$((i + 1))
		[ "$i" -gt 100 ] && fail "dlockd did not start in 10 s"
		sleep 0.1
	done
	kill -0 "$pid" 2>/dev/null && break
	wait "$pid" 2>/dev/null
	pid=""
	tries=$((tries + 1))
	[ "$tries" -ge 20 ] && fail "no free port after 20 tries"
	port=$((port + 1))
done
echo "dlockd (pid $pid) listens on $HOST:$port"

# ---- 2. client A: PING, HELLO, LOCK, STATUS --------------------------------
#
# A keeps its connection open for the whole script: its requests go into a
# fifo that nc reads, its replies into a file. fd 3 holds the fifo open;
# closing it ends A's session.
mkfifo "$dir/a.in"
: > "$dir/a.out" # exists before nc runs: its redirections wait for the fifo
$NC "$HOST" "$port" > "$dir/a.out" < "$dir/a.in" &
apid=$!
exec 3> "$dir/a.in"
send_a() { printf '%s\r\n' "$1" >&3; }

echo "client A: PING, HELLO owner=alice ..., LOCK stock ttl=30s, STATUS stock"
send_a "PING hello"             # any text comes back
# name ourselves (leases belong to owners) and say who we are: what
# others see of the holder (a space is %20)
send_a "HELLO owner=alice host=shop1 cmd=restock%20--daily"
send_a "LOCK stock ttl=30s"     # free: granted at once, with a fencing token
send_a "STATUS stock"           # anybody may look
wait_lines "$dir/a.out" 4
token=$(word "$dir/a.out" 3 4)
echo "  (A's fencing token is $token)"

# ---- 3. client B: TRYLOCK while A holds the lock ---------------------------
#
# A one-shot session: B's lines go in, nc half-closes, the server answers
# everything and closes. TRYLOCK never waits: BUSY says for how many ms the
# lock stays taken at least, and who holds it, since when. B cannot release
# A's lock, even with the token.
echo "client B: TRYLOCK stock, UNLOCK stock <A's token>, QUIT"
printf 'TRYLOCK stock\r\nUNLOCK stock %s\r\nQUIT\r\n' "$token" |
	$NC "$HOST" "$port" > "$dir/b.out"
check "$dir/b.out" <<'EOF'
NO BUSY stock <ms> owner=alice held_ms=<ms> host=shop1 cmd=restock%20--daily
NO NOT_HOLDER stock
OK BYE
EOF

# ---- 4. client A: UNLOCK with its token ------------------------------------
echo "client A: UNLOCK stock <token>, STATUS stock, QUIT"
send_a "UNLOCK stock $token"    # the token proves A is the holder
send_a "STATUS stock"           # nobody holds it now
send_a "QUIT"
wait_lines "$dir/a.out" 7
exec 3>&-
wait "$apid" 2>/dev/null
apid=""
check "$dir/a.out" <<'EOF'
OK PONG hello
OK HELLO version=<v> owner=alice ...
OK GRANTED stock <token> 30000 holds=1
OK STATUS stock state=held token=<token> ttl_ms=<ms> count=1 owner=alice waiters=0 mode=exclusive limit=1 holders=1 held_ms=<ms> host=shop1 cmd=restock%20--daily delay_ms=0 delay_left_ms=0
OK RELEASED stock
OK STATUS stock state=free token=0 ttl_ms=0 count=0 owner=- waiters=0 mode=- limit=1 holders=0 held_ms=<ms> delay_ms=0 delay_left_ms=0
OK BYE
EOF

# ---- 5. client B again: the lock is free, with a larger token ---------------
echo "client B: TRYLOCK stock (default ttl 30 s)"
printf 'TRYLOCK stock\r\n' | $NC "$HOST" "$port" > "$dir/b2.out"
token2=$(word "$dir/b2.out" 1 4)
check "$dir/b2.out" <<'EOF'
OK GRANTED stock <token> 30000 holds=1
EOF
if [ -n "$token2" ] && [ "$token2" -gt "$token" ] 2>/dev/null; then
	echo "  ok    token $token2 > $token"
else
	echo "  FAIL  token '$token2' is not larger than $token"
	fails=$((fails + 1))
fi

# ---- 6. stop: SIGTERM drains and exits 0 ------------------------------------
echo "SIGTERM: dlockd exits 0"
kill -TERM "$pid"
i=0
while kill -0 "$pid" 2>/dev/null; do
	i=$((i + 1))
	[ "$i" -gt 100 ] && fail "dlockd still running 10 s after SIGTERM"
	sleep 0.1
done
wait "$pid"
status=$?
pid=""
if [ "$status" -eq 0 ]; then
	echo "  ok    exit status 0"
else
	echo "  FAIL  exit status $status"
	fails=$((fails + 1))
fi

if [ "$fails" -ne 0 ]; then
	echo "protocol.sh: $fails check(s) failed"
	echo "--- dlockd log:"
	cat "$dir/dlockd.log"
	exit 1
fi
echo "protocol.sh: all checks passed"
exit 0
