#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""failover.py -- how soon a new active answers after a fail-over
(make bench-failover).

Two daemons, nodes a and b, on one private redis-server (appendfsync
always). The active is killed (kill -9) and, once the other says it is
the active, the time of its first TRYLOCK is measured; the killed node
comes back as the standby, and the next round kills the new active:
ROUNDS (default 4) fail-overs in a row. Before b5636bf the second and
later ones waited ~5 s for the dead former active (its field in
<prefix>standbys).

Environment: DLOCKD (binary), ROUNDS.
"""
import os
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(__file__))
import benchd  # noqa: E402

DLOCKD = os.environ.get("DLOCKD", "build/dlockd")
ROUNDS = int(os.environ.get("ROUNDS", "4"))


def ask(port, line, timeout=20.0):
    import socket
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        f = s.makefile("rwb", buffering=0)
        f.write(line.encode() + b"\r\n")
        return f.readline().decode().strip()


def role(port):
    try:
        return ask(port, "HELLO", 2)
    except OSError:
        return ""


def main():
    tmp = tempfile.mkdtemp(prefix="dlockd-bench-failover-")
    rport = benchd.free_port()
    ports = {"a": benchd.free_port(), "b": benchd.free_port()}
    redis = subprocess.Popen(
        ["redis-server", "--port", str(rport), "--dir", tmp, "--appendonly",
         "yes", "--appendfsync", "always", "--save", "", "--bind",
         "127.0.0.1"], stdout=subprocess.DEVNULL)
    time.sleep(0.3)

    def start(node):
        return subprocess.Popen(
            [DLOCKD, "--port", str(ports[node]), "--persist", "redis",
             "--redis", f"redis://127.0.0.1:{rport}", "--node-id", node],
            stdout=subprocess.DEVNULL,
            stderr=open(os.path.join(tmp, node + ".log"), "a"))

    procs = {"a": start("a")}
    time.sleep(1.0)
    procs["b"] = start("b")
    try:
        while "role=active" not in role(ports["a"]):
            time.sleep(0.05)
        time.sleep(1.5)
        active = "a"
        print("fail-over  active after  first TRYLOCK")
        for n in range(ROUNDS):
            other = "b" if active == "a" else "a"
            procs[active].kill()
            procs[active].wait()
            t0 = time.monotonic()
            while "role=active" not in role(ports[other]):
                time.sleep(0.02)
            t1 = time.monotonic()
            r = ask(ports[other], f"TRYLOCK x{n} ttl=5s")
            t2 = time.monotonic()
            assert r.startswith("OK GRANTED"), r
            print(f"{n + 1:>9}  {t1 - t0:>10.2f} s  {1000 * (t2 - t1):>10.0f} ms")
            procs[active] = start(active)
            time.sleep(3)
            active = other
    finally:
        for p in procs.values():
            p.kill()
        redis.kill()


if __name__ == "__main__":
    main()
