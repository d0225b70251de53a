# SPDX-License-Identifier: MIT
"""The exceptions of the dlockd client.

Every error the client raises is a :class:`DlockError`. Those that carry a
server's answer keep its line in ``text`` (``"NO BUSY orders/42 2710"``,
``"ERR UNAVAILABLE redis: not connected"``) and its code word in ``code``
(``"BUSY"``, ``"UNAVAILABLE"``); programs match the class or the code, the
text is for people.
"""

from __future__ import annotations

__all__ = [
    "DlockError",
    "LockTimeout",
    "HeldByOwner",
    "LockLost",
    "NotHolder",
    "Unavailable",
    "ClusterMismatch",
    "Moved",
    "Denied",
    "ConnectionLost",
    "LimitMismatch",
    "UpgradeDeadlock",
    "Deadlock",
    "LimitReached",
    "ProtocolError",
]


class DlockError(Exception):
    """Base of every error of this package.

    ``text`` is the server's NO/ERR line when there was one ("" otherwise)
    and ``code`` its code word (``BUSY``, ``NOT_HOLDER``, ...).
    """

    def __init__(self, message: str = "", text: str = "", code: str = "") -> None:
        super().__init__(message or text)
        self.text = text
        self.code = code


class LockTimeout(DlockError):
    """The lock was not granted within ``wait`` (``NO BUSY`` for a try,
    ``* TIMEOUT`` for a wait that ran out, or no reply in time).

    ``holder``: who holds it, when a ``NO BUSY`` named the holder (a
    :class:`~dlockd.Holder`: owner, host, pid, cmd, held), else None."""

    holder = None


class HeldByOwner(LockTimeout):
    """Not granted: another process of this owner (one that shares the
    owner id and its key, such as an exported ``DLOCK_OWNER``) holds the
    lock. The server granted it as a reentry of that process's lease; the
    client gave the hold back at once, whatever ``wait`` (the server never
    queues an owner behind itself). ``code`` is ``HELD_BY_OWNER``.

    Also a multi-lock (``lock_all``) refused because its owner -- this
    client, or another process of the owner -- holds one of its names
    already: a multi-lock takes new leases only (``NO ALREADY_HELD <name>
    <token>``, or this client's own lease found before anything is
    sent), at once whatever ``wait``. ``code`` is then ``ALREADY_HELD``."""


class LockLost(DlockError):
    """The lease is gone: it expired, was broken, was refused a refresh, or
    could not be confirmed before its local deadline.

    Raised at the end of a ``with`` (``async with``) block whose lease was
    lost meanwhile, with ``name``, ``token``, ``reason`` (a
    :class:`~dlockd.LostReason`) and ``broken_by`` (the user whose
    ``BREAK`` ended it, else ""); the message says why ("broken by
    alice", "expired at the server", ...). From a server's reply (``NO
    STALE``, ``NO NOT_HOLDER``) those are left empty."""

    name: str = ""
    token: int = 0
    reason = None  # LostReason | None
    broken_by: str = ""


class NotHolder(DlockError):
    """The server holds no such lease for this owner (``NO NOT_HOLDER``)."""


class Unavailable(DlockError):
    """The service cannot serve now: no server answers, persistence is
    down (``ERR UNAVAILABLE``), or only standbys were reached."""


class ClusterMismatch(Unavailable):
    """No server reached is of the client's cluster: their ``HELLO`` names
    another cluster id than the first one the client met (or the
    ``cluster`` option). Daemons on different Redis keyspaces -- a typo in
    one node's URL, db or prefix -- have lock tables that know nothing of
    each other; nothing was sent to them. The message names both servers
    and ids."""


class Moved(Unavailable):
    """Another partition serves the name, and following the redirects
    did not reach it: the server answered ``NO MOVED <partition>
    <host:port,...>|- <map-epoch>`` more times in a row than the client
    follows (3), or named a partition whose daemons the map gives no
    address. A client of a partitioned service follows each ``MOVED``
    on its own (reading the map again when it is newer), so this is
    seen only while the map changes faster than it can follow, or the
    daemons disagree about it for a moment: an Unavailable, to retry.
    (A client that found no map at its first connect reads ``MAP`` again
    on a ``MOVED``, and routes if there is one now; while there is none,
    the ``MOVED`` is raised as the server said it.)
    ``code`` is ``MOVED``; ``partition``, ``addrs`` (a list of
    "host:port") and ``epoch`` are the last redirect's."""

    partition: str = ""
    addrs: tuple[str, ...] = ()
    epoch: int = 0


def _parse_moved(err: Moved, words: list[str]) -> None:
    # NO MOVED <partition> <host:port,...>|- <map-epoch> [id=..]
    pos = [w for w in words[2:] if "=" not in w]
    if len(pos) >= 3 and pos[2].isdigit():
        err.partition = pos[0]
        err.addrs = tuple(a for a in pos[1].split(",") if a and pos[1] != "-")
        err.epoch = int(pos[2])


class Denied(DlockError):
    """Refused for who we are: a failed ``AUTH``, a missing right
    (``NO DENIED <name> need=<right>``), or an owner id bound to another
    key (``NO DENIED <id> need=key``)."""


class ConnectionLost(DlockError):
    """The connection closed before the outcome was known, and the request
    is not one that may be sent twice (or the client is closed)."""


class LimitMismatch(DlockError):
    """The lock lives with another limit (``NO LIMIT_MISMATCH``);
    ``limit`` is the lock's."""

    limit: int = 0


class UpgradeDeadlock(DlockError):
    """Exclusive asked by an owner that holds the lock shared: it would
    wait for itself (``NO UPGRADE_DEADLOCK``)."""


class Deadlock(LockTimeout):
    """Waiting would close a cycle of owners that wait for each other
    (``NO DEADLOCK``): refused at once, whatever ``wait``, and nothing
    waits. ``owners`` is how many owners the cycle has, this client's
    included; ``cycle`` the others, in order, as ``(owner, lock)`` pairs:
    this client waits for the first owner, which waits for its lock, held
    (or queued ahead for) by the next, the last one's by this client. At
    most four are named (``"-"`` for what the user may not read).

    A LockTimeout, as the same wait ended with one before the server
    refused deadlocks: code that handles a lock it did not get still
    does."""

    owners: int = 0
    cycle: tuple[tuple[str, str], ...] = ()


def _parse_cycle(err: Deadlock, words: list[str]) -> None:
    # NO DEADLOCK <name> <n> <owner> [user=<u>] <lock> ... [more=<m>] [id=..]
    if len(words) < 4 or not words[3].isdigit():
        return
    err.owners = int(words[3])
    hops: list[tuple[str, str]] = []
    owner = ""
    for w in words[4:]:
        if w.startswith(("user=", "more=", "id=")):
            continue
        if not owner:
            owner = w
        else:
            hops.append((owner, w))
            owner = ""
    err.cycle = tuple(hops)


class LimitReached(DlockError):
    """A configured limit of the server was reached (``ERR LIMIT``)."""


class ProtocolError(DlockError):
    """The server said something this client does not understand."""


# The exception of each NO/ERR code word; the rest are DlockError.
_NO_CODES: dict[str, type[DlockError]] = {
    "BUSY": LockTimeout,
    "NOT_HOLDER": NotHolder,
    "STALE": LockLost,
    "AUTH_FAILED": Denied,
    "DENIED": Denied,
    "LIMIT_MISMATCH": LimitMismatch,
    "UPGRADE_DEADLOCK": UpgradeDeadlock,
    "DEADLOCK": Deadlock,
    "ALREADY_HELD": HeldByOwner,
    "MOVED": Moved,
}
_ERR_CODES: dict[str, type[DlockError]] = {
    "NOAUTH": Denied,
    "UNAVAILABLE": Unavailable,
    "NOT_ACTIVE": Unavailable,
    "LIMIT": LimitReached,
}


# The code words of ERR replies (the others are NO's): how a multi-lock's
# "* FAILED" is read back into the reply a single LOCK would have had.
_ERR_WORDS = frozenset(_ERR_CODES) | {
    "BAD_ARG", "BAD_FORMAT", "LINE_TOO_LONG", "UNKNOWN_COMMAND",
}  # fmt: skip


def failed_error(words: list[str]) -> DlockError:
    """The exception of a multi-lock's ``* FAILED <first> <WORD> <rest>``
    (words: ``<WORD> <rest>``, the tag taken off): the one a single LOCK
    of the failing name answered ``NO``/``ERR <WORD> <rest>`` raises
    (Deadlock, Unavailable, ...). ``EXPIRED <name>``: a lock it had taken
    ended while it waited for the others (broken, or its TTL ran out with
    the server unable to keep it): a LockTimeout of code ``EXPIRED``;
    nothing is held either way."""
    code = words[0] if words else ""
    kind = "ERR" if code in _ERR_WORDS else "NO"
    text = " ".join([kind, *words])
    if code == "EXPIRED":
        name = words[1] if len(words) > 1 else "?"
        return LockTimeout(
            f"the multi-lock failed: its lease of {name} ended while it waited "
            "for the others; nothing is held",
            text=text,
            code=code,
        )
    return error_of(kind, code, text)


def error_of(kind: str, code: str, text: str) -> DlockError:
    """The exception for a NO or ERR reply (kind ``NO`` or ``ERR``)."""
    table = _NO_CODES if kind == "NO" else _ERR_CODES
    cls = table.get(code, DlockError)
    err = cls(text, text=text, code=code)
    if isinstance(err, LimitMismatch):
        words = text.split()
        if len(words) >= 4 and words[3].isdigit():
            err.limit = int(words[3])
    elif isinstance(err, Deadlock):
        _parse_cycle(err, text.split())
    elif isinstance(err, Moved):
        _parse_moved(err, text.split())
    return err
