# SPDX-License-Identifier: MIT
"""dlockd -- the Python client of the dlockd lock server.

::

    import dlockd

    with dlockd.Client("db1:7420,db2:7420") as c:
        with c.lock("orders/42", ttl=10, wait=5) as lease:
            write_with_fence(lease.token)

``Client`` runs one background thread per client (reads, renewals,
reconnects); ``AsyncClient`` does the same on an asyncio event loop. Both
drive one protocol state machine that knows no sockets, so they behave
alike, and like libdlock (``client/lib/dlock.h``): leases counted from the
moment their request was sent, renewed every TTL/3 and declared lost
before the server could grant them again; reconnects to the same owner
with its key, with leases confirmed and waits queued again; fail-over
across a list of daemons. Durations are seconds (floats) or
``datetime.timedelta``, tokens ints.

A lease lost while held is logged at once (logger ``"dlockd"``, WARNING),
and the ``with`` block of the lease ends with LockLost; in asyncio the
``async with`` block is cancelled at the loss. ``close()`` gives back the
leases still held (``close(release=False)`` keeps them). ``watch()``
gives the changes of locks one does not hold, as an iterator.
``lock_all()`` acquires several locks at once, all or none (``Leases``).
A partitioned service (``MAP`` at the first connect) is routed: each name
to its partition's daemons, following ``MOVED`` (``Moved`` when it
cannot), with one ordinary client per partition underneath; a lease
follows its name when its slot moves to another partition (same token).
"""

from ._async import (
    AsyncClient,
    AsyncLease,
    AsyncLeases,
    AsyncRWLock,
    AsyncSemaphore,
    AsyncWatch,
)
from ._errors import (
    ConnectionLost,
    Deadlock,
    Denied,
    DlockError,
    HeldByOwner,
    LimitMismatch,
    LimitReached,
    LockLost,
    LockTimeout,
    Moved,
    NotHolder,
    ProtocolError,
    Unavailable,
    ClusterMismatch,
    UpgradeDeadlock,
)
from ._sync import Client, Lease, Leases, RWLock, Semaphore, Watch
from ._types import Holder, Holders, LocksPage, LostReason, Status, WatchEvent

__version__ = "0.4.0"

__all__ = [
    "AsyncClient",
    "AsyncLease",
    "AsyncLeases",
    "AsyncRWLock",
    "AsyncSemaphore",
    "AsyncWatch",
    "Client",
    "ConnectionLost",
    "Deadlock",
    "Denied",
    "DlockError",
    "HeldByOwner",
    "Holder",
    "Holders",
    "Lease",
    "Leases",
    "LimitMismatch",
    "LimitReached",
    "LockLost",
    "LockTimeout",
    "LocksPage",
    "LostReason",
    "Moved",
    "NotHolder",
    "ProtocolError",
    "RWLock",
    "Semaphore",
    "Status",
    "Unavailable",
    "ClusterMismatch",
    "UpgradeDeadlock",
    "Watch",
    "WatchEvent",
    "__version__",
]
