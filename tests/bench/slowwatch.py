# SPDX-License-Identifier: MIT
"""slowwatch.py -- what watchers that never read cost everyone else.

    DLOCKD=build/dlockd python3 tests/bench/slowwatch.py [watchers] [pairs]
        [flood seconds]

Starts a dlockd of its own (--persist none, a free port), then, side by
side in one run: a client doing lock/unlock pairs of m/hot with nobody
watching, and the same with `watchers` TCP connections that WATCH m/*
and never read. Prints, for each, the pairs' cost (µs a pair, and the
ratio to the first), the events sent and dropped (STATS), and how much
the host's TCP memory grew (/proc/net/sockstat).

Then the flood, side by side again with no watcher and with them: two
connections pipelining `LOCK m/f<k>/<n> ttl=1ms wait=0` 500 at a time for
`flood seconds` (each lock granted, then expiring: two events), while
another client measures its PING round trip. Prints the daemon's CPU per
LOCK and that client's PING p50 and p99. A measuring tool
(docs/security.md), not a test: it asserts nothing.
"""
import os
import socket
import sys
import tempfile
import threading
import time

import benchd


def tcp_mem() -> int:
    with open("/proc/net/sockstat") as f:
        for line in f:
            if line.startswith("TCP:"):
                w = line.split()
                return int(w[w.index("mem") + 1]) * os.sysconf("SC_PAGE_SIZE")
    return 0


def call(s: socket.socket, f, line: str) -> str:
    s.sendall((line + "\r\n").encode())
    return f.readline().decode().strip()


def stats(s: socket.socket, f) -> dict:
    head = call(s, f, "STATS")
    out = {}
    for _ in range(int(head.split()[2])):
        k, v = f.readline().decode().split()[:2]
        out[k] = v
    return out


def run(port: int, watchers: int, pairs: int) -> tuple:
    ws = []
    for _ in range(watchers):
        w = socket.create_connection(("127.0.0.1", port))
        wf = w.makefile("rb")
        call(w, wf, "WATCH m/*")
        ws.append((w, wf))
    g = socket.create_connection(("127.0.0.1", port))
    gf = g.makefile("rb")
    call(g, gf, "HELLO owner=gen-%d" % watchers)
    before, mem0, t0 = stats(g, gf), tcp_mem(), time.perf_counter()
    for _ in range(pairs):
        tok = call(g, gf, "LOCK m/hot ttl=10s").split()[3]
        call(g, gf, "UNLOCK m/hot " + tok)
    dt, mem1, after = time.perf_counter() - t0, tcp_mem(), stats(g, gf)
    for w, _ in ws:
        w.close()
    g.close()
    sent = int(after["watch_events"]) - int(before["watch_events"])
    dropped = int(after["watch_events_dropped"]) - int(before["watch_events_dropped"])
    return dt / pairs * 1e6, sent, dropped, (mem1 - mem0) / 1e6


def flood(port: int, proc, watchers: int, seconds: float) -> tuple:
    ws = []
    for _ in range(watchers):
        w = socket.create_connection(("127.0.0.1", port))
        w.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        call(w, w.makefile("rb"), "WATCH m/*")
        ws.append(w)
    stop, locks = time.perf_counter() + seconds, [0, 0]

    def pipeline(k: int) -> None:
        s = socket.create_connection(("127.0.0.1", port))
        f, n = s.makefile("rb"), 0
        while time.perf_counter() < stop:
            s.sendall("".join("LOCK m/f%d/%d ttl=1ms wait=0\r\n" % (k, n + i)
                              for i in range(500)).encode())
            for _ in range(500):
                while f.readline().startswith(b"*"):
                    pass
            n += 500
        locks[k] = n
        s.close()

    p = socket.create_connection(("127.0.0.1", port))
    pf, rtt = p.makefile("rb"), []
    ts = [threading.Thread(target=pipeline, args=(k,)) for k in (0, 1)]
    c0 = benchd.cpu_s(proc.pid)
    for t in ts:
        t.start()
    while time.perf_counter() < stop:
        t0 = time.perf_counter()
        call(p, pf, "PING")
        rtt.append((time.perf_counter() - t0) * 1e3)
        time.sleep(0.005)
    for t in ts:
        t.join()
    cpu = benchd.cpu_s(proc.pid) - c0
    p.close()
    for w in ws:
        w.close()
    rtt.sort()
    return (cpu / max(1, sum(locks)) * 1e6, rtt[len(rtt) // 2],
            rtt[min(len(rtt) - 1, len(rtt) * 99 // 100)])


def main() -> None:
    watchers = int(sys.argv[1]) if len(sys.argv) > 1 else 100
    pairs = int(sys.argv[2]) if len(sys.argv) > 2 else 20000
    seconds = float(sys.argv[3]) if len(sys.argv) > 3 else 5
    dlockd = os.environ.get("DLOCKD", "build/dlockd")
    log = tempfile.NamedTemporaryFile(prefix="slowwatch-", suffix=".log")
    with benchd.daemon(dlockd, log) as (port, proc):
        base = run(port, 0, pairs)
        slow = run(port, watchers, pairs)
        fbase = flood(port, proc, 0, seconds)
        fslow = flood(port, proc, watchers, seconds)
    print(f"{'watchers that never read':>26} {'us/pair':>8} {'ratio':>6} "
          f"{'events sent':>12} {'dropped':>10} {'TCP mem +MB':>11}")
    for n, r in ((0, base), (watchers, slow)):
        print(f"{n:>26} {r[0]:>8.0f} {r[0] / base[0]:>6.1f} "
              f"{r[1]:>12} {r[2]:>10} {r[3]:>11.1f}")
    print(f"\n{'flood: watchers':>26} {'us/LOCK':>8} {'ratio':>6} "
          f"{'other PING p50 ms':>18} {'p99 ms':>8}")
    for n, r in ((0, fbase), (watchers, fslow)):
        print(f"{n:>26} {r[0]:>8.1f} {r[0] / fbase[0]:>6.1f} "
              f"{r[1]:>18.3f} {r[2]:>8.3f}")


if __name__ == "__main__":
    main()
