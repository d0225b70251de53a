# SPDX-License-Identifier: MIT
"""The protocol state machine shared by Client and AsyncClient.

It knows no sockets, threads or event loops (sans I/O): a driver tells it
when a connection is up or lost, feeds it the bytes read, takes the bytes
it wants written (``out``), calls ``tick()`` when its next deadline comes,
and learns of outcomes through four hooks (a request done, a lease lost or
at risk, a turn given). Everything here runs under the driver's exclusion:
one lock (Client) or one event loop (AsyncClient).

What it owns, and its invariants -- the contract of libdlock
(``client/lib/dlock.h``), which the conformance suite holds both to:

- Requests. One FIFO of requests written and not yet answered (the server
  answers in order; every line carries an ``id=`` tag that must match),
  the LOCKs answered QUEUED (by tag, until their event), and the requests
  kept for the next connection. A caller's request ends exactly once
  (``Req.finish``); one its caller gave up on (``abandoned``) is cleaned up
  here when its outcome comes: a grant is released, a queued wait
  cancelled.
- Leases. A ``LeaseState`` per hold the application was given. Its local
  deadline counts from the moment the request that granted or confirmed
  it was *written*, minus a slack for the server's rounding and clock
  rates: the client never believes in a lease longer than the server
  grants it. A grant that comes as ``* GRANTED`` is confirmed by a REFRESH
  first, and counted from that. Renewal every TTL/3; a lease not
  confirmed until ``deadline - guard`` is lost (``UNCONFIRMED``), so
  ``on_lost`` runs before the server could grant the lock again, even
  with the server unreachable. A REFRESH that shortens a lease lowers the
  local deadline when it is written; a reentry never lowers the TTL
  renewals use.
- Turns. A client is one owner: the server would grant a second LOCK of
  a name this owner holds as a reentry. So the holds of one name are
  taken one at a time within a client, in arrival order (a ``Ticket``
  per acquisition, kept by its lease until the release is answered or the
  lease is lost).
- Other clients of the owner. Processes that share the owner id and its
  key are one owner too, and nothing local orders them: a grant states
  its lease's holds (``holds=``), and one with more than this client's
  own (``_own_holds``) and the new one is another process's lease. It is
  given back at once, exactly one UNLOCK, and the acquire fails with
  HeldByOwner whatever its wait (the server never queues an owner behind
  itself).
- Connections. Every connection starts with AUTH and HELLO alone (with
  the same owner id and the key the server gave it after a drop); only
  once HELLO is answered OK by a server of the client's cluster
  (``_cluster_reply``) does it send a REFRESH of every lease still
  within its deadline, then the requests kept -- LOCKs with the wait that
  remains, reads, REFRESHes, and the UNLOCK of a lease's last hold (an
  UNLOCK of one hold of several is not sent twice) -- and those made
  meanwhile, after a HELLO saying who the client is (host, pid, command:
  a server that does not know it refuses that one alone, and it is not
  said again). A server that forgot the owner (a restart, a take-over) may
  have given its id to another client since: HELLO is then refused (NO
  DENIED <id> need=key), and whatever followed it would run as the
  connection's anonymous owner (a LOCK granted to nobody this client can
  be again); a server of another cluster would execute it out of another
  lock table. A refused or unanswered HELLO drops the connection, and the
  next attempt waits the reconnect pause. A standby's HELLO
  (``role=standby``), ``ERR NOT_ACTIVE`` and ``* BYE not-active`` name the
  active daemon: the next connection goes there, and what a standby
  refused is sent again whatever it was (it executed nothing).
- Multi-locks. ``LOCK <name> <name> ...`` (a ``LOCKALL`` request here,
  named by its first name in byte order) is answered with a block: a
  header and a line per lease (``OK LOCKED``, or ``* LOCKED`` after
  ``OK QUEUED``), read as a reply body. A server takes one multi-lock at
  a time per connection: the client sends one at a time (``multi``), the
  others wait here (HELD_BACK) within their wait. A grant that comes as
  an event is confirmed by sending the request again with its request
  id, which the server answers with the same grants, each lasting its
  TTL from then; the leases count from that write. The leases are
  ordinary leases from then on, each with its own turn.
"""

from __future__ import annotations

import collections
import dataclasses
import math
import os
import re
import secrets
import socket
import sys
import time
from typing import Any, Callable, Protocol

from . import _wire as wire
from ._route import in_move
from ._errors import (
    ClusterMismatch,
    ConnectionLost,
    Denied,
    DlockError,
    HeldByOwner,
    LockLost,
    LockTimeout,
    Moved,
    NotHolder,
    ProtocolError,
    Unavailable,
    error_of,
    failed_error,
)
from ._types import (
    Holders,
    LocksPage,
    LostReason,
    WatchEvent,
    busy_holder_of,
    holder_of,
    status_of,
)

NEVER = math.inf
# Timings (ms), as libdlock's (client/lib/dlock_private.h).
BACKOFF_MIN_MS = 50  # first pause between reconnects; doubles ...
BACKOFF_MAX_MS = 1000  # ... up to this
REDIRECT_MS = 100  # a standby named no other active: ask again after this
GUARD_MIN_MS = 20  # default lost guard: max(TTL/10, this)
RENEW_RETRY_MIN_MS = 10  # a refused renewal is retried after max(TTL/10, this)
ALREADY_WAITING_RETRIES = 3  # LOCK answered ALREADY_WAITING: sent again
# Before the first session: rounds of the servers list all refused
# (ECONNREFUSED) before the connect fails, without waiting for its timeout
REFUSED_ROUNDS = 2
# A reply body announces at most this many lines (HOLDERS lists 1000
# holders and 1000 waiters, LOCKS a page of 1000, STATS 128); more, and
# the server is dropped
BODY_LINES_MAX = 2 * 1000 + 1000 + 128
REENTRY_MAX = (1 << 24) - 1  # holds= of a lease, at most
# A renewal answered MOVED this many times in a row (its lease re-homed
# each time) is retried as one answered UNAVAILABLE, then followed again
# (as _route.MOVED_MAX for a call)
RENEW_MOVES_MAX = 3
# A renewal answered while its slot moves between partitions (UNAVAILABLE,
# a partition behind the map) is tried again after at most this (ms)
MOVE_RETRY_MS = 50


def move_retry_ms(ttl: float) -> float:
    """When a renewal refused while its slot moves is tried again: as
    any refused renewal (TTL/10), but within MOVE_RETRY_MS -- the slot's
    receiving partition takes the lease in within a second of the move,
    and the lease must be confirmed there before its deadline."""
    return max(float(RENEW_RETRY_MIN_MS), min(ttl / 10.0, float(MOVE_RETRY_MS)))


def _program_name() -> str:
    """This program's name, without its arguments (which may hold a
    secret): the script's (the package's for ``python -m``), else the
    interpreter's."""
    arg0 = sys.argv[0] if sys.argv and sys.argv[0] not in ("", "-c") else ""
    name = os.path.basename(arg0)
    if name == "__main__.py":
        name = os.path.basename(os.path.dirname(arg0))
    return name or os.path.basename(sys.executable or "python")


def _command_line() -> str:
    """This process's command line, its words joined by spaces."""
    try:
        with open("/proc/self/cmdline", "rb") as f:
            words = f.read().rstrip(b"\0").split(b"\0")
        return " ".join(w.decode("ascii", "replace") for w in words)
    except OSError:
        return " ".join(sys.argv)


def now_ms() -> float:
    """Milliseconds on CLOCK_BOOTTIME: unlike CLOCK_MONOTONIC it goes on
    while the machine is suspended, as the server's clock and the lease do."""
    return time.clock_gettime(time.CLOCK_BOOTTIME) * 1000.0


def _note_proof(ls: "LeaseState", r: wire.Reply) -> None:
    """Keep the proof= and until= a reply gave the lease (none: as was)."""
    proof, until = r.kv("proof"), r.kv("until")
    if proof and len(proof) == 32 and until and until.isdigit():
        ls.proof, ls.until = proof, int(until)


def _wait_word(q: Req, now: float) -> str | None:
    """The wait= of a LOCK's (or a multi-lock's) write at now: "inf",
    none for a try (TRYLOCK), else what is left of the wait, counted
    from its first write (>= 1 ms)."""
    if q.wait < 0:
        return "inf"
    if q.wait == 0:
        return None
    if q.wait_end == NEVER:
        q.wait_end = now + q.wait
    return str(max(int(q.wait_end - now), 1))


def _holds(r: wire.Reply) -> int:
    """holds= of a GRANTED line: the lease's holds with this one, or 0 when
    the server does not say (one from before it did)."""
    v = r.kv("holds")
    return int(v) if v is not None and v.isdigit() else 0


def request_id() -> int:
    """An acquire's request id (LOCK req=): 64 random bits, never 0."""
    while True:
        n = secrets.randbits(64)
        if n:
            return n


def takes_req(version: str | None) -> bool:
    """HELLO's version= is 0.4.0 or later: the server takes request ids
    (LOCK req=); one of 0.3 refuses the option."""
    m = re.match(r"([0-9]+)\.([0-9]+)", version or "")
    return m is not None and (int(m.group(1)) > 0 or int(m.group(2)) >= 4)


def slack_ms(ttl_ms: float) -> float:
    """What is taken off a granted TTL: the server's ms rounding and the
    difference of clock rates (2 ms + 1 per mille)."""
    return 2.0 + ttl_ms / 1000.0


# Connection states (the driver's socket, as the core sees it).
DOWN, CONNECTING, UP, DEAD = "down", "connecting", "up", "dead"
# Where a request is.
NOWHERE, UNSENT, SENT, WAITING = 0, 1, 2, 3
HELD_BACK = 4  # a multi-lock behind the one in progress (Core.multi)


class Hooks(Protocol):
    """What a driver does for the core (called with its exclusion held;
    none may block or call back into the core)."""

    def done(self, req: Req) -> None: ...  # a caller's request ended

    def lost(self, lease: LeaseState) -> None: ...  # deliver on_lost

    def at_risk(self, lease: LeaseState) -> None: ...  # deliver on_at_risk

    def contended(self, lease: LeaseState) -> None: ...  # deliver on_contended

    def turn(self, ticket: Ticket) -> None: ...  # ticket.ready became true

    def watch_event(self, w: WatchState) -> None: ...  # w has an event, or ended

    # a renewal of lease was answered MOVED (its slot went to another
    # partition): True if the driver re-homes it (detach/attach, later,
    # out of the core's exclusion); False leaves it here, renewed again
    def moved(self, lease: LeaseState, err: Moved) -> bool: ...


WATCH_QUEUE_MAX = 4096  # events a watch keeps unread; past that, OVERFLOW


def pattern_matches(pattern: str, name: str) -> bool:
    """A WATCH pattern: a name, or a prefix followed by '*' ("*": all)."""
    if pattern.endswith("*"):
        return name.startswith(pattern[:-1])
    return pattern == name


class WatchState:
    """The core's record of one watch (``Client.watch()``): its patterns
    and the events that wait for its reader."""

    __slots__ = ("patterns", "active", "closed", "events", "missed", "waker")

    def __init__(self, patterns: list[str]) -> None:
        self.patterns = list(patterns)
        self.active = False  # its WATCHes were answered: watch again after a reconnect
        self.closed = False
        self.events: collections.deque[WatchEvent] = collections.deque()
        self.missed = 0  # events not kept (the queue was full)
        self.waker: Any = None  # the driver's

    def matches(self, name: str) -> bool:
        return any(pattern_matches(p, name) for p in self.patterns)

    def put(self, ev: WatchEvent) -> None:
        """Keep ev for the reader; a full queue counts it missed, and an
        "overflow" event says how many once there is room."""
        if self.closed:
            return
        if self.missed and len(self.events) < WATCH_QUEUE_MAX:
            self.events.append(WatchEvent("", "overflow", missed=self.missed))
            self.missed = 0
        if len(self.events) < WATCH_QUEUE_MAX:
            self.events.append(ev)
        else:
            self.missed += 1


class Ticket:
    """One acquisition's turn on a name within this client."""

    __slots__ = ("name", "ready", "waker")

    def __init__(self, name: str) -> None:
        self.name = name
        self.ready = False
        self.waker: Any = None  # the driver's (an Event, a Future)


class LeaseState:
    """The core's record of one hold the application was given."""

    __slots__ = (
        "name", "token", "mode", "limit", "ttl", "deadline", "renew_at",
        "acquired_at", "max_hold", "renew", "refreshing", "lost", "broken_by",
        "unlocking", "released", "at_risk", "capped", "ticket", "handle",
        "on_lost", "on_at_risk", "owned", "proof", "until", "warn", "delay",
        "waiters", "contended_due", "value", "moving", "moves", "core",
    )  # fmt: skip

    def __init__(self, name: str, token: int) -> None:
        self.name = name
        self.token = token
        self.mode = "exclusive"
        self.limit = 1
        self.ttl = 0.0  # ms: what renewals ask for
        self.deadline = 0.0  # ms, CLOCK_BOOTTIME: the local deadline
        self.renew_at = 0.0
        self.acquired_at = 0.0
        self.max_hold: float | None = None  # ms
        self.renew = True
        self.refreshing = False  # a renewal is in flight
        self.lost: LostReason | None = None
        self.broken_by = ""
        self.unlocking = False  # its UNLOCK is in flight
        self.released = False
        self.at_risk = False  # on_at_risk said, not confirmed since
        self.capped = False  # max_hold reached: no more renewals
        self.ticket: Ticket | None = None
        self.handle: Any = None  # the application's Lease
        self.on_lost: Callable[..., Any] | None = None
        self.on_at_risk: Callable[..., Any] | None = None
        self.owned = True  # False in a child process after fork
        # the proof and end the last grant or refresh stated: what lets the
        # lease be reclaimed should Redis forget it (RECLAIM, PROTOCOL.md)
        self.proof = ""
        self.until = 0
        # what the hold asked for (LOCK warn= delay=, ms, 0: none): a
        # RECLAIM asks for them again, as the lost record had them
        self.warn = 0
        self.delay = 0
        # the last "* WAITING" of the lease (LOCK notify=waiters): how many
        # requests wait for its lock (0: none said); contended_due: one
        # came before the application had a handle to be told with
        self.waiters = 0
        self.contended_due = False
        # what the lease says to whoever looks at the lock (LOCK value=,
        # then REFRESH value=: an elected leader's), as sent (encoded);
        # "" none. A RECLAIM says it again, as the lost record had it.
        self.value = ""
        # its slot went to another partition (a renewal answered MOVED):
        # the driver is moving it to that partition's client (Core.detach,
        # Core.attach), which renews it; not renewed here meanwhile, its
        # lost guard still counts. moves: renewals answered MOVED in a row.
        self.moving = False
        self.moves = 0
        self.core: Any = None  # the Core that has it (its client's), once granted

    def live(self) -> bool:
        return self.lost is None and not self.released and not self.unlocking

    def confirm(self, sent_at: float, ms: float) -> None:
        """The server confirmed ms of lease for a request written at
        sent_at: the deadline counts from then (never later than the
        server's, which started when it read the request)."""
        self.deadline = sent_at + ms - slack_ms(ms)
        self.renew_at = sent_at + self.ttl / 3.0
        self.at_risk = False


class Req:
    """One request, from the call that makes it until its outcome."""

    __slots__ = (
        "op", "name", "token", "ttl", "wait", "wait_end", "shared", "limit",
        "extra", "internal", "abandoned", "resent", "last_hold", "retries",
        "tag", "sent_at", "where", "lease", "deadline", "body", "header",
        "done", "result", "error", "waker", "opts", "reqid", "waiters",
    )  # fmt: skip

    def __init__(self, op: str, name: str = "", internal: bool = False) -> None:
        self.op = op
        self.name = name
        self.token = 0
        self.ttl = 0.0  # ms
        self.wait = -1.0  # LOCK: ms as asked, -1 forever, 0 try once
        self.wait_end = NEVER  # LOCK: end of the wait, from the first write
        self.shared = False
        self.limit = 0
        self.extra: dict[str, Any] = {}  # LOCKS page, BREAK reason, LOCKALL names
        self.internal = internal  # nobody waits for it
        self.abandoned = False  # the caller gave up; clean up the outcome
        self.resent = False  # written again after a reconnect
        self.last_hold = False  # UNLOCK of a lease's last hold
        self.retries = 0
        self.tag = ""
        self.sent_at = 0.0
        self.where = NOWHERE
        self.lease: LeaseState | None = None
        self.deadline = NEVER  # the caller gives up then (ms)
        self.body: list[str] = []
        self.header: wire.Reply | None = None
        self.done = False
        self.result: Any = None
        self.error: DlockError | None = None
        self.waker: Any = None  # the driver's
        self.opts: dict[str, Any] = {}  # LOCK: lease options
        # LOCK: the acquire's request id (req=), the same on every write
        # of it, so that one sent again after a drop finds its grant
        self.reqid = 0
        # CONFIRM: a "* WAITING" for the grant being confirmed (it comes
        # before the reply that makes the lease): given to the lease
        self.waiters = 0


class Core:
    """The state machine (see the module's docstring)."""

    def __init__(self, opts: Any, hooks: Hooks) -> None:
        self.o = opts
        self.hooks = hooks
        self.owner: str = opts.owner or "py-" + secrets.token_hex(8)
        self.key: str = opts.owner_key or ""
        self.default_ttl = float(wire.DEFAULT_TTL_MS)
        self.state = DOWN
        self.ready = False  # a HELLO of an active daemon succeeded once
        self.fatal: DlockError | None = None  # the first connection's end
        self.closing = False
        self.forked = False
        self.out = bytearray()
        self.lines = wire.LineSplitter()
        self.fifo: collections.deque[Req] = collections.deque()
        self.unsent: collections.deque[Req] = collections.deque()
        self.waiting: dict[str, Req] = {}
        self.body_req: Req | None = None
        self.body_left = 0
        self.insane = False  # a reply no server may send: drop (_line_in)
        # waits of this connection given up (their CANCEL sent) whose
        # grant may still cross it: a "* GRANTED" nobody waits for is
        # given back only while some may (_event)
        self.crossing = 0
        self.seq = 0
        # the multi-lock being acquired (a server takes one at a time per
        # connection: ERR LIMIT), and those held back behind it
        self.multi: Req | None = None
        self.multi_queue: collections.deque[Req] = collections.deque()
        self.leases: list[LeaseState] = []
        self.watches: list[WatchState] = []
        self.turns: dict[str, collections.deque[Ticket]] = {}
        # fail-over over opts.addresses
        self.naddrs = len(opts.addresses)
        self.addr_i = 0
        self.hint = -1  # the address a standby named
        self.failed_i = -1  # the address whose connect failed last
        self.standby = False
        self.reconnect_at = 0.0
        self.backoff = float(BACKOFF_MIN_MS)
        self.last_error = ""  # why the last connection attempt failed
        self.refused = 0  # attempts refused in a row before the first session
        self.session_ok = False  # this connection's HELLO succeeded
        # this connection's server takes request ids (LOCK req=): its
        # HELLO said version 0.4.0 or later (a 0.3 server refuses them)
        self.takes_req = False
        self.drop_wanted = False  # a reply asked to drop the connection
        self.stalled = False  # ... because the server stopped answering
        self.desc_refused = False  # a server refused the description
        self.hello_by = NEVER  # this connection's HELLO must be answered by then
        # The cluster id held to (the option, or the first a server
        # named), where it came from, and how many HELLOs in a row named
        # another: at naddrs, what waits fails with ClusterMismatch.
        self.cluster: str = opts.cluster or ""
        self.cluster_from = ""
        self.cluster_refused = 0
        self.cluster_why = ""

    # ---- connections ---------------------------------------------------

    def connecting(self) -> int:
        """The driver starts a connection: the index of the address."""
        self.state = CONNECTING
        return self.addr_i

    def connect_failed(self, now: float, why: str = "", refused: bool = False) -> None:
        """The attempt failed (refused, timed out, TLS). ``refused``: the
        peer's system answered at once that nothing listens there
        (ECONNREFUSED, a unix socket that is not there). Before the first
        session, every server refusing twice in a row (a quick second
        round, for a daemon that was just restarting) ends the connect
        with Unavailable at once rather than at connect_timeout, as the
        ``dlock`` command does; what is slow to answer still gets the
        whole timeout."""
        self.state = DOWN
        self.last_error = why or self.last_error
        self.failed_i = self.addr_i
        self.addr_i = (self.addr_i + 1) % self.naddrs
        self.reconnect_at = now + self.backoff
        if refused and not self.ready:
            self.refused += 1
            if self.refused % self.naddrs:
                self.reconnect_at = now  # the next server of this round, now
                return
            if self.refused >= REFUSED_ROUNDS * self.naddrs and self.fatal is None:
                self.fatal = Unavailable(
                    "cannot connect to dlockd: every server refused the connection"
                    + (f" ({self.last_error})" if self.last_error else "")
                )
                self._die(self.fatal)
                return
            self.reconnect_at = now + BACKOFF_MIN_MS
            return
        self.refused = 0
        self.backoff = min(self.backoff * 2, BACKOFF_MAX_MS)

    def connected(self, now: float) -> None:
        """The transport is up (TLS done): say who we are, and nothing
        else until HELLO is answered OK by a server of the client's
        cluster (_session): a request pipelined behind it would be
        executed by a server of another cluster before the client could
        refuse it."""
        self.state = UP
        self.session_ok = False
        self.takes_req = False
        self.drop_wanted = False
        self.stalled = False
        # A listed server that accepts and never answers (stopped, hung)
        # gets its share of connect_timeout, not all of it: the next is
        # asked in time.
        self.hello_by = now + (
            self.o.connect_timeout_ms / self.naddrs
            if not self.ready and self.naddrs > 1
            else self.o.connect_timeout_ms
        )
        self.lines.reset()
        self.out.clear()
        self.crossing = 0  # the waits given up went with the last one
        if self.o.password:
            self._internal("AUTH")
        self._internal("HELLO")

    def _session(self, now: float) -> None:
        """HELLO was answered OK by a server of the client's cluster: say
        who the client is, confirm the leases still within their
        deadline, send what was kept and what was asked meanwhile."""
        if self.o.describe and not self.desc_refused:
            self._internal("DESCRIBE")
        for ls in self.leases:
            if ls.live() and ls.owned and ls.deadline > now and not ls.moving:
                self._renew(ls, now)
        seen: set[str] = set()
        for w in self.watches:
            if not w.active:
                continue
            for p in w.patterns:
                if p not in seen:
                    seen.add(p)
                    self._internal("REWATCH", p)
        kept, self.unsent = self.unsent, collections.deque()
        for q in kept:
            q.where = NOWHERE
            if q.op in ("LOCK", "LOCKALL") and q.wait > 0 and q.wait_end <= now:
                self._finish(q, LockTimeout("the wait ran out while reconnecting"))
            else:
                self._write(q, now)

    def connection_lost(self, now: float) -> None:
        """The connection is gone (closed by either side, or dropped
        because the core asked): decide the fate of each request whose
        answer was lost with it."""
        if self.state == DEAD:
            return
        self.out.clear()
        self.lines.reset()
        pending: list[Req] = []
        if self.body_req is not None:
            pending.append(self.body_req)
            self.body_req = None
        pending.extend(self.fifo)
        pending.extend(self.waiting.values())
        self.fifo.clear()
        self.waiting.clear()
        kept = [q for q in pending if self._keep_over_drop(q)]
        for q in kept:
            q.where = UNSENT
        self.unsent.extendleft(reversed(kept))
        if self.cluster_refused >= self.naddrs:
            while self.unsent:
                self._finish(self.unsent.popleft(), ClusterMismatch(self.cluster_why))
        if self.closing or not self.o.reconnect or (
            not self.ready and self.fatal is not None
        ):
            self._die(ConnectionLost("the connection closed"))
            return
        self.state = DOWN
        self.reconnect_at = now
        if not self.standby and not self.session_ok:
            # closed before it said who we are (refused, a limit, a
            # server on its way down): as a failed connect, with backoff
            self.connect_failed(now)
        elif self.standby:
            if self.hint >= 0 and self.hint not in (self.addr_i, self.failed_i):
                self.addr_i = self.hint
            elif self.hint >= 0 and self.hint == self.failed_i:
                # the active it names did not answer: it is down, and this
                # standby may take over soon; ask again
                self.failed_i = -1
                self.reconnect_at = now + REDIRECT_MS
            else:
                self.addr_i = (self.addr_i + 1) % self.naddrs
                self.reconnect_at = now + REDIRECT_MS
        elif self.hint >= 0:
            self.addr_i = self.hint  # * BYE not-active said where
        elif self.stalled:
            # it stopped answering: the next server first (a standby
            # that took over, or one that names the active: not this one
            # again at once)
            self.failed_i = self.addr_i
            self.addr_i = (self.addr_i + 1) % self.naddrs
        self.stalled = False
        self.standby = False
        self.hint = -1

    def _keep_over_drop(self, q: Req) -> bool:
        """1 to write q again on the next connection, 0 when ended here."""
        if q.internal:
            if q.op in ("RENEW", "RECLAIM") and q.lease is not None:
                q.lease.refreshing = False
            return q.op == "UNLOCK" and q.last_hold
        if q.abandoned:
            if q.op == "UNLOCK" and q.last_hold:
                q.internal = True  # still release it
                return True
            self._finish(q, ConnectionLost("the connection closed"))
            return False
        if not self.o.reconnect:
            self._finish(q, ConnectionLost("the connection closed"))
            return False
        if q.op in ("AUTH", "HELLO"):
            self._finish(q, ConnectionLost("the connection closed"))
            return False
        if not self.standby and (
            (q.op == "UNLOCK" and not q.last_hold) or q.op == "BREAK"
        ):
            # done once; a second one would find nothing left to do
            self._finish(
                q, ConnectionLost("the connection closed; the outcome is unknown")
            )
            return False
        q.body = []
        q.resent = True
        return True

    def _die(self, err: DlockError) -> None:
        self.state = DEAD
        while self.unsent:
            self._finish(self.unsent.popleft(), err)
        for w in list(self.watches):
            self.watch_close(w)  # no connection will bring their events

    def close(self) -> None:
        """The client closes: every request ends with ConnectionLost; the
        leases still held are lost (CLOSED). Their UNLOCKs, if the driver
        gives them back, were sent before (``close(release=True)``)."""
        self.closing = True
        err = ConnectionLost("the client is closed")
        if self.body_req is not None:
            self._finish(self.body_req, err)
            self.body_req = None
        held_back, self.multi_queue = list(self.multi_queue), collections.deque()
        for q in [*self.fifo, *self.waiting.values(), *self.unsent, *held_back]:
            self._finish(q, err)
        self.fifo.clear()
        self.waiting.clear()
        self.unsent.clear()
        self.state = DEAD
        for ls in self.leases:
            if ls.lost is None and not ls.released:
                ls.lost = LostReason.CLOSED
        for dq in list(self.turns.values()):
            for t in list(dq):
                self.give_turn(t)
        for w in list(self.watches):
            self.watch_close(w)

    def after_fork(self) -> None:
        """In a child process: the leases are the parent's. Nothing is
        renewed or sent from here."""
        self.forked = True
        self.closing = True
        self.state = DEAD
        for ls in self.leases:
            ls.owned = False
        self.out.clear()

    # ---- input ---------------------------------------------------------

    def data_received(self, data: bytes, now: float) -> bool:
        """Bytes from the server; False when the connection must be
        dropped (a standby answered, or the stream is not protocol)."""
        try:
            lines = self.lines.feed(data)
        except ValueError:
            return False
        for line in lines:
            if not self._line_in(line, now):
                return False
        return True

    def _line_in(self, line: str, now: float) -> bool:
        if self.body_req is not None:
            q = self.body_req
            q.body.append(line)
            self.body_left -= 1
            if self.body_left == 0:
                self.body_req = None
                self._body_done(q)
                if self.insane:
                    self.insane = False
                    return False  # a block no server may send (_lockall_body)
            return True
        r = wire.parse(line)
        if r is None:
            return False
        if r.kind == "*":
            try:
                self._event(r, now)
            except (ValueError, IndexError):
                return False  # not an event any server sends
            if self.insane:
                self.insane = False
                return False  # as for a reply, below
            return True
        if r.kind in ("NO", "ERR") and r.tag and (not self.fifo or self.fifo[0].tag != r.tag):
            # the end of a wait (OK QUEUED) said as its tag's reply rather
            # than as an event (dlockd says "* MOVED", _event, when the
            # lock's slot went to another partition meanwhile: a NO MOVED
            # so is read the same); one that crossed the CANCEL of a wait
            # given up is nothing
            w = self.waiting.pop(r.tag, None)
            if w is not None:
                w.where = NOWHERE
                self._finish(w, error_of(r.kind, r.word, r.text()))
                return True
            if r.word == "MOVED" and self.crossing:
                self.crossing -= 1
                return True
        if not self.fifo:
            return False  # a reply to nothing
        q = self.fifo[0]
        if r.tag and r.tag != q.tag:
            return False
        if self._standby_reply(q, r):
            return False  # to the active: drop, reconnect there
        if self._cluster_reply(q, r):
            return False  # another cluster: drop, to the next server
        self.fifo.popleft()
        q.where = NOWHERE
        try:
            self._reply(q, r, now)
        except (ValueError, IndexError):
            self._finish(q, ProtocolError(f"unexpected reply: {r.text()}"))
        if self.insane:
            self.insane = False
            return False  # a server that says what none may: drop it
        return True

    def _insane(self, q: Req, token: int, ms: int, holds: int, reentry: bool) -> bool:
        """A grant or confirmation no server may give: token 0, holds past
        REENTRY_MAX, a lease longer than asked (a REFRESH sets its TTL; a
        LOCK of a lease this client holds keeps the longer). The request
        fails with ProtocolError and the connection is dropped: a client
        must survive a hostile or broken server."""
        most = q.ttl
        if reentry:
            for other in self.leases:
                if other.name == q.name and other.token == token and other.lost is None:
                    most = max(most, other.ttl)
        if 0 < token < 1 << 64 and holds <= REENTRY_MAX and (most <= 0 or ms <= most):
            return False
        self.insane = True
        return True

    def _not_of(self, q: Req, r: wire.Reply) -> bool:
        """A grant, confirmation or wait's end for q's lock must name it,
        and a holds= it gives must count at least this hold; else the
        server is dropped (found from outside: "OK GRANTED zzz" answering
        LOCK k was taken for k, holds=0 believed, "* TIMEOUT other" ended
        the wait for k)."""
        if r.args and r.args[0] == q.name and (r.kv("holds") is None or _holds(r) > 0):
            return False
        self.insane = True
        return True

    def _cluster_reply(self, q: Req, r: wire.Reply) -> bool:
        """HELLO names the server's cluster: the first id met is the
        client's; a server that names another is refused like a standby,
        before anything else is sent to it."""
        cid = r.kv("cluster") if q.op == "HELLO" and r.kind == "OK" else None
        if not cid or cid == "-":
            return False  # 0.3 and before, or a standby that does not know
        a = self.o.addresses[self.addr_i]
        here = a.name or a.path or f"{a.host}:{a.port}"
        if not self.cluster and len(cid) == 32:
            self.cluster, self.cluster_from = cid, here
        elif not self.o.cluster and len(cid) == 32 and here == self.cluster_from:
            # the server the id came from restarted as another lock table
            # (memory only, a new keyspace): nothing to fail over to, and
            # leases it does not know are refused there (NOT_HOLDER)
            self.cluster = cid
        if cid == self.cluster:
            self.cluster_refused = 0
            return False
        self.cluster_refused += 1
        self.standby = True  # to the next server
        self.hint = -1
        if self.cluster_from:
            why = (
                f"servers {self.cluster_from} and {here} are two clusters "
                f"(ids {self.cluster}, {cid[:64]}): check their redis URL, db and prefix"
            )
        else:
            why = (
                f"server {here} is of cluster {cid[:64]}, not {self.cluster} "
                "(the cluster asked for): check its redis URL, db and prefix"
            )
        self.cluster_why = self.last_error = why
        if self.cluster_refused >= self.naddrs and not self.ready:
            self.fatal = ClusterMismatch(why)
        return True

    def _standby_reply(self, q: Req, r: wire.Reply) -> bool:
        if r.kind == "ERR" and r.word == "NOT_ACTIVE":
            active = r.args[0][7:] if r.args and r.args[0].startswith("active=") else ""
        elif q.op == "HELLO" and r.kind == "OK" and r.kv("role") == "standby":
            active = r.kv("active") or ""
        else:
            return False
        self.standby = True
        self._hint(active)
        return True

    def _hint(self, active: str) -> None:
        self.hint = -1
        for i, a in enumerate(self.o.addresses):
            if a.name and a.name == active:
                self.hint = i
                return

    def _event(self, r: wire.Reply, now: float) -> None:
        if r.word == "BYE":
            active = r.kv("active")
            if active:
                self._hint(active)
            return
        if not r.args:
            return  # something newer than us
        name = r.args[0]
        if r.word == "GRANTED":
            token = r.int_arg(1)
            holds = _holds(r)
            q = self.waiting.pop(r.tag, None) if r.tag else None
            if q is None:
                # nobody waits: a grant that crossed the CANCEL of a wait
                # given up, or one nobody asked for (a server streaming
                # those had an UNLOCK queued for each: dropped)
                if not self.crossing:
                    self.insane = True
                    return
                self.crossing -= 1
                # give it back, exactly one hold if the lease is another
                # client's too (_held_elsewhere)
                if holds > self._own_holds(name, token) + 1:
                    self._internal("UNLOCK", name, token)
                else:
                    self._cleanup_grant(name, token)
                return
            if q.op == "LOCKALL" or self._not_of(q, r):
                self.insane = True
                self._finish(q, ProtocolError(f"no server may grant this: {r.text()}"))
                return
            if self._held_elsewhere(q, token, holds):
                return
            # The TTL began when the server granted it, before this line
            # reached us: confirm it, and count from the confirmation.
            q.token = token
            q.op = "CONFIRM"
            q.waiters = 0
            q.deadline = now + self.o.request_timeout_ms
            self._write(q, now)
        elif r.word == "TIMEOUT":
            q = self.waiting.pop(r.tag, None) if r.tag else None
            if q is not None and self._not_of(q, r):
                self._finish(q, ProtocolError(f"no server may end this wait so: {r.text()}"))
            elif q is not None:
                self._finish(q, LockTimeout(f"waited in vain for {name}"))
        elif r.word == "LOCKED":
            # * LOCKED <first> <n>, then n lines: a multi-lock's wait ended
            # with every lock granted
            n = r.int_arg(1)
            q = self.waiting.pop(r.tag, None) if r.tag else None
            if q is None:
                # nobody waits: it crossed the CANCEL of a wait given up
                # (else a server streaming grants: dropped); read the
                # block, give the leases back
                if not self.crossing or not 2 <= n <= wire.MULTI_MAX:
                    self.insane = True
                    return
                self.crossing -= 1
                q = Req("LOCKALL", name, internal=True)
                q.abandoned = True
            elif q.op != "LOCKALL" or name != q.name or n != len(q.extra["names"]):
                self.insane = True
                self._finish(q, ProtocolError(f"no server may grant this: {r.text()}"))
                return
            self._read_block(q, r, n)
        elif r.word == "FAILED":
            # * FAILED <first> <WORD> <rest>: a multi-lock's wait ended
            # without the locks, nothing held
            q = self.waiting.pop(r.tag, None) if r.tag else None
            if q is None:
                return  # a wait given up: its CANCEL crossed this
            if q.op != "LOCKALL" or name != q.name or len(r.args) < 2:
                self.insane = True
                self._finish(q, ProtocolError(f"no server may end this wait so: {r.text()}"))
                return
            self._finish(q, failed_error(r.args[1:]))
        elif r.word == "MOVED":
            # * MOVED <name> <partition> <host:port,...>|- <epoch>: a
            # wait ended without the lock, whose slot went to another
            # partition (PARTITION MOVE); its place waits there, for
            # this owner's next LOCK of the name (the router's redirect)
            q = self.waiting.pop(r.tag, None) if r.tag else None
            if q is None:
                if self.crossing:
                    self.crossing -= 1  # a wait given up: its CANCEL crossed this
                return
            if name != q.name:
                self.insane = True
                self._finish(q, ProtocolError(f"no server may end this wait so: {r.text()}"))
                return
            self._finish(q, error_of("NO", "MOVED", " ".join(["NO", "MOVED", *r.args[1:4]])))
        elif r.word == "EXPIRED":
            token = r.int_arg(1)
            for ls in self.leases:
                if ls.name == name and ls.token == token and ls.live():
                    ls.broken_by = r.kv("broken_by") or ""
                    self._lose(ls, LostReason.EXPIRED)
        elif r.word == "WATCH":
            # * WATCH <name> <what> <owner> <token> holders=<n> [user=]
            # [broken_by=] [value=]; <what> "value": the holder gave its
            # lease a new value. One this client does not know is passed
            # on as it came.
            value = r.kv("value")
            ev = WatchEvent(
                name,
                r.args[1],
                owner=r.args[2],
                token=r.int_arg(3),
                holders=int(r.kv("holders") or 0),
                user=r.kv("user") or "",
                broken_by=r.kv("broken_by") or "",
                value=wire.desc_decode(value) if value else "",
            )
            for w in self.watches:
                if w.matches(name):
                    w.put(ev)
                    self.hooks.watch_event(w)
        elif r.word == "WATCH-OVERFLOW":
            # the server dropped events of this connection: whose, it
            # does not say
            n = r.int_arg(0)
            for w in self.watches:
                w.put(WatchEvent("", "overflow", missed=n))
                self.hooks.watch_event(w)
        elif r.word == "EXPIRING":
            # the lease's warning (LOCK warn=): not refreshed in time
            token = r.int_arg(1)
            for ls in self.leases:
                if ls.name == name and ls.token == token:
                    self._risk(ls)
        elif r.word == "WAITING":
            # others wait (LOCK notify=waiters): * WAITING <name> <n>
            # token=<t>; one for a lease this client does not hold (given
            # back meanwhile) is nothing
            n = r.int_arg(1)
            tok = r.kv("token")
            if n <= 0 or tok is None or not tok.isdigit():
                return
            token = int(tok)
            told = False
            for ls in self.leases:
                if ls.name == name and ls.token == token and ls.live():
                    told = True
                    self._contended(ls, n)
            if told:
                return
            # a waiter's grant, told right after its "* GRANTED": the
            # lease is made when its CONFIRM is answered
            for q in self.fifo:
                if q.op == "CONFIRM" and q.name == name and q.token == token:
                    q.waiters = n

    # ---- replies -------------------------------------------------------

    def _reply(self, q: Req, r: wire.Reply, now: float) -> None:
        handler = _REPLIES.get(q.op)
        if handler is not None and handler(self, q, r, now):
            return
        if r.kind == "OK":
            self._finish(q, ProtocolError(f"unexpected reply: {r.text()}"))
        else:
            self._finish(q, error_of(r.kind, r.word, r.text()))

    def _own_holds(self, name: str, token: int) -> int:
        """The holds of lease (name, token) this client had at the server
        when it executed the request whose reply (or event) is being read:
        its leases' holds not being released, and the holds given back or
        confirmed by requests still unanswered -- written after that
        request, since replies come in order, so not yet read by the
        server."""
        n = sum(
            1
            for ls in self.leases
            if ls.name == name and ls.token == token and not ls.released and not ls.unlocking
        )
        n += sum(
            1
            for q in self.fifo
            if q.op in ("UNLOCK", "CONFIRM") and q.name == name and q.token == token
        )
        return n

    def _held_elsewhere(self, q: Req, token: int, holds: int) -> bool:
        """A grant of a lease with more holds than this client's and this
        one: another client of the owner (a process sharing the id and its
        key) holds it and believes it holds it alone. Give back exactly
        this hold (an UNLOCK of a "last hold" would go on while answered
        HELD, releasing the other's too) and fail the acquire; waiting
        would only be granted again. A lost reply's hold that a LOCK sent
        again after a reconnect re-entered looks the same and is refused
        too (it ends at its TTL). True when refused."""
        mine = self._own_holds(q.name, token)
        if holds <= mine + 1:
            return False
        self._internal("UNLOCK", q.name, token)
        if q.abandoned:
            self._finish(q, LockTimeout("given up"))
        else:
            msg = (
                f"{q.name} is held by owner {self.owner} in another process: its "
                f"lease {token} has {holds} holds, {mine + 1} of them this "
                "client's; the new one was given back"
            )
            self._finish(q, HeldByOwner(msg, code="HELD_BY_OWNER"))
        return True

    def _r_lock(self, q: Req, r: wire.Reply, now: float) -> bool:
        if r.kind == "OK" and r.word == "GRANTED":
            token = r.int_arg(1)
            if self._not_of(q, r):
                self._finish(q, ProtocolError(f"no server may grant this: {r.text()}"))
                return True
            if self._held_elsewhere(q, token, _holds(r)):
                return True
            ms = r.int_arg(2)
            most = max([q.ttl] + [ls.ttl for ls in self.leases if ls.name == q.name
                                  and ls.token == token and ls.lost is None])
            if _holds(r) >= 2 and 0 < most < ms:
                # any reentry keeps the longer deadline: its other hold may
                # be one this client gave up and is giving back (a wait
                # cancelled, then a LOCK with a shorter TTL); counted with
                # the TTL asked, it never counts on more than that
                ms = int(most)
            if self._insane(q, token, ms, _holds(r), True):
                self._cleanup_grant(q.name, token)
                self._finish(q, ProtocolError(f"no server may grant this: {r.text()}"))
                return True
            self._granted(q, token, ms, q.sent_at, r)
        elif r.kind == "OK" and r.word == "QUEUED":
            if q.abandoned:
                self.crossing += 1  # its grant may cross the CANCEL
                self._internal("CANCEL", q.name)
                self._finish(q, LockTimeout("given up"))
                return True
            q.where = WAITING
            self.waiting[q.tag] = q
            if q.wait >= 0:
                q.deadline = q.wait_end + self.o.request_timeout_ms
            else:
                q.deadline = NEVER
        elif (
            r.kind == "NO"
            and r.word == "ALREADY_WAITING"
            and not q.abandoned
            and q.retries < ALREADY_WAITING_RETRIES
        ):
            # a LOCK of ours that was given up still waits: the CANCEL of
            # its clean-up went out before this reply came in
            q.retries += 1
            self._write(q, now)
        elif r.kind == "NO" and r.word == "BUSY":
            err = LockTimeout(r.text(), text=r.text(), code="BUSY")
            err.holder = busy_holder_of(r)
            self._finish(q, err)
        else:
            return False
        return True

    def _r_lockall(self, q: Req, r: wire.Reply, now: float) -> bool:
        """A multi-lock's reply: OK LOCKED (a block of n grants), or what a
        single LOCK is answered (QUEUED, BUSY, ALREADY_WAITING; the rest
        is an error: DEADLOCK, ALREADY_HELD, LIMIT, UNAVAILABLE, ...)."""
        if r.kind == "OK" and r.word == "LOCKED":
            n = r.int_arg(1)
            if r.args[0] != q.name or n != len(q.extra["names"]):
                self.insane = True
                self._finish(q, ProtocolError(f"no server may grant this: {r.text()}"))
                return True
            self._read_block(q, r, n)
            return True
        if r.kind == "OK" and r.word == "GRANTED":
            self.insane = True  # a single grant for a multi-lock
            self._finish(q, ProtocolError(f"no server may grant this: {r.text()}"))
            return True
        return self._r_lock(q, r, now)

    def _read_block(self, q: Req, header: wire.Reply, n: int) -> None:
        """The n lines of a multi-lock's grants follow (a reply's or an
        event's): read them as q's body (_lockall_body)."""
        q.header = header
        q.body = []
        q.where = SENT  # a drop meanwhile sends it again (its req= finds them)
        self.body_req = q
        self.body_left = n

    def _lockall_body(self, q: Req) -> None:
        """A multi-lock's block is read: its lines are the grants, in the
        byte order of the names (``granted <name> <token> <ttl_ms>
        holds=1 [proof= until=]``). One no server may send fails q with
        ProtocolError, gives back what it could name, and drops the
        server. From an event (``* LOCKED``, after the wait), the grants
        are confirmed by sending the request again with its id: the
        server answers OK LOCKED with the same leases, lasting their TTL
        from then."""
        header = q.header
        assert header is not None
        names = q.extra.get("names")
        grants: list[tuple[str, int, int, wire.Reply]] = []
        bad = False
        for i, line in enumerate(q.body):
            words = line.split()
            g = wire.Reply("OK", "GRANTED", words[1:], "", line)
            try:
                token, ms = g.int_arg(1), g.int_arg(2)
            except (ValueError, IndexError):
                bad = True
                continue
            if not 0 < token < 1 << 64:
                bad = True
                continue
            grants.append((g.args[0], token, ms, g))
            if (
                words[0] != "granted"
                or (names is not None and g.args[0] != names[i])
                or _holds(g) > 1
                or g.kv("holds") is not None and _holds(g) < 1
                or (q.ttl > 0 and ms > q.ttl)
            ):
                bad = True
        if bad or q.internal:
            for name, token, _, _ in grants:
                self._cleanup_grant(name, token)
            if bad:
                self.insane = True
                self._finish(q, ProtocolError(f"no server may grant this: {header.text()}"))
            return
        now = now_ms()
        if header.kind == "*" and not q.abandoned:
            if self.takes_req and q.reqid:
                q.deadline = now + self.o.request_timeout_ms
                # known to hold, until the confirmation says it: given
                # back if q is given up unsent after a drop (abandon)
                q.extra["grants"] = [(name, token) for name, token, _, _ in grants]
                self._write(q, now)  # the confirmation: OK LOCKED again
                return
            # no request id (no server of multi-locks takes none): count
            # from the request's write, before any of the grants
        self._granted_all(q, grants, q.sent_at)

    def _granted_all(
        self, q: Req, grants: list[tuple[str, int, int, wire.Reply]], sent_at: float
    ) -> None:
        """A multi-lock's grants, counted from sent_at: the leases, or,
        when q was given up or the grants came too late to be used, given
        back (asked again while the wait lasts, as a single lock's)."""
        if q.abandoned:
            for name, token, _, _ in grants:
                self._cleanup_grant(name, token)
            self._finish(q, LockTimeout("given up"))
            return
        made: list[LeaseState] = []
        for name, token, ms, g in grants:
            ls = LeaseState(name, token)
            _note_proof(ls, g)
            ls.ttl = q.ttl
            ls.acquired_at = sent_at
            ls.confirm(sent_at, ms)
            made.append(ls)
        now = now_ms()
        if any(now >= ls.deadline - self.guard_ms(ls.ttl) for ls in made):
            for ls in made:
                self._cleanup_grant(ls.name, ls.token)
            if q.wait < 0 or (q.wait > 0 and q.wait_end > now):
                q.reqid = request_id()  # a new request: not the grants given back
                q.deadline = now + self.o.request_timeout_ms
                self._write(q, now)
            else:
                self._finish(q, LockTimeout("granted too late to be used"))
            return
        o = q.opts
        tickets = o.get("tickets") or {}
        for ls in made:
            ls.renew = o.get("renew", self.o.renew)
            ls.max_hold = o.get("max_hold", self.o.max_hold_ms)
            ls.on_lost = o.get("on_lost")
            ls.on_at_risk = o.get("on_at_risk")
            ls.ticket = tickets.get(ls.name)
        for ls in made:
            ls.core = self
        self.leases.extend(made)
        self._finish(q, None, made)

    def _r_confirm(self, q: Req, r: wire.Reply, now: float) -> bool:
        if r.kind == "OK" and r.word == "REFRESHED":
            if self._not_of(q, r) or self._insane(q, q.token, r.int_arg(1), _holds(r), False):
                self._cleanup_grant(q.name, q.token)
                self._finish(q, ProtocolError(f"no server may confirm this: {r.text()}"))
                return True
            self._granted(q, q.token, r.int_arg(1), q.sent_at, r)
        elif r.kind == "NO" and r.word == "NOT_HOLDER":
            if not q.abandoned and (q.wait < 0 or q.wait_end > now):
                q.op = "LOCK"  # expired before we could confirm it: again
                q.reqid = request_id()  # a new request (see below)
                self._write(q, now)
            else:
                self._finish(q, LockTimeout("the grant expired before it was confirmed"))
        else:
            self._cleanup_grant(q.name, q.token)
            self._finish(q, error_of(r.kind, r.word, r.text()))
        return True

    def _granted(self, q: Req, token: int, ms: int, sent_at: float, r: wire.Reply) -> None:
        if q.abandoned:
            self._cleanup_grant(q.name, token)
            self._finish(q, LockTimeout("given up"))
            return
        ls = LeaseState(q.name, token)
        _note_proof(ls, r)
        ls.mode = "shared" if q.shared else ("semaphore" if q.limit > 1 else "exclusive")
        ls.limit = max(q.limit, 1)
        ls.warn = int(q.opts.get("warn") or 0)
        ls.delay = int(q.opts.get("delay") or 0)
        # a new lease says the value it was granted with; a reentry keeps
        # the lease's, as the server does (it may be another process's of
        # this owner: that must not change what the leader says)
        held = [o for o in self.leases
                if o.name == q.name and o.token == token and o.lost is None]
        ls.value = held[0].value if held else (q.opts.get("value") or "")
        # a reentry of a lease this owner still has never lowers the TTL
        # it is renewed with (PROTOCOL.md, Semantics)
        ls.ttl = q.ttl
        for other in self.leases:
            if other.name == q.name and other.token == token and other.lost is None:
                ls.ttl = max(ls.ttl, other.ttl)
        ls.acquired_at = sent_at
        self._confirm(ls, q, sent_at, ms)
        now = now_ms()
        if now >= ls.deadline - self.guard_ms(ls.ttl):
            # The reply came so late (the server held it through a
            # take-over or a stall of Redis) that the lease is already
            # inside its lost guard: handed out, it would be declared
            # lost at the next tick while lock() said success. Give it
            # back; ask again while the wait lasts.
            self._cleanup_grant(q.name, token)
            if q.wait < 0 or (q.wait > 0 and q.wait_end > now):
                q.op = "LOCK"
                # a new request, with an id of its own: the grant given
                # back must not be found as its own
                q.reqid = request_id()
                q.deadline = now + self.o.request_timeout_ms
                self._write(q, now)
            else:
                self._finish(q, LockTimeout("granted too late to be used"))
            return
        o = q.opts
        ls.renew = o.get("renew", self.o.renew)
        mh = o.get("max_hold", self.o.max_hold_ms)
        ls.max_hold = mh
        ls.on_lost = o.get("on_lost")
        ls.on_at_risk = o.get("on_at_risk")
        ls.ticket = o.get("ticket")
        ls.core = self
        self.leases.append(ls)
        if q.waiters:  # told while its grant was being confirmed
            self._contended(ls, q.waiters)
        self._finish(q, None, ls)

    def _r_unlock(self, q: Req, r: wire.Reply, now: float) -> bool:
        ls = q.lease
        others = any(
            o is not ls and o.name == q.name and o.token == q.token and not o.released
            for o in self.leases
        )
        dq = self.turns.get(q.name)
        # nobody of this client acquires the name meanwhile (a LOCK that
        # would be granted as a reentry of this lease)
        quiet = not dq or (ls is not None and ls.ticket is not None and dq[0] is ls.ticket)
        if r.kind == "OK" and r.word == "HELD" and q.last_hold and not others and quiet:
            # holds we lost track of (a LOCK sent again after a reconnect
            # was granted twice, or another client of our owner's hold
            # not given back yet): give them back
            q.retries += 1
            self._write(q, now)
            return True
        if r.kind == "OK" and r.word in ("RELEASED", "HELD"):
            self._finish(q, None, True)
            return True
        if r.kind == "NO" and r.word == "NOT_HOLDER":
            if q.last_hold and (q.resent or q.retries):
                # released before the drop; or, giving back holds we lost
                # track of, by another client of our owner giving back
                # its own first (a race: gone, as asked)
                self._finish(q, None, True)
            else:
                self._finish(q, NotHolder(r.text(), text=r.text(), code=r.word))
            return True
        return False

    def _r_refresh(self, q: Req, r: wire.Reply, now: float) -> bool:
        ls = q.lease
        assert ls is not None
        if q.op in ("RENEW", "RECLAIM") and ls.core is not self and ls.core is not None:
            # the lease moved to another partition's client meanwhile
            # (detach): its renewals are that client's now
            self._finish(q, None)
            return True
        if q.op in ("RENEW", "RECLAIM"):
            ls.refreshing = False
        if (r.kind == "OK" and r.word == "REFRESHED") or (
            r.kind == "OK" and r.word == "RECLAIMED"
        ):
            ms = r.int_arg(1 if r.word == "REFRESHED" else 2)
            if self._insane(q, ls.token, ms, 0, False):
                self._finish(q, ProtocolError(f"no server may refresh so: {r.text()}"))
                return True
            if ls.lost is None and not ls.unlocking and not ls.released:
                if q.op == "REFRESH":
                    ls.ttl = q.ttl
                _note_proof(ls, r)
                self._confirm(ls, q, q.sent_at, ms)
                ls.moves = 0
            if q.op == "REFRESH" and q.extra.get("value"):
                # a proclaim: the server has the lease's new value
                self._say_value(q.name, q.token, q.extra["value"])
            self._finish(q, None, ms / 1000.0)
            return True
        if (
            r.kind == "NO"
            and r.word == "MOVED"
            and q.op in ("RENEW", "RECLAIM")
            and ls.core is self
            and ls.live()
            and ls.owned
            and not ls.moving
        ):
            # its slot went to another partition with its locks (PARTITION
            # MOVE): the lease is there, same token. Not a loss: the
            # driver moves it to that partition's client, which renews it
            # at once. Too many in a row: retried as UNAVAILABLE, below.
            err = error_of(r.kind, r.word, r.text())
            ls.moves += 1
            if ls.moves <= RENEW_MOVES_MAX and isinstance(err, Moved):
                ls.moving = True
                if self.hooks.moved(ls, err):
                    self._finish(q, err)
                    return True
                ls.moving = False
            ls.moves = 0
        if (
            r.kind == "NO"
            and r.word == "NOT_HOLDER"
            and q.op == "RENEW"
            and ls.proof
            and ls.live()
            and ls.deadline > now
        ):
            # the server does not know the lease: if Redis forgot it
            # (grants closed after a loss), ask for it again with the
            # proof its last grant or refresh gave
            q.op = "RECLAIM"
            ls.refreshing = True
            self._write(q, now)
            return True
        if r.kind == "NO" and r.word == "NOT_HOLDER":
            if ls.live():
                self._lose(ls, LostReason.REJECTED)
            self._finish(q, LockLost(r.text(), text=r.text(), code=r.word))
            return True
        if q.op in ("RENEW", "RECLAIM") and ls.live():
            # UNAVAILABLE and the like: try again soon; the guard says
            # when it is too late. A slot on its way to another partition
            # with its locks: sooner (move_retry_ms).
            if in_move(error_of(r.kind, r.word, r.text())):
                ls.renew_at = now + move_retry_ms(ls.ttl)
            else:
                ls.renew_at = now + max(ls.ttl / 10.0, RENEW_RETRY_MIN_MS)
            self._risk(ls)
        return False

    def _say_value(self, name: str, token: int, value: str) -> None:
        """Lease (name, token) says value now: every hold of it keeps it
        (for a RECLAIM, and lease.value)."""
        for o in self.leases:
            if o.name == name and o.token == token:
                o.value = value

    def _r_check(self, q: Req, r: wire.Reply, now: float) -> bool:
        if r.kind == "OK" and r.word == "VALID":
            self._finish(q, None, r.int_arg(2) / 1000.0)
        elif r.kind == "NO" and r.word == "STALE":
            err = LockLost(r.text(), text=r.text(), code=r.word)
            self._finish(q, err)
        else:
            return False
        return True

    def _r_hello(self, q: Req, r: wire.Reply, now: float) -> bool:
        if r.kind != "OK":
            # refused (NO DENIED <id> need=key): on a reconnect, acting as
            # another owner would be worse than not at all
            err = error_of(r.kind, r.word, r.text())
            if not self.ready:
                self.fatal = err
            self._finish(q, err)
            self.drop_wanted = True
            return True
        v = r.kv("default_ttl_ms")
        if v and v.isdigit() and int(v) > 0:
            self.default_ttl = float(v)
        key = r.kv("key")
        if key:
            self.key = key  # to present on every reconnect
        if r.kv("auth") == "required" and r.kv("owner") is None:
            err = Denied("the server requires AUTH: give a password, or a user and its secret")
            if not self.ready:
                self.fatal = err
            self._finish(q, err)
            self.drop_wanted = True
            return True
        self.takes_req = takes_req(r.kv("version"))
        self.backoff = float(BACKOFF_MIN_MS)
        self.failed_i = -1
        self.session_ok = True
        self.ready = True
        self._finish(q, None, True)
        self._session(now)
        return True

    def _r_describe(self, q: Req, r: wire.Reply, now: float) -> bool:
        """HELLO host= pid= cmd=: a server that does not know it (dlockd
        0.3, ERR BAD_ARG) refuses it; nothing fails, nothing more is said."""
        if r.kind != "OK":
            self.desc_refused = True
        self._finish(q, None, r.kind == "OK")
        return True

    def _describe(self) -> dict[str, Any]:
        """The words of the describing HELLO (host, pid, cmd), as sent."""
        o = self.o
        host = o.desc_host if o.desc_host is not None else socket.gethostname()
        if o.desc_cmd is not None:
            cmd = o.desc_cmd
        elif o.describe == "full":
            cmd = _command_line()
        else:
            cmd = _program_name()
        pid = o.desc_pid if o.desc_pid is not None else os.getpid()
        return {
            "host": wire.desc_encode(host, wire.DESC_HOST_MAX) or None,
            "pid": pid,
            "cmd": wire.desc_encode(cmd, wire.DESC_CMD_MAX) or None,
        }

    def _r_auth(self, q: Req, r: wire.Reply, now: float) -> bool:
        if r.kind == "OK":
            self._finish(q, None, True)
            return True
        err = error_of(r.kind, r.word, r.text())
        if not self.ready:
            self.fatal = err
        self.drop_wanted = True
        self._finish(q, err)
        return True

    def _r_simple(self, q: Req, r: wire.Reply, now: float) -> bool:
        """PING, CANCEL, BREAK: OK is success."""
        if r.kind != "OK":
            return False
        self._finish(q, None, r.args[0] if r.args else "")
        return True

    def _r_status(self, q: Req, r: wire.Reply, now: float) -> bool:
        if r.kind == "OK" and r.word == "STATUS":
            self._finish(q, None, status_of(q.name, r))
            return True
        return False

    def _r_body(self, q: Req, r: wire.Reply, now: float) -> bool:
        """STATS, LOCKS, HOLDERS, MAP: a header saying how many lines
        follow."""
        if r.kind != "OK" or r.word != q.op:
            return False
        n = r.int_arg(1 if q.op in ("HOLDERS", "MAP") else 0)
        q.header = r
        q.body = []
        if n > BODY_LINES_MAX:
            # more than any server sends: one that would keep us reading
            self.insane = True
            self._finish(q, ProtocolError(f"a reply of {n} lines: dropped"))
            return True
        if n == 0:
            self._body_done(q)
        else:
            self.body_req = q
            self.body_left = n
            q.where = SENT
        return True

    def _r_watch(self, q: Req, r: wire.Reply, now: float) -> bool:
        """WATCH (a caller's: its outcome) and REWATCH (after a reconnect:
        each watch of the pattern is told it is watched again, or that it
        was refused and is gone)."""
        ok = r.kind == "OK" and r.word == "WATCHING"
        holders = r.kv("holders")
        n = int(holders) if holders is not None and holders.isdigit() else -1
        if q.op == "WATCH":
            if not ok:
                return False  # the error ends the call
            self._finish(q, None, n)
            return True
        for w in list(self.watches):
            if not w.active or q.name not in w.patterns:
                continue
            if ok:
                w.put(WatchEvent(q.name, "resumed", holders=n))
            else:
                w.put(WatchEvent(q.name, "refused", error=r.text()))
                w.patterns.remove(q.name)
            self.hooks.watch_event(w)
            if not w.patterns:
                self.watch_close(w)
        self._finish(q, None, ok)
        return True

    def _r_unwatch(self, q: Req, r: wire.Reply, now: float) -> bool:
        self._finish(q, None, r.kind == "OK")
        return True

    # ---- watches (the driver's callers) --------------------------------

    def watch_open(self, patterns: list[str]) -> WatchState:
        """A new watch; each of its patterns is then asked for with a
        watch_request(), and once all are answered, watch_started()."""
        w = WatchState(patterns)
        self.watches.append(w)
        return w

    def watch_request(self, pattern: str, now: float) -> Req:
        q = Req("WATCH", pattern)
        q.deadline = now + self.o.request_timeout_ms
        return q

    def watch_started(self, w: WatchState) -> None:
        w.active = not w.closed

    def watch_take(self, w: WatchState) -> WatchEvent | None:
        """The next event of w, or None when none waits."""
        if w.missed and len(w.events) < WATCH_QUEUE_MAX:
            w.events.append(WatchEvent("", "overflow", missed=w.missed))
            w.missed = 0
        return w.events.popleft() if w.events else None

    def watch_close(self, w: WatchState) -> None:
        """End w: UNWATCH what no other watch watches; its reader is woken
        (and sees the events still kept, then the end)."""
        if w in self.watches:
            self.watches.remove(w)
        if w.closed:
            return
        w.closed = True
        for p in w.patterns:
            if any(p in o.patterns for o in self.watches):
                continue
            if self.state == UP and self.session_ok and not self.forked:
                self._internal("UNWATCH", p)
        self.hooks.watch_event(w)

    def _body_done(self, q: Req) -> None:
        r = q.header
        assert r is not None
        if q.op == "LOCKALL":
            self._lockall_body(q)
            return
        try:
            if q.op == "MAP":
                # OK MAP <epoch> <n>: the epoch and the lines, read by
                # the router (_route.parse_map)
                self._finish(q, None, (r.int_arg(0), list(q.body)))
            elif q.op == "STATS":
                stats = {}
                for line in q.body:
                    k, _, v = line.partition(" ")
                    stats[k] = v
                self._finish(q, None, stats)
            elif q.op == "LOCKS":
                page = [status_of(ln.split()[0], ln.split()[1:]) for ln in q.body if ln]
                self._finish(q, None, LocksPage(page, int(r.kv("more") or 0)))
            else:
                st = status_of(q.name, r)
                st = dataclasses.replace(st, held=st.holders > 0)
                hs = [holder_of(ln) for ln in q.body]
                first = next((h for h in hs if not h.waiter), None)
                if first is not None:
                    # the status names the first holder, as STATUS does
                    st = dataclasses.replace(
                        st, token=first.token, ttl=first.ttl, count=first.count,
                        owner=first.owner, user=first.user, held_for=first.held_for,
                        host=first.host, pid=first.pid, cmd=first.cmd,
                        value=first.value)
                self._finish(
                    q,
                    None,
                    Holders(
                        st,
                        [h for h in hs if not h.waiter],
                        [h for h in hs if h.waiter],
                        int(r.kv("more") or 0),
                    ),
                )
        except (ValueError, IndexError):
            self._finish(q, ProtocolError(f"unexpected reply: {r.text()}"))

    # ---- output --------------------------------------------------------

    def _format(self, q: Req, now: float) -> bytes:
        self.seq += 1
        q.tag = "p%d" % self.seq
        op, tag = q.op, q.tag
        if op == "AUTH":
            words = [self.o.user, self.o.password] if self.o.user else [self.o.password]
            return wire.request("AUTH", *words, tag=tag)
        if op == "HELLO":
            return wire.request("HELLO", owner=self.owner, key=self.key or None, tag=tag)
        if op == "DESCRIBE":
            return wire.request("HELLO", tag=tag, **self._describe())
        if op == "LOCK":
            wait = _wait_word(q, now)
            return wire.request(
                "TRYLOCK" if q.wait == 0 else "LOCK",
                q.name,
                ttl=int(q.ttl),
                wait=wait,
                mode="shared" if q.shared else None,
                limit=q.limit if q.limit > 1 else None,
                warn=int(q.opts["warn"]) if q.opts.get("warn") else None,
                delay=int(q.opts["delay"]) if q.opts.get("delay") else None,
                req=q.reqid if q.reqid and self.takes_req else None,
                notify="waiters" if q.opts.get("notify_waiters") else None,
                value=q.opts.get("value") or None,
                tag=tag,
            )
        if op == "LOCKALL":
            wait_all = _wait_word(q, now)
            return wire.request(
                "TRYLOCK" if q.wait == 0 else "LOCK",
                *q.extra["names"],
                ttl=int(q.ttl),
                wait=wait_all,
                req=q.reqid if q.reqid and self.takes_req else None,
                tag=tag,
            )
        if op in ("CONFIRM", "RENEW", "REFRESH"):
            # a proclaim is a REFRESH with the lease's new value
            value = q.extra.get("value") if op == "REFRESH" else None
            return wire.request(
                "REFRESH", q.name, str(q.token), ttl=int(q.ttl), value=value or None, tag=tag
            )
        if op == "RECLAIM":
            ls = q.lease
            assert ls is not None
            # the lost record's warning, lock delay and value (a client takes
            # the holds of a name one at a time: its lease has one)
            return wire.request(
                "RECLAIM",
                q.name,
                str(q.token),
                proof=ls.proof,
                until=str(ls.until),
                ttl=int(q.ttl),
                mode="shared" if ls.mode == "shared" else None,
                limit=ls.limit if ls.limit > 1 else None,
                warn=ls.warn if 0 < ls.warn < int(q.ttl) else None,
                delay=ls.delay if ls.delay > 0 else None,
                value=ls.value or None,
                tag=tag,
            )
        if op in ("UNLOCK", "CHECK"):
            return wire.request(op, q.name, str(q.token), tag=tag)
        if op == "BREAK":
            return wire.request(op, q.name, str(q.token), reason=q.extra["reason"], tag=tag)
        if op in ("WATCH", "REWATCH", "UNWATCH"):
            return wire.request("UNWATCH" if op == "UNWATCH" else "WATCH", q.name, tag=tag)
        if op in ("CANCEL", "STATUS", "HOLDERS"):
            return wire.request(op, q.name, tag=tag)
        if op == "LOCKS":
            e = q.extra
            words = [e["prefix"]] if e.get("prefix") else []
            return wire.request(
                "LOCKS",
                *words,
                limit=e.get("limit"),
                after=e.get("after"),
                by="waiters" if e.get("by_waiters") else None,
                tag=tag,
            )
        return wire.request(op, tag=tag)  # STATS, PING, MAP

    def _confirm(self, ls: LeaseState, q: Req, sent_at: float, ms: float) -> None:
        """ls.confirm(), but a REFRESH of the lease written after q (the
        fifo is in the order of the writes, which the server answers in)
        may have shortened it already: until its reply the lease counts on
        the shorter end, as from the moment it was written (_write). Found
        by the fault campaign in libdlock: a reentry to 3 s answered while
        the renewal of the 300 ms lease, written after it, was in flight;
        the holder counted on 3 s and the lock went to another owner."""
        ls.confirm(sent_at, ms)
        for r in self.fifo:
            if (
                r is q
                or r.lease is None
                or r.ttl <= 0
                or r.op not in ("REFRESH", "RENEW", "RECLAIM")
                or (r.lease.name, r.lease.token) != (ls.name, ls.token)
            ):
                continue
            d = r.sent_at + r.ttl - slack_ms(r.ttl)
            if d < ls.deadline:
                ls.deadline = d

    def _write(self, q: Req, now: float) -> None:
        self.out += self._format(q, now)
        q.sent_at = now
        q.where = SENT
        ls = q.lease
        # A REFRESH that shortens the lease may take effect even if its
        # reply never comes (a server that crashed after recording it): the
        # lease counts on the shorter deadline from the moment it is sent.
        if q.op in ("REFRESH", "RENEW") and ls is not None and q.ttl > 0:
            d = now + q.ttl - slack_ms(q.ttl)
            if d < ls.deadline:
                ls.deadline = d
            # ... and its guard is the shorter TTL's from then on (the
            # longer TTL's guard could exceed the shorter deadline and
            # declare the lease lost before the reply; a longer TTL counts
            # once confirmed)
            ls.ttl = min(ls.ttl, q.ttl)
        self.fifo.append(q)

    def _internal(self, op: str, name: str = "", token: int = 0, last_hold: bool = False) -> None:
        q = Req(op, name, internal=True)
        q.token = token
        q.last_hold = last_hold
        if self.state == UP and (self.session_ok or op in ("AUTH", "HELLO")):
            self._write(q, now_ms())
        elif (op == "UNLOCK" or self.state == UP) and self.state != DEAD:
            q.where = UNSENT
            self.unsent.append(q)

    def _renew(self, ls: LeaseState, now: float) -> None:
        q = Req("RENEW", ls.name, internal=True)
        q.token = ls.token
        q.ttl = ls.ttl
        q.lease = ls
        ls.refreshing = True
        self._write(q, now)

    def _cleanup_grant(self, name: str, token: int) -> None:
        """Release a grant nobody wants: one hold of a lease we keep, or
        the whole lease (UNLOCK until RELEASED)."""
        keep = any(ls.name == name and ls.token == token and ls.live() for ls in self.leases)
        self._internal("UNLOCK", name, token, last_hold=not keep)

    # ---- requests (the driver's callers) --------------------------------

    def submit(self, q: Req, now: float) -> None:
        """Write q now, or keep it for the connection being made; a dead
        client ends it at once."""
        if self.closing or self.state == DEAD:
            msg = "the client is closed" if self.closing else "not connected"
            if self.forked:
                msg = "this client belongs to the process that made it (fork)"
            self._finish(q, ConnectionLost(msg))
        elif q.op == "LOCKALL" and self.multi is not None and self.multi is not q:
            # one at a time: this one goes when the one before has ended,
            # within its wait (a try: within request_timeout; tick())
            q.where = HELD_BACK
            if q.wait == 0:
                q.extra["held_until"] = now + self.o.request_timeout_ms
            else:
                q.extra["held_until"] = q.wait_end  # NEVER for a wait for ever
            q.deadline = q.extra["held_until"] + self.o.request_timeout_ms
            self.multi_queue.append(q)
        elif self.state == UP and self.session_ok:
            if q.op == "LOCKALL":
                self.multi = q
            self._write(q, now)
        else:
            if q.op == "LOCKALL":
                self.multi = q
            q.where = UNSENT
            self.unsent.append(q)

    def _multi_done(self, q: Req) -> None:
        """q has ended: if it was the multi-lock in progress, the next one
        held back goes (or ends, its wait over)."""
        if q is not self.multi:
            return
        self.multi = None
        while self.multi_queue and self.multi is None:
            nxt = self.multi_queue.popleft()
            nxt.where = NOWHERE
            now = now_ms()
            if nxt.extra["held_until"] <= now:
                self._finish(nxt, LockTimeout("the wait ran out behind another multi-lock"))
                continue
            nxt.deadline = now + self.o.request_timeout_ms
            self.submit(nxt, now)

    def abandon(self, q: Req) -> None:
        """The caller stops waiting for q (timeout, cancellation)."""
        if q.done:
            return
        if q.where == HELD_BACK:
            self.multi_queue.remove(q)
            q.where = NOWHERE
        elif q.where == UNSENT:
            if q.op == "UNLOCK" and q.last_hold:
                q.internal = True  # still release the lease once connected
                return
            self.unsent.remove(q)
            q.where = NOWHERE
            # a multi-lock's grants read before a drop, their
            # confirmation unsent: given back, the UNLOCKs kept for the
            # next connection (found by review: they were held until
            # their TTL)
            for name, token in q.extra.get("grants", ()):
                self._cleanup_grant(name, token)
        elif q.where == WAITING:
            self.waiting.pop(q.tag, None)
            q.where = NOWHERE
            # leave the queue; a grant that crosses the CANCEL comes as a
            # "* GRANTED" nobody waits for, and is released
            if self.state == UP:
                self.crossing += 1  # its grant may cross the CANCEL
                self._internal("CANCEL", q.name)
        elif q.where == SENT:
            q.abandoned = True  # its reply will be cleaned up
            return
        q.done = True
        q.error = LockTimeout("given up")
        self._multi_done(q)

    def lock_request(
        self,
        name: str,
        ttl_ms: float | None,
        wait_ms: float,
        shared: bool,
        limit: int,
        now: float,
    ) -> Req:
        q = Req("LOCK", name)
        q.ttl = ttl_ms if ttl_ms else self.default_ttl
        q.wait = wait_ms
        q.shared = shared
        q.limit = limit
        q.deadline = now + self.o.request_timeout_ms
        q.reqid = request_id()
        return q

    def lockall_request(
        self, names: list[str], ttl_ms: float | None, wait_ms: float, now: float
    ) -> Req:
        """A multi-lock of `names` (2 to MULTI_MAX, distinct, in byte
        order): one LOCK naming them all, exclusive, all granted or none
        held. Its outcome is the list of LeaseStates, in the same order."""
        q = Req("LOCKALL", names[0])
        q.extra = {"names": list(names)}
        q.ttl = ttl_ms if ttl_ms else self.default_ttl
        q.wait = wait_ms
        if wait_ms > 0:
            q.wait_end = now + wait_ms  # a wait held back here counts too
        q.deadline = now + self.o.request_timeout_ms
        q.reqid = request_id()
        return q

    def holding(self, name: str) -> LeaseState | None:
        """A lease of `name` this client holds (live, not being
        released): a multi-lock of the name would be refused
        (ALREADY_HELD), whatever its wait."""
        for ls in self.leases:
            if ls.name == name and ls.live() and ls.owned:
                return ls
        return None

    def release_request(self, ls: LeaseState, now: float) -> Req | None:
        """The UNLOCK of one hold; None when nothing is to be sent (a lease
        not owned by this process)."""
        if ls.released or ls.unlocking or not ls.owned:
            return None
        others = any(
            o is not ls and o.name == ls.name and o.token == ls.token and not o.released
            for o in self.leases
        )
        ls.unlocking = True
        q = Req("UNLOCK", ls.name)
        q.token = ls.token
        q.lease = ls
        q.last_hold = not others
        q.deadline = now + self.o.request_timeout_ms
        return q

    def released(self, ls: LeaseState) -> None:
        """The release of ls is over (answered, or given up): forget it,
        and pass its turn on."""
        ls.unlocking = False
        ls.released = True
        if ls in self.leases:
            self.leases.remove(ls)
        if ls.ticket is not None:
            self.give_turn(ls.ticket)
            ls.ticket = None

    def release_over(self, ls: LeaseState, q: Req) -> None:
        """The UNLOCK q of ls has ended (or been given up): ls is
        released (released()), unless q was answered MOVED -- the lease's
        slot went to another partition with the lease, which this UNLOCK
        did not reach: ls is held still, to be re-homed and released
        there (the driver's); or UNAVAILABLE while its slot moves: held
        still, released once there."""
        if q.done and (isinstance(q.error, Moved) or in_move(q.error)):
            ls.unlocking = False  # (or the slot is on its way: again soon)
            return
        self.released(ls)

    def detach(self, ls: LeaseState) -> bool:
        """ls leaves this client: its slot went to another partition,
        whose client takes it (attach). Its turn goes with it (the next
        acquisition of the name here, if any, goes: it is answered MOVED
        and follows the name to the same client, where it waits behind
        this lease). A reply that still comes here about it finds it gone.
        False if ls is not this client's (moved or released already)."""
        if ls.core is not self or ls.released or ls.unlocking:
            return False  # (an UNLOCK in flight here: its answer is this client's)
        if ls in self.leases:
            self.leases.remove(ls)
        ls.core = None
        if ls.ticket is not None:
            self.give_turn(ls.ticket)  # attach makes it ready there
        return True

    def attach(self, ls: LeaseState, now: float) -> None:
        """ls comes from another partition's client (detach): same token
        and proof; it holds its name's turn here, and is renewed at once
        (the server restarted its TTL when it took the lease in)."""
        ls.core = self
        self.leases.append(ls)
        t = ls.ticket
        if t is not None:
            self.turns.setdefault(t.name, collections.deque()).appendleft(t)
            t.ready = True
        ls.moving = False
        ls.refreshing = False
        ls.renew_at = now

    def refresh_request(self, ls: LeaseState, ttl_ms: float | None, now: float) -> Req:
        q = Req("REFRESH", ls.name)
        q.token = ls.token
        q.ttl = ttl_ms if ttl_ms else ls.ttl
        q.lease = ls
        q.deadline = now + self.o.request_timeout_ms
        return q

    def proclaim_request(self, ls: LeaseState, value: str, now: float) -> Req:
        """A proclaim (the lease's new value, encoded): a REFRESH of the
        lease for its TTL with value=; its success refreshes the lease as
        a refresh does and makes value the lease's (_r_refresh)."""
        q = self.refresh_request(ls, None, now)
        q.extra = {"value": value}
        return q

    def simple_request(self, op: str, name: str = "", token: int = 0, **extra: Any) -> Req:
        q = Req(op, name)
        q.token = token
        q.extra = extra
        q.deadline = now_ms() + self.o.request_timeout_ms
        return q

    def _finish(self, q: Req, err: DlockError | None, result: Any = None) -> None:
        if q.done:
            return
        q.where = NOWHERE
        q.done = True
        q.error = err
        q.result = result
        self._multi_done(q)
        if q.internal or q.abandoned:
            return
        self.hooks.done(q)

    # ---- turns ---------------------------------------------------------

    def take_turn(self, name: str) -> Ticket:
        """A place in this client's line for `name`; ready at once if
        nobody of this client holds or acquires it."""
        t = Ticket(name)
        dq = self.turns.setdefault(name, collections.deque())
        dq.append(t)
        t.ready = len(dq) == 1
        return t

    def give_turn(self, t: Ticket) -> None:
        """t is done with its name (its lease released or lost, its
        acquisition failed or given up): the next in line goes."""
        dq = self.turns.get(t.name)
        if dq is None or t not in dq:
            return
        head = dq[0] is t
        dq.remove(t)
        t.ready = False
        if not dq:
            del self.turns[t.name]
        elif head:
            nxt = dq[0]
            nxt.ready = True
            self.hooks.turn(nxt)

    # ---- leases and timers ---------------------------------------------

    def _lose(self, ls: LeaseState, why: LostReason) -> None:
        if ls.lost is not None:
            return
        ls.lost = why
        if ls.ticket is not None:
            self.give_turn(ls.ticket)
            ls.ticket = None
        if ls.owned:
            self.hooks.lost(ls)

    def _contended(self, ls: LeaseState, n: int) -> None:
        """n requests wait for ls's lock: keep the count, tell the
        application (the driver keeps it for a lease it has not handed out
        yet: contended_due)."""
        ls.waiters = n
        if not ls.owned:
            return
        if ls.handle is None:
            ls.contended_due = True  # the driver tells it with the handle
        else:
            self.hooks.contended(ls)

    def _risk(self, ls: LeaseState) -> None:
        if not ls.at_risk and ls.live():
            ls.at_risk = True
            self.hooks.at_risk(ls)

    def guard_ms(self, ttl: float) -> float:
        if self.o.lost_guard_ms is not None:
            return self.o.lost_guard_ms
        return max(ttl / 10.0, GUARD_MIN_MS)

    def tick(self, now: float) -> float:
        """Renew what is due, declare lost what can no longer be confirmed
        in time, say when renewals are overdue; returns the next time
        there is something to do (ms, NEVER)."""
        nxt = NEVER
        if self.forked:
            return nxt
        if self.state == UP and not self.session_ok:
            if now >= self.hello_by:
                self.last_error = "no answer to HELLO in time"
                self.hello_by = NEVER
                self.drop_wanted = True
            else:
                nxt = min(nxt, self.hello_by)
        if (self.naddrs > 1 and self.state == UP and self.session_ok
                and self.body_req is None and self.fifo):
            # A server that stops answering (stopped, hung, a path that
            # drops its replies) is left for the next of the list (with one
            # server there is nowhere to go: a drop would only lose the
            # replies of what it may still carry out): the
            # oldest request written and not answered within
            # request_timeout drops the connection. A LOCK's wait in the
            # queue does not count (its OK QUEUED moved it to waiting),
            # nor does HELLO's (hello_by). As libdlock and the Go client.
            due = self.fifo[0].sent_at + self.o.request_timeout_ms
            if now >= due:
                self.last_error = "no reply within the request timeout"
                self.drop_wanted = True
                self.stalled = True
            else:
                nxt = min(nxt, due)
        for q in list(self.multi_queue):
            if now >= q.extra["held_until"]:
                self.multi_queue.remove(q)
                self._finish(q, LockTimeout("the wait ran out behind another multi-lock"))
            else:
                nxt = min(nxt, q.extra["held_until"])
        for ls in list(self.leases):
            if not ls.live():
                continue
            lost_at = ls.deadline - self.guard_ms(ls.ttl)
            if now >= lost_at:
                self._lose(ls, LostReason.MAX_HOLD if ls.capped else LostReason.UNCONFIRMED)
                continue
            nxt = min(nxt, lost_at)
            if not ls.renew or ls.capped:
                continue
            overdue = ls.renew_at + ls.ttl / 6.0
            if not ls.at_risk:
                if now >= overdue:
                    self._risk(ls)
                else:
                    nxt = min(nxt, overdue)
            if ls.refreshing or ls.moving or self.state != UP or not self.session_ok:
                continue
            if now < ls.renew_at:
                nxt = min(nxt, ls.renew_at)
                continue
            if ls.max_hold is not None and now + ls.ttl > ls.acquired_at + ls.max_hold:
                ls.capped = True  # let it run out: renewal would pass max_hold
                continue
            self._renew(ls, now)
        return nxt

    def take_drop(self) -> bool:
        """True once when a reply asked for the connection to be dropped."""
        d, self.drop_wanted = self.drop_wanted, False
        return d


_REPLIES: dict[str, Callable[[Core, Req, wire.Reply, float], bool]] = {
    "LOCK": Core._r_lock,
    "LOCKALL": Core._r_lockall,
    "CONFIRM": Core._r_confirm,
    "UNLOCK": Core._r_unlock,
    "REFRESH": Core._r_refresh,
    "RENEW": Core._r_refresh,
    "RECLAIM": Core._r_refresh,
    "CHECK": Core._r_check,
    "HELLO": Core._r_hello,
    "DESCRIBE": Core._r_describe,
    "AUTH": Core._r_auth,
    "PING": Core._r_simple,
    "CANCEL": Core._r_simple,
    "BREAK": Core._r_simple,
    "STATUS": Core._r_status,
    "STATS": Core._r_body,
    "LOCKS": Core._r_body,
    "HOLDERS": Core._r_body,
    "MAP": Core._r_body,
    "WATCH": Core._r_watch,
    "REWATCH": Core._r_watch,
    "UNWATCH": Core._r_unwatch,
}
