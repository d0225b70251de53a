# SPDX-License-Identifier: MIT
"""Routing over a partitioned dlockd: the slot of a name, the partition
map (``MAP``), and the router's state that both faces share.

A partitioned service splits the lock names by Redis Cluster's hash slot
(CRC16/XMODEM of the name, or of its ``{tag}``, modulo 16384); the map
gives each slot to one partition, each partition being an ordinary
dlockd service (an active daemon and its standbys, its own lock table,
tokens and cluster id). See PROTOCOL.md, "MAP" and "Partitions".

A client reads ``MAP`` once at its first connect: epoch 0 is a daemon
that serves every name, and the client works as it always has. Otherwise
it becomes a router over one ordinary client per partition (a *leg*,
made on first use, whose server list is the partition's addresses in the
map): each call about a name goes to the leg of the name's partition and
is its call, unchanged; a lease stays with the leg that granted it until
its slot moves to another partition (PARTITION MOVE carries the locks,
same tokens): the first request about it answered MOVED moves it to that
partition's leg (the faces' _rehome), and a LOCK whose wait ends so
(``* MOVED``) is sent on with the wait it has left and the same request
id (Attempt). A partition behind the router's map, or a slot on its way
(UNAVAILABLE), is asked again (STALE_PAUSE_MS) rather than followed. A
``NO MOVED <partition> <addrs> <epoch>`` answer is followed here: a newer
epoch than the router's has the map read again (from the daemon that
said it) and the call sent where the new map says; an older or equal
one sends it to the partition named. At most MOVED_MAX redirects per
call, then :class:`~dlockd.Moved`. Nothing polls the map otherwise.

A partitioned daemon that has not read its map yet (just started) says
epoch 0 as well. So a client that found no map is not unpartitioned for
good: the first ``MOVED`` one of its calls about a name gets has it read
``MAP`` again, and an epoch above 0 makes it a router from then on (the
call sent on through the router as that MOVED's redirect, within the
same MOVED_MAX).

No I/O here: the faces (``_sync``, ``_async``) make the calls.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Iterable

from . import _options
from ._errors import LockTimeout, Moved, ProtocolError, Unavailable

SLOTS = 16384
MOVED_MAX = 3  # redirects followed per call; one more is Moved
MAP_REREAD_MS = 1000.0  # a map read again for a leg that cannot connect: at most this often
# A partition behind the router's map (it reads the map once a second),
# or a slot on its way between two partitions with its locks: the call is
# asked again there after STALE_PAUSE_MS, for at most STALE_MAX_MS in all
# (then as it was answered)
STALE_PAUSE_MS = 50.0
STALE_MAX_MS = 2500.0


def crc16(data: bytes) -> int:
    """CRC16/XMODEM (poly 0x1021, init 0, no reflection), as Redis
    Cluster's and ``proto/slot.c``."""
    crc = 0
    for b in data:
        crc ^= b << 8
        for _ in range(8):
            crc = ((crc << 1) ^ 0x1021) if crc & 0x8000 else crc << 1
            crc &= 0xFFFF
    return crc


def hash_tag(name: bytes) -> bytes | None:
    """The bytes between the first '{' and the first '}' after it, when
    at least one is between them; else None (the whole name counts)."""
    i = name.find(b"{")
    if i < 0:
        return None
    j = name.find(b"}", i + 1)
    if j <= i + 1:
        return None
    return name[i + 1 : j]


def slot(name: str | bytes) -> int:
    """A name's hash slot (0-16383): Redis Cluster's ``CLUSTER KEYSLOT``."""
    b = name.encode("ascii", "surrogateescape") if isinstance(name, str) else name
    tag = hash_tag(b)
    return crc16(b if tag is None else tag) % SLOTS


@dataclass(frozen=True)
class Partition:
    """One partition of the map: its id, the addresses of its daemons
    ("host:port", in the map's order; none while none is known) and the
    floor of its tokens."""

    id: str
    addrs: tuple[str, ...] = ()
    floor: int = 0


class PartitionMap:
    """A map as ``MAP`` said it: its epoch, its partitions (in the map's
    order) and which serves each slot."""

    def __init__(self, epoch: int, parts: dict[str, Partition], slots: list[str | None]) -> None:
        self.epoch = epoch
        self.parts = parts
        self._slots = slots

    def partition_of(self, name: str) -> str | None:
        """The id of the partition that serves `name`, or None if the map
        gives its slot to none."""
        return self._slots[slot(name)]

    def slot_owner(self, s: int) -> str | None:
        return self._slots[s]

    def slots_of(self, pid: str) -> list[int]:
        return [s for s, p in enumerate(self._slots) if p == pid]

    def __repr__(self) -> str:
        return f"<PartitionMap epoch={self.epoch} {' '.join(self.parts)}>"


def _ranges(text: str) -> Iterable[int]:
    """The slots of a ``slots`` line: ``0-99,200,300-310`` or ``-``."""
    if text == "-":
        return
    for item in text.split(","):
        a, sep, b = item.partition("-")
        if not a.isdigit() or (sep and not b.isdigit()):
            raise ValueError(item)
        first = int(a)
        last = int(b) if sep else first
        if not 0 <= first <= last < SLOTS:
            raise ValueError(item)
        yield from range(first, last + 1)


def parse_map(epoch: int, lines: list[str]) -> PartitionMap:
    """The map of ``OK MAP <epoch> <n>`` and its n lines: per partition a
    ``part <id> addrs=<host:port,...>|- floor=<n>`` line and one or more
    ``slots <id> <ranges>|-`` lines (their union). ProtocolError for a
    line no server sends."""
    parts: dict[str, Partition] = {}
    slots: list[str | None] = [None] * SLOTS
    for line in lines:
        words = line.split()
        try:
            if len(words) >= 2 and words[0] == "part":
                kv = dict(w.split("=", 1) for w in words[2:] if "=" in w)
                addrs = kv.get("addrs", "-")
                floor = kv.get("floor", "0")
                parts[words[1]] = Partition(
                    words[1],
                    tuple(a for a in addrs.split(",") if a) if addrs != "-" else (),
                    int(floor) if floor.isdigit() else 0,
                )
            elif len(words) == 3 and words[0] == "slots":
                if words[1] not in parts:
                    parts[words[1]] = Partition(words[1])
                for s in _ranges(words[2]):
                    slots[s] = words[1]
            else:
                raise ValueError(line)
        except ValueError:
            raise ProtocolError(f"unexpected line in the partition map: {line[:200]}") from None
    return PartitionMap(epoch, parts, slots)


def leg_options(
    o: _options.Options, addrs: tuple[str, ...], owner: str, key: str
) -> _options.Options:
    """The options of a partition's leg: the client's own (credentials,
    TLS, timeouts, callbacks), its owner id and key (one owner across
    partitions), the partition's daemons as its servers (at most
    SERVERS_MAX of them), and no cluster id of the client's: each
    partition is a cluster of its own, pinned by its leg at its first
    HELLO."""
    try:
        servers = _options.parse_servers(",".join(addrs[: _options.SERVERS_MAX]))
    except ValueError as e:
        raise ProtocolError(f"the partition map gives a bad address: {e}") from None
    return replace(
        o,
        addresses=servers,
        owner=owner,
        owner_key=key or o.owner_key,
        cluster=None,
        extra={},
    )


class Routes:
    """The router's state: the newest map read, and the addresses a
    MOVED named for a partition the map has none for. The faces keep
    the legs and make the calls (under their exclusion)."""

    def __init__(self, m: PartitionMap, now: float) -> None:
        self.map = m
        self.read_at = now  # when the map was last read (ms, CLOCK_BOOTTIME)
        self.hints: dict[str, tuple[str, ...]] = {}

    @property
    def epoch(self) -> int:
        return self.map.epoch

    def target(self, name: str) -> str | None:
        """The partition the map gives `name`, or None."""
        return self.map.partition_of(name)

    def addrs_of(self, pid: str) -> tuple[str, ...]:
        """Where partition pid's daemons are: the map's, else what a MOVED
        said."""
        p = self.map.parts.get(pid)
        if p is not None and p.addrs:
            return p.addrs
        return self.hints.get(pid, ())

    def adopt(self, m: PartitionMap, now: float) -> dict[str, tuple[str, ...]]:
        """A map read: kept if it is newer than the router's. Returns the
        partitions whose addresses changed (their legs are given the new
        list)."""
        self.read_at = now
        if m.epoch <= self.map.epoch:
            return {}
        before = {pid: self.addrs_of(pid) for pid in [*self.map.parts, *self.hints]}
        self.map = m
        for pid in list(self.hints):
            if m.parts.get(pid) is not None and m.parts[pid].addrs:
                del self.hints[pid]
        return {
            pid: p.addrs
            for pid, p in m.parts.items()
            if p.addrs and pid in before and before[pid] != p.addrs
        }

    def redirect(self, e: Moved, name: str, tried: str) -> str:
        """Where a call that partition `tried` answered `e` goes next (the
        face reads the map again first when e's epoch is newer than the
        router's): where the map says, when it is at least as new as e's
        and names another partition than the one tried; else the
        partition e names -- a stale daemon or a race (its addresses kept
        if the router knows none)."""
        pid = self.map.partition_of(name)
        if self.map.epoch >= e.epoch and pid is not None and pid != tried:
            return pid
        if not e.partition:
            raise Moved(
                f"{name!r}: the server answered MOVED without saying where",
                text=e.text,
                code="MOVED",
            )
        if e.addrs and not self.addrs_of(e.partition):
            self.hints[e.partition] = tuple(e.addrs)
        return e.partition


def in_move(e: Exception) -> bool:
    """e is the UNAVAILABLE of a slot on its way between two partitions
    (PARTITION MOVE carrying its locks): the giving one is writing them
    down, or the receiving one taking them in. Milliseconds, normally:
    try again."""
    text = getattr(e, "text", "") or str(e)
    return getattr(e, "code", "") == "UNAVAILABLE" and "another partition" in text


def behind(rt: Routes, e: Moved, name: str, tried: str) -> bool:
    """Partition `tried` answered MOVED `e` with an older map than the
    router's, whose map gives it `name`: it has not read the newer map
    yet (it will within a second; a slot that moved to it with its
    locks is taken in then). Ask it again, rather than go back where it
    points."""
    return bool(tried and e.partition) and e.epoch < rt.epoch and rt.target(name) == tried


def too_many(name: str, e: Moved) -> Moved:
    """The Moved a call ends with after MOVED_MAX redirects."""
    err = Moved(
        f"{name!r} moved {MOVED_MAX + 1} times in a row (last: to partition "
        f"{e.partition or '?'} at {','.join(e.addrs) or '-'}, map epoch {e.epoch}): "
        "the partition map is changing, try again",
        text=e.text,
        code="MOVED",
    )
    err.partition, err.addrs, err.epoch = e.partition, e.addrs, e.epoch
    return err


def no_partition(name: str, m: PartitionMap) -> Unavailable:
    return Unavailable(
        f"no partition serves {name!r} (slot {slot(name)}) in the map of epoch "
        f"{m.epoch}",
        code="UNAVAILABLE",
    )


def no_address(name: str, pid: str) -> Unavailable:
    return Unavailable(
        f"partition {pid} serves {name!r}, and no address of its daemons is known "
        "(the map says '-')",
        code="UNAVAILABLE",
    )


def map_reply(result: Any) -> PartitionMap | None:
    """The map of a MAP call's result (epoch, lines); None for epoch 0."""
    epoch, lines = result
    if not epoch:
        return None
    return parse_map(epoch, lines)


def watch_split(patterns: Any) -> tuple[list[str], list[str]]:
    """A watch's patterns as (prefixes, names): the prefixes are watched
    on the first connection (its partition's names only), each name at
    its partition."""
    prefixes = [p for p in patterns if p.endswith("*")]
    names = [p for p in patterns if not p.endswith("*")]
    return prefixes, names


@dataclass
class Attempt:
    """One acquire (a LOCK, a multi-lock) across the partitions it is
    sent to: when its wait ends (ms on CLOCK_BOOTTIME, counted from the
    call; inf: it waits for ever), its request id once it has one (0:
    none yet), and how many times it was sent. A LOCK answered MOVED --
    at once, or after it waited, when its name's slot moved with its
    place in the queue -- is sent on with the wait it has left and the
    same request id (``req=``): the receiving partition finds the grant
    or the place that was the request's."""

    wait_end: float
    reqid: int = 0
    sent: int = 0


def no_wait_left(name: str) -> LockTimeout:
    return LockTimeout(f"the wait for {name!r} ran out while it moved to another partition")
