#!/bin/bash
# SPDX-License-Identifier: MIT
# metrics_idle.sh -- do sockets left idle on the metrics port block scrapes?
#
# Starts a dlockd (--persist none) with [metrics] listen on a free loopback
# port, then for DURATION seconds: opens IDLE fresh connections to the
# metrics port that send nothing (an idle pool, a port scanner, a slow
# client; the previous round's are closed), then scrapes GET /metrics once
# and counts whether the scrape got "HTTP/1.1 200". Prints one line:
#   idle=16 scrapes=29 ok=29 failed=0
# Bash's /dev/tcp does the sockets, so nothing but bash is needed.
#
#   DLOCKD=build/dlockd IDLE=16 DURATION=10 bash tests/bench/metrics_idle.sh
set -u
trap "" PIPE # a refused scrape must not end the script

top=$(cd "$(dirname "$0")/../.." && pwd)
DLOCKD=${DLOCKD:-$top/build/dlockd}
IDLE=${IDLE:-16}
DURATION=${DURATION:-10}
PAUSE=${PAUSE:-0.3}

free_port() {
	local p
	for p in $(shuf -i 20000-60000 -n 50); do
		if ! (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then
			echo "$p"
			return
		fi
	done
	return 1
}

port=$(free_port) && mport=$(free_port) || { echo "no free port" >&2; exit 1; }
tmp=$(mktemp -d "${TMPDIR:-/tmp}/dlockd-midle-XXXXXX")
printf '[metrics]\nlisten = 127.0.0.1:%s\n' "$mport" > "$tmp/dlockd.conf"
"$DLOCKD" -c "$tmp/dlockd.conf" --persist none --port "$port" \
	2> "$tmp/dlockd.log" &
dpid=$!
trap 'kill $dpid 2>/dev/null; wait $dpid 2>/dev/null; rm -rf "$tmp"' EXIT
for _ in $(seq 100); do
	(exec 3<>"/dev/tcp/127.0.0.1/$mport") 2>/dev/null && break
	sleep 0.05
done

# One scrape: 1 if it got a 200 within 2 s.
scrape() {
	local line=""
	exec {s}<>"/dev/tcp/127.0.0.1/$mport" || return 1
	printf 'GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n' >&"$s" 2>/dev/null
	IFS= read -r -t 2 line <&"$s" 2>/dev/null
	exec {s}>&-
	[ "${line%$'\r'}" = "HTTP/1.1 200 OK" ]
}

fds=()
n=0 ok=0
end=$((SECONDS + DURATION))
while [ "$SECONDS" -lt "$end" ]; do
	for f in "${fds[@]}"; do exec {f}>&-; done
	fds=()
	for _ in $(seq "$IDLE"); do
		exec {f}<>"/dev/tcp/127.0.0.1/$mport" && fds+=("$f")
	done
	n=$((n + 1))
	scrape && ok=$((ok + 1))
	sleep "$PAUSE"
done
echo "idle=$IDLE scrapes=$n ok=$ok failed=$((n - ok))"
