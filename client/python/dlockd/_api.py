# SPDX-License-Identifier: MIT
"""What the sync and asyncio faces share: argument checks, the lease's
read-only view, the client registry that fork() walks."""

from __future__ import annotations

import logging
import os
import weakref
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Sequence, overload

from . import _wire as wire
from ._core import LeaseState, now_ms
from ._errors import LockLost
from ._types import LostReason, lost_why

log = logging.getLogger("dlockd")

MODES = ("exclusive", "shared")
# The longest lock-delay the server takes (LOCK delay=, DL_LOCK_DELAY_MAX_MS).
DELAY_MAX_MS = 60000


@dataclass
class LockArgs:
    """A lock request, checked and in wire units."""

    name: str
    ttl_ms: float | None  # None: the server's default TTL
    wait_ms: float  # -1 forever, 0 try once
    shared: bool
    limit: int
    opts: dict[str, Any]


def wait_of(wait: Any, blocking: Any, blocking_timeout: Any, timeout: Any) -> Any:
    """``wait`` from redis-py's ``blocking``/``blocking_timeout`` (which
    map one to one: ``blocking=False`` is ``wait=0``, ``blocking_timeout=t``
    is ``wait=t``, ``blocking=True`` alone waits for ever); redis-py's
    ``timeout`` (a lease's length there) is refused, naming dlockd's
    ``ttl``."""
    if timeout is not _UNSET:
        raise TypeError(
            "dlockd: lock() has no timeout=: the lease's length is ttl= (seconds), "
            "how long to wait for the lock is wait= (None: for ever, 0: try once)"
        )
    if blocking is _UNSET and blocking_timeout is _UNSET:
        return wait
    if wait is not None:
        raise TypeError("dlockd: give wait= or blocking=/blocking_timeout=, not both")
    if blocking is False:
        if blocking_timeout not in (_UNSET, None):
            raise TypeError("dlockd: blocking=False does not wait: no blocking_timeout=")
        return 0
    if blocking not in (_UNSET, True):
        raise TypeError(f"blocking is True or False, not {blocking!r}")
    return None if blocking_timeout is _UNSET else blocking_timeout


def lock_args(
    name: str,
    ttl: wire.Seconds | None,
    wait: wire.Seconds | None,
    mode: str,
    limit: int | None,
    max_hold: Any,
    renew: Any,
    on_lost: Callable[..., Any] | None,
    on_at_risk: Callable[..., Any] | None,
    warn: wire.Seconds | None = None,
    delay: wire.Seconds | None = None,
    notify_waiters: bool = False,
    value: str | None = None,
) -> LockArgs:
    wire.check_name(name)
    ttl_ms = float(wire.ms_of(ttl, "ttl")) if ttl is not None else None
    wait_ms = -1.0 if wait is None else float(wire.ms_of(wait, "wait", minimum=0))
    if mode not in MODES:
        raise ValueError(f"mode is 'exclusive' or 'shared', not {mode!r}")
    n = 0
    if limit is not None:
        if isinstance(limit, bool) or not isinstance(limit, int):
            raise TypeError("limit is an int")
        if not 1 <= limit <= wire.LIMIT_MAX:
            raise ValueError(f"limit out of range: 1 to {wire.LIMIT_MAX}")
        if mode == "shared" and limit > 1:
            raise ValueError("a semaphore's holders are alike: mode='shared' with limit > 1")
        n = limit
    opts: dict[str, Any] = {}
    if max_hold is not _UNSET:
        opts["max_hold"] = None if max_hold is None else float(wire.ms_of(max_hold, "max_hold"))
    if renew is not _UNSET:
        opts["renew"] = bool(renew)
    if on_lost is not None:
        opts["on_lost"] = on_lost
    if on_at_risk is not None:
        opts["on_at_risk"] = on_at_risk
    if warn is not None:
        # the server's * EXPIRING when this much of the lease remains
        warn_ms = float(wire.ms_of(warn, "warn", minimum=0))
        if ttl_ms is not None and warn_ms >= ttl_ms:
            raise ValueError("warn must be less than ttl")
        if warn_ms:
            opts["warn"] = warn_ms
    if delay is not None:
        # the lock's lock-delay after an end its holder did not ask for
        delay_ms = float(wire.ms_of(delay, "delay", minimum=0))
        if delay_ms > DELAY_MAX_MS:
            raise ValueError("delay out of range: at most 60 seconds (a lock's delay)")
        if delay_ms:
            opts["delay"] = delay_ms
    if not isinstance(notify_waiters, bool):
        raise TypeError(f"notify_waiters is True or False, not {notify_waiters!r}")
    if notify_waiters:
        # LOCK notify=waiters: the server's "* WAITING" when others wait
        opts["notify_waiters"] = True
    if value is not None:
        if not isinstance(value, str):
            raise TypeError(f"value is a str, not {value!r}")
        if value:  # "": none, as libdlock's lo.value
            opts["value"] = wire.desc_encode(value, wire.VALUE_MAX)
    return LockArgs(name, ttl_ms, wait_ms, mode == "shared", n, opts)


@dataclass
class LockAllArgs:
    """A multi-lock request, checked and in wire units: the names in byte
    order (the server's, which takes them so; the first names the
    multi-lock in its replies)."""

    names: list[str]
    ttl_ms: float | None
    wait_ms: float
    opts: dict[str, Any]


# What a multi-lock's line holds besides its names, at most: " ttl=" and
# " wait=" of 13 digits, " req=" of 20, " id=p" and a 10-digit sequence
MULTI_OPTS_MAX = 96


def lock_all_args(
    names: Any,
    ttl: wire.Seconds | None,
    wait: wire.Seconds | None,
    max_hold: Any,
    renew: Any,
    on_lost: Callable[..., Any] | None,
    on_at_risk: Callable[..., Any] | None,
) -> LockAllArgs:
    """lock_all()'s arguments: 1 to MULTI_MAX distinct names (one is the
    ordinary lock), whose request line fits the protocol's 1024 bytes."""
    if isinstance(names, (str, bytes)):
        raise TypeError("lock_all takes a list of names, not one name (that is lock())")
    names = list(names)
    for name in names:
        wire.check_name(name)
    if not 1 <= len(names) <= wire.MULTI_MAX:
        raise ValueError(f"lock_all: 1 to {wire.MULTI_MAX} names, not {len(names)}")
    if len(set(names)) != len(names):
        twice = sorted({n for n in names if names.count(n) > 1})
        raise ValueError(f"lock_all: a name given twice: {' '.join(twice)}")
    if len("LOCK " + " ".join(names)) + MULTI_OPTS_MAX > wire.LINE_MAX:
        raise ValueError(
            f"lock_all: the names are too long for one request line "
            f"({wire.LINE_MAX} bytes with its options)"
        )
    a = lock_args(names[0], ttl, wait, "exclusive", None, max_hold, renew, on_lost, on_at_risk)
    # byte order: the names are ASCII, whose str order is memcmp's
    return LockAllArgs(sorted(names), a.ttl_ms, a.wait_ms, a.opts)


def value_arg(value: str) -> str:
    """A proclaimed value as it is sent (a text value, at most VALUE_MAX
    bytes: see ``wire.desc_encode``); an empty one is refused."""
    if not isinstance(value, str):
        raise TypeError(f"value is a str, not {value!r}")
    if not value:
        raise ValueError("proclaim: the value is empty (resigning is release())")
    return wire.desc_encode(value, wire.VALUE_MAX)


class _Unset:
    def __repr__(self) -> str:
        return "<default>"


_UNSET: Any = _Unset()


def lost_error(ls: LeaseState, cancelled: bool = False) -> LockLost:
    """The LockLost that ends a block whose lease was lost: its message
    says why ("broken by alice", "expired at the server", ...)."""
    why = lost_why(ls.lost, ls.broken_by)
    what = f"the lease of {ls.name!r} (token {ls.token}) was lost"
    if cancelled:
        msg = f"{what}: {why}; the block was cancelled"
    else:
        msg = f"{what} before the end of the block: {why}"
    err = LockLost(msg)
    err.name, err.token, err.reason, err.broken_by = ls.name, ls.token, ls.lost, ls.broken_by
    return err


def log_lost(ls: LeaseState) -> None:
    """Say a loss on the "dlockd" logger (WARNING), as it happens."""
    log.warning(
        "lost the lease of %r (token %d): %s",
        ls.name,
        ls.token,
        lost_why(ls.lost, ls.broken_by),
    )


REDIS_ACQUIRE = (
    "dlockd: c.lock() acquires at once and returns the held lease; there is no "
    "acquire(): for acquire(blocking=False) use c.lock(name, wait=0) (LockTimeout "
    "if busy), for blocking_timeout=t use c.lock(name, wait=t) (or "
    "c.lock(name, blocking=False) / c.lock(name, blocking_timeout=t))"
)


class LeaseView:
    """The read-only part of a lease, for both faces."""

    _ls: LeaseState

    @property
    def name(self) -> str:
        """The lock's name."""
        return self._ls.name

    @property
    def token(self) -> int:
        """The fencing token: larger than every token granted before it.
        Give it to the resource the lock protects, which refuses writes
        with a token smaller than the largest it has seen."""
        return self._ls.token

    @property
    def mode(self) -> str:
        """``exclusive``, ``shared`` or ``semaphore``."""
        return self._ls.mode

    @property
    def ttl(self) -> float:
        """The TTL renewals ask for, in seconds."""
        return self._ls.ttl / 1000.0

    @property
    def deadline(self) -> float:
        """The local deadline: seconds on CLOCK_BOOTTIME
        (``time.clock_gettime(time.CLOCK_BOOTTIME)``); renewals move it."""
        return self._ls.deadline / 1000.0

    @property
    def reason(self) -> LostReason | None:
        """Why the lease was lost, or None while it is not."""
        return self._ls.lost

    @property
    def broken_by(self) -> str:
        """The user whose BREAK ended the lease ("" otherwise)."""
        return self._ls.broken_by

    @property
    def broken(self) -> bool:
        """True once a ``BREAK`` (by ``broken_by``) ended the lease."""
        return self._ls.lost is LostReason.EXPIRED and bool(self._ls.broken_by)

    @property
    def waiters(self) -> int:
        """How many requests wait for the lock, as the server last said
        (``* WAITING``, for a lease acquired with ``notify_waiters=True``):
        0 before it said anything. Not lowered when the queue shrinks (the
        server says nothing then); for a holder that polls rather than be
        called (``on_contended``)."""
        return self._ls.waiters

    @property
    def value(self) -> str:
        """The lease's value (``lock(value=)``, then ``proclaim()``): what
        it says to whoever looks at the lock, as they read it (decoded:
        a character that is not printable ASCII is '?', and it is cut at
        128 bytes as sent); "" when it has none."""
        return wire.desc_decode(self._ls.value)

    @property
    def owned(self) -> bool:
        """False in a child process after fork(): the lease is the
        parent's, and this process neither renews nor releases it.
        (redis-py's ``lock.owned()`` is ``lease.valid`` here: no round
        trip; ``check()`` asks the server.)"""
        return self._ls.owned

    def acquire(self, *args: Any, **kw: Any) -> Any:
        """Not here: redis-py's habit. ``c.lock()`` already acquired this
        lease; TypeError naming dlockd's form."""
        raise TypeError(REDIS_ACQUIRE)

    @property
    def valid(self) -> bool:
        """True while held, not lost, and within the local deadline."""
        ls = self._ls
        return ls.lost is None and not ls.released and now_ms() < ls.deadline

    def remaining(self) -> float:
        """Seconds left until the local deadline (0 once lost or
        released): how long this process may still act as the holder."""
        if not self.valid:
            return 0.0
        return max(0.0, (self._ls.deadline - now_ms()) / 1000.0)

    def __repr__(self) -> str:
        state = "lost" if self._ls.lost else ("released" if self._ls.released else "held")
        return f"<Lease {self.name!r} token={self.token} {self.mode} {state}>"


class LeasesView(Sequence[Any]):
    """The read-only part of a multi-lock's leases, for both faces: a
    sequence of leases in the byte order of their names, also indexed by
    name (``leases["orders/42"]``)."""

    _leases: list[Any]

    def __len__(self) -> int:
        return len(self._leases)

    def __iter__(self) -> Iterator[Any]:
        return iter(self._leases)

    @overload
    def __getitem__(self, i: int) -> Any: ...

    @overload
    def __getitem__(self, i: slice) -> list[Any]: ...

    @overload
    def __getitem__(self, i: str) -> Any: ...

    def __getitem__(self, i: Any) -> Any:
        if isinstance(i, str):
            for lease in self._leases:
                if lease.name == i:
                    return lease
            raise KeyError(i)
        return self._leases[i]

    @property
    def names(self) -> list[str]:
        """The locks' names, in byte order."""
        return [lease.name for lease in self._leases]

    @property
    def tokens(self) -> list[int]:
        """The leases' fencing tokens, in the order of the names."""
        return [lease.token for lease in self._leases]

    @property
    def valid(self) -> bool:
        """True while every lease is (``Lease.valid``)."""
        return all(lease.valid for lease in self._leases)

    def first_lost(self) -> Any:
        """The first lease (in the order of the names) that was lost, or
        None."""
        return next((lease for lease in self._leases if lease._ls.lost is not None), None)

    def __repr__(self) -> str:
        inner = ", ".join(repr(lease) for lease in self._leases)
        return f"<Leases [{inner}]>"


# Every live client, for the fork handler: a child must not renew or
# release the parent's leases, nor write on the parent's connection.
_clients: weakref.WeakSet[Any] = weakref.WeakSet()


def register(client: Any) -> None:
    _clients.add(client)


def _after_fork_in_child() -> None:
    for c in list(_clients):
        c._after_fork()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)
