#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""pyclientbench.py -- the Python client's driver of `make bench-clients`
(tests/bench/clients.py), the twin of clientbench.c and gobench:

    pyclientbench.py pairs|handoff <servers> <clients> <seconds>

Each client is a process of its own with one dlockd.Client (the Python
client in threads of one process would measure the interpreter's lock,
not the client): pairs takes and releases a lock of its own name (wait
0); handoff takes ONE lock, waiting for it, releases it at once and asks
again, keeping the wait of each acquisition. Prints one JSON line:
{"ops", "secs", "errors", "waits_ms"}. The TTL (10 s) outlives a run.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "client", "python"))

import dlockd  # noqa: E402

TTL = 10.0


def client(mode: str, servers: str, i: int, ready, go, end, out) -> None:  # type: ignore[no-untyped-def]
    c = dlockd.Client(servers, describe=False)
    ready.release()
    go.wait()
    name = f"h.{os.getppid()}" if mode == "handoff" else f"b.{os.getppid()}.{i}"
    wait = None if mode == "handoff" else 0
    ops = errors = 0
    waits: list[float] = []
    while time.monotonic() < end.value:
        t0 = time.monotonic()
        try:
            lease = c.lock(name, ttl=TTL, wait=wait)
        except dlockd.DlockError:
            errors += 1
            continue
        if mode == "handoff":
            waits.append((time.monotonic() - t0) * 1000)
        try:
            lease.release()
        except dlockd.DlockError:
            errors += 1
        ops += 1
    c.close()
    out.put((ops, errors, waits))


def main() -> int:
    if len(sys.argv) != 5 or sys.argv[1] not in ("pairs", "handoff"):
        print("usage: pyclientbench.py pairs|handoff <servers> <clients> <seconds>",
              file=sys.stderr)
        return 64
    mode, servers, n, secs = sys.argv[1], sys.argv[2], int(sys.argv[3]), float(sys.argv[4])
    ctx = multiprocessing.get_context("fork")
    ready, go, end, out = ctx.Semaphore(0), ctx.Event(), ctx.Value("d", 0.0), ctx.Queue()
    ps = [ctx.Process(target=client, args=(mode, servers, i, ready, go, end, out))
          for i in range(n)]
    for p in ps:
        p.start()
    for _ in ps:
        ready.acquire()  # every client connected
    t0 = time.monotonic()
    end.value = t0 + secs
    go.set()
    res = [out.get() for _ in ps]
    elapsed = time.monotonic() - t0
    for p in ps:
        p.join()
    print(json.dumps({"ops": sum(r[0] for r in res), "secs": elapsed,
                      "errors": sum(r[1] for r in res),
                      "waits_ms": [w for r in res for w in r[2]]}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
