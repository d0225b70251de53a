# SPDX-License-Identifier: MIT
"""deadlock_tenant.py -- what one user's long wait chain costs another user.

    DLOCKD=build/dlockd python3 tests/bench/deadlock_tenant.py [owners] [seconds]

Starts dlockd daemons of its own (--persist none, free ports, a users file
with two users, mal and alice), one after the other, side by side in one
run:

  * idle: alice's PING round trips, nothing else going on;
  * flood, no chain: the same LOCK+CANCEL flood as below at a lock whose
    holder waits for nothing (what any flood of requests costs);
  * budget: mal builds a wait chain of `owners` owners (each holds m/<i>
    and waits for m/<i+1>), then 8 more of mal's connections put a LOCK
    at the chain's head and CANCEL it, as fast as they can, so that each
    LOCK's deadlock check walks the chain; alice's PINGs meanwhile. The
    shipped max_deadlock_steps_per_user;
  * unbudgeted: the same with max_deadlock_steps_per_user = 1000000000
    (every check walks as far as DL_DEADLOCK_WALK_MAX: the daemon before
    the budget).

Prints alice's PING p50 and p99 (ms) for each and their ratios to idle,
mal's LOCKs a second, the checks that were capped (STATS
deadlock_walks_capped), and the daemon's CPU (% of one core, from /proc)
and per LOCK (with its CANCEL). A measuring tool (docs/security.md), not a test:
it asserts nothing.
"""
import hashlib
import os
import socket
import sys
import tempfile
import threading
import time

import benchd

MAL, ALICE, OPS = "mal-secret-0123456789ab", "alice-secret-0123456789", "ops-secret-0123456789abc"
HAMMERS = 8


def sha(s: str) -> str:
    return "sha256:" + hashlib.sha256(s.encode()).hexdigest()


class Conn:
    def __init__(self, port: int, user: str, secret: str, owner: str = ""):
        self.s = socket.create_connection(("127.0.0.1", port))
        self.f = self.s.makefile("rb")
        self.call("AUTH %s %s" % (user, secret))
        if owner:
            self.call("HELLO owner=%s key=%s-key-0123456789" % (owner, owner))

    def call(self, line: str) -> str:
        self.s.sendall((line + "\r\n").encode())
        return self.f.readline().decode().strip()

    def close(self) -> None:
        self.s.close()


def stats(c: Conn) -> dict:
    head = c.call("STATS")
    out = {}
    for _ in range(int(head.split()[2])):
        k, v = c.f.readline().decode().split()[:2]
        out[k] = v
    return out


def pings(port: int, seconds: float) -> list:
    a = Conn(port, "alice", ALICE)
    out, end = [], time.monotonic() + seconds
    while time.monotonic() < end:
        t0 = time.perf_counter()
        a.call("PING")
        out.append((time.perf_counter() - t0) * 1e3)
        time.sleep(0.002)
    a.close()
    return sorted(out)


def hammer(port: int, i: int, stop: threading.Event, counts: list) -> None:
    c = Conn(port, "mal", MAL, "x%d" % i)
    n = 0
    while not stop.is_set():
        # pipelined: a LOCK that waits (its check walks the chain), and
        # its CANCEL
        c.s.sendall(b"LOCK m/0 ttl=1m wait=10m\r\nCANCEL m/0\r\n")
        for _ in range(2):
            c.f.readline()
        n += 1
    counts[i] = n
    c.close()


def run(dlockd: str, d: str, owners: int, seconds: float, steps: int, attack: bool) -> tuple:
    conf = os.path.join(d, "dlockd-%d.conf" % steps)
    with open(conf, "w") as f:
        f.write("[server]\nusers_file = %s/users\n[limits]\n" % d)
        f.write("max_connections_per_user = 5000\nmax_unauth_per_address = 5000\n")
        f.write("max_deadlock_steps_per_user = %d\n" % steps)
    with open(os.path.join(d, "dlockd-%d.log" % steps), "w") as log, \
            benchd.daemon(dlockd, log, "-c", conf) as (port, p):
        chain, stop, counts, ts = [], threading.Event(), [0] * HAMMERS, []
        if attack:
            for i in range(owners):
                c = Conn(port, "mal", MAL, "m%d" % i)
                c.call("LOCK m/%d ttl=10m" % i)
                chain.append(c)
            for i in range(owners - 1):
                chain[i].call("LOCK m/%d ttl=10m wait=10m" % (i + 1))
            ts = [threading.Thread(target=hammer, args=(port, i, stop, counts)) for i in range(HAMMERS)]
            for t in ts:
                t.start()
            time.sleep(0.5)
        ops = Conn(port, "ops", OPS)
        before = int(stats(ops)["deadlock_walks_capped"])
        c0, t0 = benchd.cpu_s(p.pid), time.monotonic()
        lat = pings(port, seconds)
        cpu = 100.0 * (benchd.cpu_s(p.pid) - c0) / (time.monotonic() - t0)
        capped = int(stats(ops)["deadlock_walks_capped"]) - before
        stop.set()
        for t in ts:
            t.join()
        for c in chain:
            c.close()
        ops.close()
    p50, p99 = lat[len(lat) // 2], lat[int(len(lat) * 0.99)]
    return p50, p99, sum(counts) / (seconds + 0.5), capped, cpu


def main() -> None:
    owners = int(sys.argv[1]) if len(sys.argv) > 1 else 990
    seconds = float(sys.argv[2]) if len(sys.argv) > 2 else 5
    dlockd = os.environ.get("DLOCKD", "build/dlockd")
    with tempfile.TemporaryDirectory(prefix="deadlock-tenant-") as d:
        with open(os.path.join(d, "users"), "w") as f:
            f.write("mal %s lock=m/ read=m/\n" % sha(MAL))
            f.write("alice %s lock=a/ read=a/\n" % sha(ALICE))
            f.write("ops %s read=* admin\n" % sha(OPS))
        os.chmod(os.path.join(d, "users"), 0o600)
        rows = [
            ("idle", run(dlockd, d, owners, seconds, 262144, False)),
            ("flood, no chain", run(dlockd, d, 1, seconds, 262144, True)),
            ("budget (shipped)", run(dlockd, d, owners, seconds, 262144, True)),
            ("unbudgeted", run(dlockd, d, owners, seconds, 1000000000, True)),
        ]
    base50, base99 = rows[0][1][0], rows[0][1][1]
    print("mal's chain: %d owners, %d connections LOCK+CANCEL at its head; alice PINGs for %g s" % (owners, HAMMERS, seconds))
    print("%-18s %9s %9s %8s %8s %12s %10s %8s %10s" % ("", "p50 ms", "p99 ms", "p50 x", "p99 x", "mal LOCK/s", "capped", "CPU %", "us/LOCK"))
    for name, (p50, p99, rate, capped, cpu) in rows:
        per = cpu * 1e4 / rate if rate else 0.0
        print("%-18s %9.3f %9.3f %8.1f %8.1f %12.0f %10d %8.1f %10.1f" % (name, p50, p99, p50 / base50, p99 / base99, rate, capped, cpu, per))


if __name__ == "__main__":
    main()
