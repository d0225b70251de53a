#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""stock.py -- the Python client by example: many buyers, a few items,
one lock (the twin of stock.c).

    stock.py [--host H] [--port P] [--buyers 1000] [--items 10]
             [--processes 4] [--file PATH]

The stock is a file shared by every process: one line, "<count> <token>",
the items left and the fencing token of the last write. The parent puts
<items> in it, starts <processes> processes, and each runs its share of
<buyers> threads sharing one dlockd.Client (a client is thread-safe; its
threads take a name in turn, as with a mutex). A buyer:

    with client.lock("stock", ttl=10) as lease:
        read the file; if an item is left, write count - 1 with lease.token

Fencing: the file keeps the token of its last writer and refuses a write
with a smaller one, so a buyer whose lease ran out while it was paused
cannot overwrite newer state. Exit status 0 when exactly <items> were
sold and the file ends at 0.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import sys
import tempfile
import threading

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))

import dlockd  # noqa: E402

RECORD = "{:010d} {:020d}\n"  # rewritten in place


def read_stock(fd: int) -> tuple[int, int]:
    count, token = os.pread(fd, 32, 0).split()
    return int(count), int(token)


def write_stock(fd: int, count: int, token: int) -> bool:
    """The fenced write: refused if the file saw a larger token."""
    if token < read_stock(fd)[1]:
        return False
    os.pwrite(fd, RECORD.format(count, token).encode(), 0)
    return True


def shop(server: str, path: str, buyers: int, out: multiprocessing.Queue) -> None:
    fd = os.open(path, os.O_RDWR)
    sold = errors = 0
    mu = threading.Lock()
    with dlockd.Client(server) as client:

        def buyer() -> None:
            nonlocal sold, errors
            try:
                with client.lock("stock", ttl=10) as lease:
                    count, _ = read_stock(fd)
                    if count > 0:
                        if write_stock(fd, count - 1, lease.token):
                            with mu:
                                sold += 1
                        else:
                            print(f"stock: write refused (token {lease.token} is stale)")
            except dlockd.DlockError as e:
                print(f"stock: {e}", file=sys.stderr)
                with mu:
                    errors += 1

        threads = [threading.Thread(target=buyer) for _ in range(buyers)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    out.put((sold, errors))


def main() -> int:
    ap = argparse.ArgumentParser(description="many buyers, a few items, one lock")
    ap.add_argument("--host", default=os.environ.get("DLOCK_HOST", "127.0.0.1"))
    ap.add_argument("--port", type=int, default=int(os.environ.get("DLOCK_PORT", "7420")))
    ap.add_argument("--buyers", type=int, default=1000)
    ap.add_argument("--items", type=int, default=10)
    ap.add_argument("--processes", type=int, default=4)
    ap.add_argument("--file")
    a = ap.parse_args()
    path = a.file or tempfile.mkstemp(prefix="dlock-stock-")[1]
    with open(path, "w") as f:
        f.write(RECORD.format(a.items, 0))
    out: multiprocessing.Queue = multiprocessing.Queue()
    server = f"{a.host}:{a.port}"
    procs = [
        multiprocessing.Process(
            target=shop,
            args=(server, path, a.buyers // a.processes + (i < a.buyers % a.processes), out),
        )
        for i in range(a.processes)
    ]
    for p in procs:
        p.start()
    results = [out.get() for _ in procs]
    for p in procs:
        p.join()
    sold = sum(s for s, _ in results)
    errors = sum(e for _, e in results)
    fd = os.open(path, os.O_RDONLY)
    left, token = read_stock(fd)
    os.close(fd)
    if not a.file:
        os.unlink(path)
    print(f"sold {sold} of {a.items} items ({a.buyers} buyers in {a.processes} "
          f"processes; stock file at {left}, last token {token})")
    return 0 if sold == a.items and left == 0 and errors == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
