#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""pyworker.py -- a lock worker of the fault campaign, on the Python client.

    pyworker.py lock <hist> <host> <port> <owner> <locks> <seed> <ms>

The twin of worker.c's ``worker lock`` (same arguments, same history
records, judged by the same checker, check.c): for <ms> or until SIGTERM
it takes random locks through dlockd.Client, with random TTLs, waits and
hold times (some longer than the TTL, so the client renews), refreshes
some with another TTL (shorter or longer: the client then counts on the
shorter deadline from the send), and leaves some held as ``dlock lock``
does (the client is closed without releasing; the worker goes on as a new
owner with a history file of its own). <locks> is "<l>[:<s>:<p>]":
exclusive locks L0.., read/write locks S0.. (shared two times in three),
semaphores P0.. of PERMITS.

Records, one os.write() each on an O_APPEND descriptor, *before* the
worker acts on what they say, times in ms on CLOCK_BOOTTIME (the clock of
the client's local deadlines, as worker.c's dlock_now_ms()):

    G lock token deadline mode   a grant received (x, s or p<n>)
    R lock token deadline        the client renewed: a new deadline
    U lock token                 about to release: no longer holding
    L lock token reason deadline the client says the lease is lost
                                 (1 expired, 2 rejected, 3 unconfirmed)
    E lock rc                    a lock that did not grant (rc: as
                                 libdlock's DLOCK_E* codes)
"""

from __future__ import annotations

import os
import random
import signal
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
# the client of this tree, or the one named (a campaign run from a copy)
sys.path.insert(0, os.environ.get("DLOCKD_PYTHON_CLIENT",
                                  os.path.join(HERE, "..", "..", "client", "python")))

import dlockd  # noqa: E402

PERMITS = 2  # the limit of the semaphores P0..: every worker asks the same

# libdlock's codes, for E records (client/lib/dlock.h)
RC = [
    (dlockd.LimitMismatch, -16),
    (dlockd.UpgradeDeadlock, -17),
    (dlockd.Denied, -19),
    (dlockd.Unavailable, -9),
    (dlockd.ConnectionLost, -7),
    (dlockd.LimitReached, -10),
    (dlockd.LockTimeout, -2),
]

stop = False
hist = -1


def now_ms() -> int:
    return int(time.clock_gettime(time.CLOCK_BOOTTIME) * 1000)


def record(text: str) -> None:
    os.write(hist, f"{now_ms()} {text}\n".encode())


def rc_of(e: BaseException) -> int:
    if isinstance(e, dlockd.LockTimeout) and e.code == "BUSY":
        return -1
    for cls, rc in RC:
        if isinstance(e, cls):
            return rc
    return -14


def on_lost(lease: dlockd.Lease, why: dlockd.LostReason) -> None:
    # on the client's thread, at once; a lease the worker closed its
    # client on (left held) is no loss (goworker too)
    if why == dlockd.LostReason.CLOSED:
        return
    reason = {dlockd.LostReason.EXPIRED: 1, dlockd.LostReason.REJECTED: 2}.get(why, 3)
    record(f"L {lease.name} {lease.token} {reason} {int(lease.deadline * 1000)}")


def hold(lease: dlockd.Lease, ms: float) -> bool:
    """Hold about ms, noting each renewal; True if still valid at the end."""
    end = now_ms() + ms
    seen = lease.deadline
    while not stop and now_ms() < end:
        # the deadline first, also of a lease that just ended (worker.c)
        d = lease.deadline
        if d != seen:
            record(f"R {lease.name} {lease.token} {int(d * 1000)}")
            seen = d
        if not lease.valid:
            return False
        time.sleep(0.01)
    return lease.valid


class Worker:
    def __init__(self, argv: list[str]) -> None:
        hist_path, host, port, owner, locks, seed, ms = argv
        self.hist_base = hist_path[:-5] if hist_path.endswith(".hist") else hist_path
        self.owner_base = owner
        self.owner = owner
        self.n = 0
        parts = [int(x) for x in locks.split(":")] + [0, 0]
        self.nl, self.ns, self.np = parts[0], parts[1], parts[2]
        self.servers = host if ":" in host else f"{host}:{port}"
        self.end = now_ms() + int(ms)
        random.seed(int(seed))
        self.c: dlockd.Client | None = None

    def connect(self) -> None:
        while not stop:
            try:
                self.c = dlockd.Client(
                    self.servers, owner=self.owner, on_lost=on_lost, request_timeout=3.0
                )
                return
            except (dlockd.DlockError, OSError) as e:
                record(f"E - {rc_of(e)}")
                time.sleep(0.2)

    def next_owner(self) -> None:
        """A lease left held: go on as another owner, in another file."""
        global hist
        self.n += 1
        self.owner = f"{self.owner_base}~{self.n}"
        fd = os.open(f"{self.hist_base}~{self.n}.hist",
                     os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o644)
        os.close(hist)
        hist = fd

    def one_lock(self) -> None:
        assert self.c is not None
        ttl = random.choice([0.3, 0.8, 2.0])
        wait = random.choice([0, 0.5, 3.0, None])
        k = random.randrange(self.nl + self.ns + self.np)
        kw: dict = {}
        mode = "x"
        if k < self.nl:
            name = f"L{k}"
        elif k < self.nl + self.ns:
            name = f"S{k - self.nl}"
            if random.randrange(3):
                kw["mode"] = "shared"
                mode = "s"
        else:
            name = f"P{k - self.nl - self.ns}"
            kw["limit"] = PERMITS
            mode = f"p{PERMITS}"
        try:
            lease = self.c.lock(name, ttl=ttl, wait=wait, **kw)
        except dlockd.DlockError as e:
            record(f"E {name} {rc_of(e)}")
            if not isinstance(e, dlockd.LockTimeout):
                time.sleep(0.05)  # the server is away: do not spin
            return
        record(f"G {name} {lease.token} {int(lease.deadline * 1000)} {mode}")
        changed = False
        if random.randrange(4) == 0:
            before = lease.deadline
            new_ttl = random.choice([0.02, 0.15, 0.3, 0.8, 2.0, 3.0])
            # recorded before it is sent: a refresh that shortens the
            # lease ends it from the server's receipt (worker.c)
            if now_ms() + new_ttl * 1000 < before * 1000:
                record(f"R {name} {lease.token} {int(now_ms() + new_ttl * 1000)}")
            try:
                lease.refresh(new_ttl)
            except dlockd.DlockError:
                pass
            changed = True
            # also when no longer valid: a refresh to 20 ms may have
            # ended it already (worker.c, change_ttl)
            if lease.deadline != before:
                record(f"R {name} {lease.token} {int(lease.deadline * 1000)}")
        if k < self.nl and changed and random.randrange(3) == 0:
            # leave it held, as `dlock lock` does: nobody renews it, and
            # its interval lasts until the deadline it was told
            self.c.close(release=False)
            self.c = None
            self.next_owner()
            self.connect()
            return
        # U before the release, held to the end or not: a lease no longer
        # valid is given back too, and its L record, written by the
        # client's thread, may come after the release let the next holder
        # in (worker.c)
        hold(lease, ttl * 1000 * random.choice([0, 1, 2, 6]) / 4)
        record(f"U {name} {lease.token}")
        try:
            lease.release()
        except dlockd.DlockError:
            pass

    def run(self) -> None:
        self.connect()
        while not stop and self.c is not None and now_ms() < self.end:
            self.one_lock()
        if self.c is not None:
            self.c.close()


def main() -> int:
    global hist, stop
    if len(sys.argv) != 9 or sys.argv[1] != "lock":
        print("usage: pyworker.py lock <hist> <host> <port> <owner> <locks> <seed> <ms>",
              file=sys.stderr)
        return 64

    def on_term(sig, frame):  # type: ignore[no-untyped-def]
        global stop
        stop = True

    signal.signal(signal.SIGTERM, on_term)
    signal.signal(signal.SIGINT, on_term)
    # past the run and a grace, a worker still blocked (a wait forever on
    # a lock closed for max_ttl) ends, leaving its history true (worker.c)
    signal.signal(signal.SIGALRM, lambda sig, frame: os._exit(0))
    signal.alarm(int(sys.argv[8]) // 1000 + 30)
    hist = os.open(sys.argv[2], os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o644)
    Worker(sys.argv[2:]).run()
    return 0


if __name__ == "__main__":
    sys.exit(main())
