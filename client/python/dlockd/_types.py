# SPDX-License-Identifier: MIT
"""Values the client returns: lock status, holders, listings, why a lease
was lost. Durations are seconds (floats), tokens ints."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

from ._wire import Reply, desc_decode


class LostReason(enum.Enum):
    """Why a lease was lost (``on_lost``'s second argument)."""

    EXPIRED = 1
    """The server ended it: ``* EXPIRED`` (its TTL ran out, or a ``BREAK``:
    then ``Lease.broken_by`` names who broke it, and ``Lease.broken`` is
    True; messages and the log say "broken by <user>"). One reason for
    both, as libdlock's and the Go client's, and the conformance
    scenarios, have it."""
    REJECTED = 2
    """A refresh or release was answered ``NO NOT_HOLDER``."""
    UNCONFIRMED = 3
    """It could not be confirmed before its local deadline (the server or
    the network did not answer in time)."""
    MAX_HOLD = 4
    """Renewal stopped at ``max_hold`` and the lease ran out."""
    CLOSED = 5
    """The client was closed while the lease was held (its UNLOCK was
    sent first, unless ``close(release=False)``). ``on_lost`` is not
    called for it."""


def lost_why(reason: LostReason | None, broken_by: str = "") -> str:
    """Why a lease was lost, for people: "broken by alice", "expired at
    the server", ..."""
    if reason is LostReason.EXPIRED and broken_by:
        return f"broken by {broken_by}"
    return {
        LostReason.EXPIRED: "expired at the server (not refreshed in time)",
        LostReason.REJECTED: "the server no longer had it (NOT_HOLDER)",
        LostReason.UNCONFIRMED: "not confirmed before its local deadline "
        "(the server or the network did not answer in time)",
        LostReason.MAX_HOLD: "max_hold reached: renewal stopped and it ran out",
        LostReason.CLOSED: "the client was closed",
    }.get(reason, "lost") if reason is not None else "lost"


@dataclass(frozen=True)
class Status:
    """A lock as ``STATUS`` (and each line of ``LOCKS``) describes it.
    ``token``, ``ttl``, ``count`` and ``owner`` are the first holder's."""

    name: str
    held: bool
    token: int = 0
    ttl: float = 0.0
    count: int = 0
    owner: str = ""
    user: str = ""
    waiters: int = 0
    mode: str = ""  # exclusive, shared, semaphore; "" when free
    limit: int = 1
    holders: int = 0
    # the first holder: how long it has held (None: not said), and who it
    # said it is (HELLO host= pid= cmd=; "" and 0 when not said)
    held_for: float | None = None
    host: str = ""
    pid: int = 0
    cmd: str = ""
    delay: float = 0.0  # the lock's lock-delay, seconds (0: none)
    delay_left: float = 0.0  # what is left of it while it runs, seconds
    # grants are closed this long (Redis forgot leases that may still be
    # held): a free lock admits nobody until then; seconds, 0: open
    closed: float = 0.0
    # the first holder's value (``lock(value=)``: an elected leader's,
    # its address), decoded; "" when it has none
    value: str = ""


def _int(v: str | None) -> int:
    return int(v) if v is not None and v.isdigit() else 0


def _held(r: Reply) -> float | None:
    v = r.kv("held_ms")
    return int(v) / 1000.0 if v is not None and v.isdigit() else None


def _text(r: Reply, key: str) -> str:
    v = r.kv(key)
    return desc_decode(v) if v else ""


def status_of(name: str, words: Reply | list[str]) -> Status:
    """A Status from the key=value words of STATUS or of a LOCKS line."""
    r = words if isinstance(words, Reply) else Reply("OK", "STATUS", words)
    owner = r.kv("owner") or ""
    mode = r.kv("mode") or ""
    return Status(
        name=name,
        held=r.kv("state") == "held",
        token=_int(r.kv("token")),
        ttl=_int(r.kv("ttl_ms")) / 1000.0,
        count=_int(r.kv("count")),
        owner="" if owner == "-" else owner,
        user=r.kv("user") or "",
        waiters=_int(r.kv("waiters")),
        mode="" if mode == "-" else mode,
        limit=_int(r.kv("limit")) or 1,
        holders=_int(r.kv("holders")),
        held_for=_held(r),
        host=_text(r, "host"),
        pid=_int(r.kv("pid")),
        cmd=_text(r, "cmd"),
        delay=_int(r.kv("delay_ms")) / 1000.0,
        delay_left=_int(r.kv("delay_left_ms")) / 1000.0,
        closed=_int(r.kv("closed_ms")) / 1000.0,
        value=_text(r, "value"),
    )


@dataclass(frozen=True)
class Holder:
    """A holder or a waiter of a lock (``HOLDERS``)."""

    owner: str
    waiter: bool
    mode: str  # exclusive or shared
    user: str = ""
    token: int = 0  # holder
    ttl: float = 0.0  # holder: what remains of its lease
    count: int = 0  # holder: reentrant holds
    position: int = 0  # waiter: 1 is next
    wait: float | None = None  # waiter: what remains of its wait; None: forever
    restored: bool = False  # waiter restored after a restart, not back yet
    held_for: float | None = None  # holder: how long it has held (None: not said)
    host: str = ""  # who it said it is (HELLO host= pid= cmd=)
    pid: int = 0
    cmd: str = ""
    value: str = ""  # holder: its lease's value, decoded ("" none)


def holder_of(line: str) -> Holder:
    words = line.split()
    if len(words) < 2 or words[0] not in ("holder", "waiter"):
        raise ValueError(line)
    r = Reply("OK", words[0], words[2:])
    wait_ms = r.kv("wait_ms")
    return Holder(
        owner=words[1],
        waiter=words[0] == "waiter",
        mode=r.kv("mode") or "exclusive",
        user=r.kv("user") or "",
        token=_int(r.kv("token")),
        ttl=_int(r.kv("ttl_ms")) / 1000.0,
        count=_int(r.kv("count")),
        position=_int(r.kv("position")),
        wait=None if wait_ms in (None, "inf") else _int(wait_ms) / 1000.0,
        restored="restored" in words[2:],
        held_for=_held(r),
        host=_text(r, "host"),
        pid=_int(r.kv("pid")),
        cmd=_text(r, "cmd"),
        value=_text(r, "value"),
    )


def busy_holder_of(r: Reply) -> Holder | None:
    """The holder a ``NO BUSY <name> <ms> owner=<id> ...`` names (None
    when it names none: an older server, a user who may not read the
    lock); ``ttl`` is when the first holder in the way is due to leave."""
    owner = r.kv("owner")
    if owner is None:
        return None
    return Holder(
        owner=owner,
        waiter=False,
        mode="",
        user=r.kv("user") or "",
        ttl=_int(r.args[1] if len(r.args) > 1 else None) / 1000.0,
        held_for=_held(r),
        host=_text(r, "host"),
        pid=_int(r.kv("pid")),
        cmd=_text(r, "cmd"),
    )


@dataclass(frozen=True)
class Holders:
    """Every holder (in grant order) and waiter (in queue order) of a lock,
    with its status; ``more`` counts those the server left out."""

    status: Status
    holders: list[Holder] = field(default_factory=list)
    waiters: list[Holder] = field(default_factory=list)
    more: int = 0


@dataclass(frozen=True)
class LocksPage:
    """One page of ``LOCKS``: ``more`` locks match after it (ask again with
    ``after=`` the last name)."""

    locks: list[Status]
    more: int = 0


@dataclass(frozen=True)
class WatchEvent:
    """News of a watched lock (``Client.watch()``). ``what``:

    - ``granted`` (a new lease; a reentry is none), ``released`` (its last
      hold), ``expired``, ``broken`` (``broken_by``: the user of the
      ``BREAK``), ``withdrawn`` (a grant Redis never recorded, taken
      back), ``value`` (the lease's holder gave it a new value:
      ``lease.proclaim()``, or a reentry with another): ``name`` is the
      lock, ``owner``, ``token``, ``user`` and ``value`` the lease's
      (``value`` decoded, "" when it has none; for ``value``, the new
      one), ``holders`` what the lock has after the change. In an
      election ``granted`` names a new leader (its term is ``token``),
      ``value`` a new value of the same leader, and ``released``,
      ``expired``, ``broken`` and ``withdrawn`` the end of a term;
    - ``overflow``: ``missed`` events were lost (the reader was too slow,
      here or at the server); ``name`` is "";
    - ``resumed``: after a reconnect, ``name`` (the pattern) is watched
      again -- what changed meanwhile was not seen; ``holders`` is the
      lock's now (-1 for a prefix);
    - ``refused``: after a reconnect, watching ``name`` (the pattern)
      again was refused (``error``: the server's line); the pattern is no
      longer watched, and a watch left with none ends.

    A ``what`` not listed here (a later server's) is passed on as it
    came: a reader ignores what it does not know.
    """

    name: str
    what: str
    owner: str = ""
    token: int = 0
    holders: int = 0
    user: str = ""
    broken_by: str = ""
    missed: int = 0
    error: str = ""
    value: str = ""
