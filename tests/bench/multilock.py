#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""multilock.py -- what taking k locks at once costs (make bench-multilock).

One dlockd on a private redis-server (appendfsync everysec), and the same
redis-server for the Redis recipe, side by side in one run. For k = 2, 8
and 64 names, CONNS client processes each take and give back their own k
locks (distinct names: this measures the cost, not contention) as fast as
they can, three ways:

  - multi:   dlockd, one `LOCK n1 .. nk` (all or none, one round trip),
             then the k UNLOCKs pipelined in one write;
  - singles: dlockd, k `LOCK` one after the other (the order a client
             that takes several locks must keep, each waiting for its
             reply), then the k UNLOCKs pipelined;
  - recipe:  Redis, k `SET name token NX PX ttl` one after the other (as
             Redisson's MultiLock takes its locks), then the k
             compare-and-delete scripts pipelined.

Reported: acquisitions of all k per second (each with its release), and
the ratios multi/singles and multi/recipe. The clients are plain sockets
in Python, the same driver for all three: the figures include the
client's cost per round trip, equal for the three.

Environment: DLOCKD (binary), KS (default "2 8 64"), CONNS (default 4),
SECONDS (default 3 per measure).
"""
import multiprocessing
import os
import socket
import subprocess
import sys
import tempfile
import time

DLOCKD = os.environ.get("DLOCKD", "build/dlockd")
KS = [int(k) for k in os.environ.get("KS", "2 8 64").split()]
CONNS = int(os.environ.get("CONNS", "4"))
SECONDS = float(os.environ.get("SECONDS", "3"))
TTL_MS = 30000
DEL_SCRIPT = ("if redis.call('GET', KEYS[1]) == ARGV[1] then "
              "return redis.call('DEL', KEYS[1]) else return 0 end")

sys.path.insert(0, os.path.dirname(__file__))
import benchd  # noqa: E402


class Conn:
    def __init__(self, port):
        self.s = socket.create_connection(("127.0.0.1", port))
        self.s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.buf = b""

    def send(self, data):
        self.s.sendall(data)

    def line(self):
        while b"\r\n" not in self.buf:
            chunk = self.s.recv(65536)
            if not chunk:
                raise RuntimeError("connection closed")
            self.buf += chunk
        line, self.buf = self.buf.split(b"\r\n", 1)
        return line


def resp(*args):
    out = [b"*%d\r\n" % len(args)]
    for a in args:
        a = a if isinstance(a, bytes) else str(a).encode()
        out.append(b"$%d\r\n%s\r\n" % (len(a), a))
    return b"".join(out)


def worker(how, port, k, wid, seconds, out):
    names = [b"w%d-%02d" % (wid, i) for i in range(k)]
    c = Conn(port)
    if how != "recipe":
        c.send(b"HELLO owner=bench%d\r\n" % wid)
        c.line()
    n = 0
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        tokens = []
        if how == "multi":
            c.send(b"LOCK " + b" ".join(names) + b" ttl=%d\r\n" % TTL_MS)
            head = c.line()
            assert head.startswith(b"OK LOCKED"), head
            for _ in names:
                tokens.append(c.line().split()[2])
        elif how == "singles":
            for name in names:
                c.send(b"LOCK %s ttl=%d\r\n" % (name, TTL_MS))
                r = c.line()
                assert r.startswith(b"OK GRANTED"), r
                tokens.append(r.split()[3])
        else:
            for name in names:
                tok = b"%d-%d" % (wid, n)
                c.send(resp("SET", name, tok, "NX", "PX", TTL_MS))
                r = c.line()
                assert r == b"+OK", r
                tokens.append(tok)
        if how == "recipe":
            c.send(b"".join(resp("EVAL", DEL_SCRIPT, 1, name, tok)
                            for name, tok in zip(names, tokens)))
            for _ in names:
                c.line()
        else:
            c.send(b"".join(b"UNLOCK %s %s\r\n" % (name, tok)
                            for name, tok in zip(names, tokens)))
            for _ in names:
                c.line()
        n += 1
    out.put(n)


def measure(how, port, k):
    q = multiprocessing.Queue()
    ps = [multiprocessing.Process(target=worker,
                                  args=(how, port, k, w, SECONDS, q))
          for w in range(CONNS)]
    for p in ps:
        p.start()
    total = sum(q.get() for _ in ps)
    for p in ps:
        p.join()
    return total / SECONDS


def main():
    tmp = tempfile.mkdtemp(prefix="dlockd-bench-multi-")
    rport, port = benchd.free_port(), benchd.free_port()
    rdir = os.path.join(tmp, "redis")
    os.mkdir(rdir)
    redis = subprocess.Popen(
        ["redis-server", "--port", str(rport), "--dir", rdir,
         "--appendonly", "yes", "--appendfsync", "everysec", "--save", "",
         "--bind", "127.0.0.1"], stdout=subprocess.DEVNULL)
    time.sleep(0.3)
    log = open(os.path.join(tmp, "dlockd.log"), "w")
    daemon = subprocess.Popen(
        [DLOCKD, "--port", str(port), "--persist", "redis", "--redis",
         f"redis://127.0.0.1:{rport}", "-l", "warning"],
        stdout=log, stderr=log)
    try:
        for _ in range(500):
            try:
                c = Conn(port)
                c.send(b"PING\r\n")
                if c.line().startswith(b"OK"):
                    break
            except OSError:
                time.sleep(0.01)
        print(f"multi-locks: {CONNS} connections, distinct names, "
              f"Redis appendfsync everysec, {SECONDS:g} s per measure; "
              "acquisitions of all k names (with their release) per second")
        print(f"{'k':>4} {'multi':>10} {'singles':>10} {'recipe':>10} "
              f"{'multi/singles':>14} {'multi/recipe':>13}")
        for k in KS:
            m = measure("multi", port, k)
            s = measure("singles", port, k)
            r = measure("recipe", rport, k)
            print(f"{k:>4} {m:>10.0f} {s:>10.0f} {r:>10.0f} "
                  f"{m / s:>13.2f}x {m / r:>12.2f}x")
    finally:
        daemon.terminate()
        daemon.wait()
        redis.terminate()
        redis.wait()


if __name__ == "__main__":
    main()
