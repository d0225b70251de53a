#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""fenced_sqlite.py -- a database write fenced by the lock's token.

    fenced_sqlite.py [--host H] [--port P] [--db PATH]

A lease can end while its holder is paused (a long GC, a stopped VM, a
slow disk): the holder wakes up believing it holds the lock while
another process does. The fence is in the data: each row keeps the token
of its last writer, and an UPDATE carries the writer's token and applies
only if it is larger -- one statement, so the check and the write are
atomic in the database:

    UPDATE account SET balance = ?, fence = ? WHERE id = ? AND fence < ?

The demo plays it out: writer A takes the lock for 1 s and "pauses" past
its lease (renewal off, as if its process were frozen), writer B then
takes the lock (a larger token) and writes, and A's late write is
refused. Exit status 0 when it is.
"""

from __future__ import annotations

import argparse
import os
import sqlite3
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))

import dlockd  # noqa: E402


def fenced_update(db: sqlite3.Connection, account: str, balance: int, token: int) -> bool:
    """Write balance if no writer with a larger token came before; True if
    the row took it."""
    with db:
        cur = db.execute(
            "UPDATE account SET balance = ?, fence = ? WHERE id = ? AND fence < ?",
            (balance, token, account, token),
        )
    return cur.rowcount == 1


def main() -> int:
    ap = argparse.ArgumentParser(description="a database write fenced by the lock's token")
    ap.add_argument("--host", default=os.environ.get("DLOCK_HOST", "127.0.0.1"))
    ap.add_argument("--port", type=int, default=int(os.environ.get("DLOCK_PORT", "7420")))
    ap.add_argument("--db")
    a = ap.parse_args()
    if a.db:
        return demo(a, a.db)
    with tempfile.TemporaryDirectory(prefix="dlock-fence-") as d:
        return demo(a, os.path.join(d, "bank.db"))


def demo(a: argparse.Namespace, path: str) -> int:
    db = sqlite3.connect(path)
    with db:
        db.execute("CREATE TABLE IF NOT EXISTS account "
                   "(id TEXT PRIMARY KEY, balance INTEGER, fence INTEGER)")
        db.execute("INSERT OR REPLACE INTO account VALUES ('alice', 100, 0)")
    server = f"{a.host}:{a.port}"

    with dlockd.Client(server, renew=False) as ca, dlockd.Client(server) as cb:
        lease_a = ca.lock("account/alice", ttl=1)
        print(f"A holds the lock, token {lease_a.token}; A pauses...")
        time.sleep(1.5)  # past its lease: the server let it go
        with cb.lock("account/alice", ttl=10, wait=5) as lease_b:
            ok = fenced_update(db, "alice", 150, lease_b.token)
            print(f"B holds the lock, token {lease_b.token}; B's write: "
                  f"{'applied' if ok else 'refused'}")
        late = fenced_update(db, "alice", 90, lease_a.token)
        print(f"A wakes up (lease valid: {lease_a.valid}) and writes with token "
              f"{lease_a.token}: {'applied' if late else 'refused'}")
    balance, fence = db.execute(
        "SELECT balance, fence FROM account WHERE id = 'alice'").fetchone()
    print(f"alice: balance {balance}, last writer's token {fence}")
    db.close()
    return 0 if ok and not late and balance == 150 else 1


if __name__ == "__main__":
    sys.exit(main())
