# SPDX-License-Identifier: MIT
"""dlockd.Client: the core driven by one background thread per client.

The thread is the only reader of the socket. It loops on a selector over
the socket and a wake-up pipe, with a timeout set to the core's next
deadline (a renewal, a lease's lost guard, a reconnect, a connect in
progress) and never longer than CLOCK_STEP: the selector's clock stops
during a suspend, CLOCK_BOOTTIME does not. Connects and TLS handshakes
are non-blocking, so a lease's guard fires on time even while the daemon
does not answer.

One lock (``_mu``) guards the core and the socket: a calling thread takes
it to submit its request and write it at once (no thread hop on the way
out), then waits on its request's own Event; the thread takes it around
everything but the selector and the application's callbacks, which it
runs (on_lost, on_at_risk, on_contended) without it.
"""

from __future__ import annotations

import collections
import errno
import os
import selectors
import socket
import ssl
import threading
import time
from typing import Any, Callable, Iterator

from . import _api
from . import _options
from . import _route
from ._api import _UNSET, LeasesView, LeaseView, lock_all_args, lock_args
from ._core import (
    CONNECTING,
    DEAD,
    DOWN,
    NEVER,
    UP,
    Core,
    LeaseState,
    Req,
    Ticket,
    WatchState,
    move_retry_ms,
    now_ms,
)
from ._errors import (
    ConnectionLost,
    DlockError,
    HeldByOwner,
    LockLost,
    LockTimeout,
    Moved,
    Unavailable,
)
from ._types import Holders, LocksPage, LostReason, Status, WatchEvent, lost_why
from ._wire import Seconds

CLOCK_STEP = 0.25  # s: the longest sleep (a suspend is noticed this late)
READ_SIZE = 65536
# close(): how long the UNLOCKs of the leases still held may take (ms; at
# most request_timeout); a server that does not answer by then is left
# to end them by their TTL
CLOSE_RELEASE_MS = 1000.0
# errno values of a connect that nothing listens to: refused at once
REFUSED = (errno.ECONNREFUSED, errno.ENOENT)


class Lease(LeaseView):
    """One hold of a lock, as ``Client.lock()`` returns it.

    ``lost`` is a threading.Event set when the lease is lost; ``with`` a
    lease releases it at the end of the block, and raises LockLost if it
    was lost meanwhile (the block may have run unprotected). A loss is
    also logged at once (logger ``"dlockd"``, WARNING). Python cannot stop
    a thread from outside: code that must not go on unprotected checks
    ``lease.valid`` (or ``lease.lost.is_set()``) between steps, waits on
    ``lease.lost``, or passes ``on_lost=`` to ``lock()``.

    Of a partitioned service, a lease survives a ``PARTITION MOVE`` of its
    name's slot: the server carries it to the receiving partition, same
    token, and the client follows -- the renewal, refresh, proclaim,
    check or release answered ``MOVED`` moves the lease to that
    partition's client, which sends it again there and renews the lease
    from then on. Meanwhile a call may take a little longer (the slot is
    unavailable for a few milliseconds: renewals retry as for any
    unavailable server). The lease is lost only as always: its deadline
    passed without a renewal, or the server no longer has it.
    """

    def __init__(self, client: Client, ls: LeaseState) -> None:
        self._client = client  # the client that has it (a partition's, re-homed on a move)
        self._ls = ls
        self.lost = threading.Event()

    def _follow(self, call: Callable[[Client], Any]) -> Any:
        """call(client) on the client that has the lease now; a MOVED
        answer (the lease's slot went to another partition, the lease
        with it) moves the lease to that partition's client and calls
        again there, at most MOVED_MAX times (then Moved). While the slot
        is on its way (UNAVAILABLE, or a partition behind the map), the
        call is made again soon, within STALE_MAX_MS (then as answered)."""
        moves = 0
        since = 0.0
        while True:
            c = self._client
            try:
                return call(c)
            except Unavailable as e:
                home = c._home()
                if home is None or home._router is None and not isinstance(e, Moved):
                    raise
                if isinstance(e, Moved):
                    moves += 1
                    if moves > _route.MOVED_MAX:
                        raise _route.too_many(self.name, e) from None
                    if home._rehome(self._ls, c, e) is not c:
                        continue
                    moves -= 1  # not moved: its partition is behind the map
                elif not _route.in_move(e):
                    raise
                since = since or now_ms()
                if now_ms() - since >= _route.STALE_MAX_MS:
                    raise
                time.sleep(_route.STALE_PAUSE_MS / 1000.0)

    def check(self) -> float:
        """Ask the server whether this token still holds the lock: the
        seconds it has left there. LockLost if it does not."""
        return float(self._follow(
            lambda c: c._call(c._core.simple_request("CHECK", self.name, self.token))
        ))  # fmt: skip

    def refresh(self, ttl: Seconds | None = None) -> float:
        """Extend the lease now, to ``ttl`` seconds (default: its TTL); a
        shorter TTL shortens it. Returns the TTL granted. LockLost if the
        lease is gone."""
        ttl_ms = float(_api.wire.ms_of(ttl, "ttl")) if ttl is not None else None

        def once(c: Client) -> float:
            with c._mu:
                self._usable_lease()
                q = c._core.refresh_request(self._ls, ttl_ms, now_ms())
            return float(c._call(q))

        return float(self._follow(once))

    def _usable_lease(self) -> None:
        """LockLost for a lease lost or released."""
        if self._ls.lost is not None or self._ls.released:
            why = lost_why(self._ls.lost, self._ls.broken_by) if self._ls.lost else ""
            raise LockLost(
                f"the lease of {self.name!r} is " + (f"lost: {why}" if why else "released")
            )

    def proclaim(self, value: str) -> None:
        """Give the lease a new value (an elected leader's new address):
        ``REFRESH ... value=``, which refreshes the lease for its TTL too.
        Whoever watches the lock is told (a ``value`` event), and
        ``status()`` shows it. The value is sent as a text value (see
        ``lock(value=)``). ValueError for an empty value (nothing is
        sent; resigning is ``release()``); LockLost if the lease is gone
        -- a leader that is no longer one."""
        v = _api.value_arg(value)

        def once(c: Client) -> None:
            with c._mu:
                self._usable_lease()
                q = c._core.proclaim_request(self._ls, v, now_ms())
            c._call(q)

        self._follow(once)

    def extend(self, additional_time: Seconds, replace_ttl: bool = False) -> float:
        """redis-py's ``extend``: refresh the lease now so that
        ``additional_time`` more seconds remain than it has left
        (``replace_ttl``: so that exactly ``additional_time`` remain). The
        new length is the TTL renewals ask for from then on. Returns the
        TTL granted; LockLost if the lease is gone."""
        add = _api.wire.seconds_of(additional_time, "additional_time")
        return self.refresh(add if replace_ttl else self.remaining() + add)

    def locked(self) -> bool:
        """redis-py's ``locked()``: whether anyone holds the lock now (the
        server says); whether this lease does is ``valid``."""
        c = self._client
        return (c._home() or c).status(self.name).held

    def release(self) -> None:
        """Give the hold back. Cancellation-safe: once sent, the UNLOCK is
        sent again after a reconnect until the server answers it, even if
        this call gives up (request_timeout, KeyboardInterrupt). Raises
        NotHolder if the server no longer had the lease (it expired or was
        broken; a lost lease is released too, in case the server still
        has it). A lease not owned by this process (after fork) is left
        alone. An UNLOCK answered MOVED (the lease's slot went to another
        partition) is sent again there (see the class)."""
        try:
            self._follow(self._release_once)
        except DlockError as e:
            if e.code == "NOT_HOLDER":
                with self._client._mu:
                    if self._ls.lost is None:
                        self._ls.lost = _api.LostReason.REJECTED
                        self.lost.set()
                raise
            if isinstance(e, LockTimeout):
                return  # not answered in time: it is sent again until it is
            raise

    def _release_once(self, c: Client) -> None:
        """The UNLOCK on client c. One answered MOVED leaves the lease
        held (and renewed), to follow its slot (_follow)."""
        with c._mu:
            q = c._core.release_request(self._ls, now_ms())
            if q is None:
                return
        c._call(q, finish=lambda: c._core.release_over(self._ls, q))

    def __enter__(self) -> Lease:
        return self

    def __exit__(self, et: Any, ev: Any, tb: Any) -> None:
        if not self._ls.owned:
            return
        try:
            self.release()
        except LockLost:
            pass
        except DlockError:
            if et is None and self._ls.lost is None:
                raise
        if et is None and self._ls.lost is not None:
            raise _api.lost_error(self._ls)


class Leases(LeasesView):
    """The leases of a multi-lock, as ``Client.lock_all()`` returns them:
    a sequence of :class:`Lease` in the byte order of the names (also
    ``leases[name]``). Each is an ordinary lease -- its own token,
    renewed by the client, lost and released on its own. ``release()``
    gives them all back; ``with`` the leases releases them all at the
    end of the block, and raises LockLost if one was lost meanwhile."""

    def __init__(self, leases: list[Lease]) -> None:
        self._leases = leases

    @property
    def lost(self) -> list[threading.Event]:
        """Each lease's ``lost`` event, in the order of the names."""
        return [lease.lost for lease in self._leases]

    def release(self) -> None:
        """Release every lease (an UNLOCK each, in the order of the
        names), all of them even if one fails; then raises the first
        error (NotHolder: the server no longer had that lease)."""
        first: DlockError | None = None
        for lease in self._leases:
            try:
                lease.release()
            except DlockError as e:
                first = first or e
        if first is not None:
            raise first

    def __enter__(self) -> Leases:
        return self

    def __exit__(self, et: Any, ev: Any, tb: Any) -> None:
        try:
            self.release()
        except LockLost:
            pass
        except DlockError:
            if et is None and self.first_lost() is None:
                raise
        lost = self.first_lost()
        if et is None and lost is not None and lost._ls.owned:
            raise _api.lost_error(lost._ls)


class RWLock:
    """A read/write lock: ``read()`` takes it shared, ``write()``
    exclusive. Strict FIFO across modes at the server."""

    def __init__(self, client: Client, name: str) -> None:
        self._c = client
        self.name = _api.wire.check_name(name)

    def read(self, ttl: Seconds | None = None, wait: Seconds | None = None, **kw: Any) -> Lease:
        return self._c.lock(self.name, ttl, wait, mode="shared", **kw)

    def write(self, ttl: Seconds | None = None, wait: Seconds | None = None, **kw: Any) -> Lease:
        return self._c.lock(self.name, ttl, wait, **kw)


class Semaphore:
    """A semaphore of ``n`` permits: each ``acquire()`` is one lease of its
    own (token, TTL, renewal)."""

    def __init__(self, client: Client, name: str, n: int) -> None:
        self._c = client
        self.name = _api.wire.check_name(name)
        self.n = n

    def acquire(self, ttl: Seconds | None = None, wait: Seconds | None = None, **kw: Any) -> Lease:
        return self._c.lock(self.name, ttl, wait, limit=self.n, **kw)


class Watch:
    """What ``Client.watch()`` returns: iterate it for the events
    (``for ev in c.watch("jobs/*")``: blocks for each, ends when the
    watch or the client is closed; leaving the loop closes the watch), or
    take them one at a time with ``get(timeout)``. ``close()`` (or the
    end of a ``with`` block) stops watching."""

    def __init__(self, client: Client, w: WatchState) -> None:
        self._c = client
        self._w = w

    @property
    def patterns(self) -> list[str]:
        """What is watched (a pattern the server refused after a
        reconnect is no longer)."""
        return list(self._w.patterns)

    @property
    def closed(self) -> bool:
        """True once the watch ended (closed, the client closed)."""
        return self._w.closed

    def get(self, timeout: Seconds | None = None) -> WatchEvent | None:
        """The next event, waiting up to ``timeout`` seconds (None: until
        one comes); None when the time ran out, or once the watch ended
        and its last events were taken."""
        c, w = self._c, self._w
        t = None if timeout is None else _api.wire.seconds_of(timeout, "timeout")
        end = NEVER if t is None else now_ms() + t * 1000.0
        while True:
            with c._mu:
                ev = c._core.watch_take(w)
                if ev is not None or w.closed:
                    return ev
                w.waker.clear()
            left = end - now_ms()
            if left <= 0:
                return None
            w.waker.wait(min(left / 1000.0, CLOCK_STEP))

    def __iter__(self) -> Iterator[WatchEvent]:
        try:
            while True:
                ev = self.get()
                if ev is None:
                    return
                yield ev
        finally:
            self.close()

    def close(self) -> None:
        """Stop watching (UNWATCH what no other watch of the client
        watches); the iteration ends."""
        c = self._c
        with c._mu:
            if not self._w.closed and not c._core.forked:
                c._core.watch_close(self._w)
                c._flush()
            self._w.closed = True
        self._w.waker.set()

    def __enter__(self) -> Watch:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<Watch {' '.join(self._w.patterns)}{' closed' if self._w.closed else ''}>"


class _Watches(Watch):
    """A watch of a partitioned service over several daemons: one Watch
    on each (the prefixes' on the first connection, each name's at its
    partition), whose events are read as one stream -- in order per
    daemon, in no order across them. Ends when all of them have."""

    def __init__(self, subs: list[Watch]) -> None:
        self._subs = subs
        self._next = 0
        self._waker = threading.Event()
        for sub in subs:  # each tells this one of its events
            with sub._c._mu:
                sub._w.waker = self._waker

    @property
    def patterns(self) -> list[str]:
        return [p for sub in self._subs for p in sub.patterns]

    @property
    def closed(self) -> bool:
        return all(sub.closed for sub in self._subs)

    def get(self, timeout: Seconds | None = None) -> WatchEvent | None:
        t = None if timeout is None else _api.wire.seconds_of(timeout, "timeout")
        end = NEVER if t is None else now_ms() + t * 1000.0
        n = len(self._subs)
        while True:
            self._waker.clear()
            ended = 0
            for k in range(n):
                sub = self._subs[(self._next + k) % n]
                with sub._c._mu:
                    ev = sub._c._core.watch_take(sub._w)
                    ended += sub._w.closed
                if ev is not None:
                    self._next = (self._next + k + 1) % n
                    return ev
            if ended == n:
                return None
            left = end - now_ms()
            if left <= 0:
                return None
            self._waker.wait(min(left / 1000.0, CLOCK_STEP))

    def close(self) -> None:
        for sub in self._subs:
            sub.close()
        self._waker.set()

    def __repr__(self) -> str:
        return f"<Watch {' '.join(self.patterns)}{' closed' if self.closed else ''}>"


class Client:
    """A connection to dlockd (or to the first of a list of daemons that
    is active) and the thread that reads it, renews the leases and
    reconnects. Thread-safe: share one client between threads; within a
    client the holds of one name are taken one at a time.

    ``Client("db1:7420,db2:7420", user=..., secret=..., tls=...)``; with no
    servers, the DLOCK_* environment as the ``dlock`` command reads it.
    Keyword arguments: host, port, socket (a unix socket path), password
    (the server's one password), user and secret (a user of its users
    file), owner and owner_key, tls (True, or an ssl.SSLContext), tls_ca,
    tls_cert, tls_key, tls_server_name, connect_timeout (2 s; a server
    that refuses the connection is given up at once: when every one of
    the list does, twice, Unavailable comes in milliseconds),
    request_timeout (5 s: a reply later is LockTimeout, and with more than
    one server the server is left for the next of the list -- a stopped
    or hung active fails over as a dead one), reconnect (True), renew
    (True), max_hold
    (None: renew for ever), lost_guard (max(TTL/10, 20 ms)), on_lost,
    on_at_risk and on_contended (callbacks, on the client's thread:
    ``f(lease, reason)``, ``f(lease)`` and ``f(lease, waiters)`` -- the
    last when the server says that ``waiters`` requests wait for a lease
    acquired with ``notify_waiters=True``), describe (True or "name":
    tell the server this process's host, pid and program name, which it
    shows with the client's leases to whoever may read the locks; "full":
    the whole command line instead of the name -- its arguments may hold
    a secret; False: nothing),
    desc_host, desc_pid, desc_cmd
    (instead of what is found). Durations are seconds or
    ``datetime.timedelta``. Raises Unavailable, Denied or ssl.SSLError
    when no server can be used within connect_timeout.

    ``close()`` (and the end of ``with Client(...)``) gives back the
    leases still held; ``close(release=False)`` leaves them to end by
    their TTL.

    A partitioned service (PROTOCOL.md, "Partitions"): the client reads
    the partition map (``MAP``) once, at its first connect, from the
    servers it is given (any daemon of the service will do). A daemon
    that serves every name (epoch 0, or one older than partitions) leaves
    the client as it always was -- until a call about a name is answered
    ``MOVED`` (a partitioned daemon that had not read its map yet says
    epoch 0 too): the client then reads the map again and, if it now
    says an epoch above 0, routes from then on, the call sent on as any
    redirect. Otherwise the client routes: each call
    about a name (lock, lock_all -- whose names must share a partition:
    put them under one ``{tag}`` --, check, status, holders, break_lease,
    watch of exact names) goes to a client of its own for the name's
    partition, made on first use with the same options and owner, whose
    servers are that partition's daemons in the map; its leases stay
    with it (refresh, release, renewal, fail-over: each partition is an
    ordinary service) until their name's slot is moved to another
    partition (``PARTITION MOVE``): the server carries the locks along,
    each lease keeping its token, and the lease follows on the first
    request about it answered ``MOVED`` (a renewal, a refresh, the
    release): it goes to the new partition's client, which renews it from
    then on. A LOCK that waits when its name moves is answered ``MOVED``
    and sent on to the new partition with the wait it has left and the
    same request id, where its place in the queue waits for it. A
    ``MOVED`` answer is followed (the map read again when it is newer) up
    to three times, then Moved. The calls without a
    name (ping, stats, locks, watch of a prefix) go to the first
    connection as before: they show that daemon's partition only.
    ``partitioned`` and ``map_epoch`` say which it is.
    """

    def __init__(
        self,
        servers: str | list[str] | None = None,
        *,
        _leg: _options.Options | None = None,
        **kw: Any,
    ) -> None:
        # _leg: the options of a partition's client (a router's leg,
        # _route.leg_options): no MAP of its own
        self._o = _leg if _leg is not None else _options.build(servers, kw)
        self._is_leg = _leg is not None
        self._router: _route.Routes | None = None
        self._legs: dict[str, Client] = {}  # partition id -> its client
        self._making: dict[str, threading.Lock] = {}  # one leg made at a time
        self._rmu = threading.Lock()  # guards the router, _legs, _rclosed
        self._rclosed = False
        # a leg's router (set by _leg_of); a router's lock over the moves
        # of leases between its clients (_rehome)
        self._parent: Client | None = None
        self._moving = threading.Lock()
        # leases whose renewal was answered MOVED, for the mover thread
        # (_mover_run, one at a time, started on demand); under _rmu
        self._to_move: collections.deque[tuple[Client, LeaseState, Moved]] = (
            collections.deque()
        )
        self._mover: threading.Thread | None = None
        self._o.addresses = _options.resolve(self._o.addresses)
        if not self._o.addresses:
            raise Unavailable("no server address resolves")
        self._mu = threading.Lock()
        self._core = Core(self._o, self)
        self._callbacks: collections.deque[tuple[Callable[..., Any], tuple[Any, ...]]] = (
            collections.deque()
        )
        self._ready = threading.Event()  # the first HELLO's outcome is known
        self._sock: socket.socket | None = None
        self._hs = False  # a TLS handshake is in progress
        self._connect_deadline = NEVER
        self._tls_error: Exception | None = None
        self._tls_fails = 0
        self._pid = os.getpid()
        self._sel = selectors.DefaultSelector()
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_r, False)
        os.set_blocking(self._wake_w, False)
        self._sel.register(self._wake_r, selectors.EVENT_READ)
        _api.register(self)
        self._thread = threading.Thread(target=self._run, name="dlockd-client", daemon=True)
        self._thread.start()
        deadline = now_ms() + self._o.connect_timeout_ms
        while not self._ready.is_set():
            left = deadline - now_ms()
            if left <= 0:
                break
            self._ready.wait(min(left / 1000.0, CLOCK_STEP))
        with self._mu:
            ok, fatal = self._core.ready, self._core.fatal
            why = self._core.last_error
        if not ok:
            self.close()
            if isinstance(self._tls_error, ssl.SSLError):
                raise self._tls_error
            raise fatal or Unavailable(
                "cannot connect to dlockd" + (f": {why}" if why else "")
            )
        if _leg is None:
            self._discover()

    # ---- the public calls ----------------------------------------------

    @property
    def partitioned(self) -> bool:
        """True when the service is partitioned (its ``MAP`` said an epoch
        above 0 at the first connect, or after a ``MOVED``): the calls
        about names are routed to their partitions' daemons."""
        return self._router is not None

    @property
    def map_epoch(self) -> int:
        """The epoch of the newest partition map the client read (0: not
        partitioned)."""
        return self._router.epoch if self._router is not None else 0

    @property
    def owner(self) -> str:
        """The owner id (chosen, or a random ``py-...`` one)."""
        return self._core.owner

    @property
    def owner_key(self) -> str:
        """The key that proves the owner id (given, or the server's);
        a secret: another process given ``owner=`` and this key acts as
        the same owner."""
        return self._core.key

    @property
    def cluster(self) -> str:
        """The cluster id the client holds to (the ``cluster`` option, or
        the first a server named in ``HELLO``); "" until one did."""
        return self._core.cluster

    def lock(
        self,
        name: str,
        ttl: Seconds | None = None,
        wait: Seconds | None = None,
        *,
        mode: str = "exclusive",
        limit: int | None = None,
        max_hold: Seconds | None = _UNSET,
        renew: bool = _UNSET,
        on_lost: Callable[..., Any] | None = None,
        on_at_risk: Callable[..., Any] | None = None,
        warn: Seconds | None = None,
        delay: Seconds | None = None,
        notify_waiters: bool = False,
        value: str | None = None,
        blocking: bool = _UNSET,
        blocking_timeout: Seconds | None = _UNSET,
        timeout: Any = _UNSET,
    ) -> Lease:
        """Acquire `name` for a lease of `ttl` seconds (None: the server's
        default), waiting up to `wait` seconds (None: for ever; 0: try
        once). ``mode="shared"`` takes it with other readers, ``limit=n``
        as one of n permits. The lease is renewed every TTL/3 (``renew``)
        until released, lost or ``max_hold`` seconds after it was granted.
        ``warn`` (seconds, below the TTL): the server sends ``* EXPIRING``
        when that much of the lease remains unrenewed, and on_at_risk is
        called. ``delay`` (seconds, at most 60): the lock's lock-delay --
        after a lease of it ends without a release (it expired or was
        broken), the server grants it to nobody for that long, waiters
        keeping their place; a release frees it at once. Set by the request
        that finds the lock free, raised by later ones; ``status()`` shows
        it (``delay``, ``delay_left``). ``notify_waiters``: be told that
        others wait (``LOCK ... notify=waiters``) -- when the lease is
        granted while some wait, and when a request queues behind it (the
        first time, when the queue has doubled since, or a second after
        the last time: about log2(n) times for a queue of n, once a second
        at most); the client's ``on_contended(lease, waiters)`` is called
        and ``lease.waiters`` says the last count. Nothing is said when
        the queue shrinks. For a holder that can let go early (a cache
        written back, a batch stopped between items). ``value``: what the
        lease says to whoever looks at the lock (``status().value``,
        ``holders()``, watch events) -- an election is held so:
        candidates lock its name with their value (the address followers
        should use) and wait as long as they stand; the holder leads,
        its token is the term, ``lease.proclaim(v)`` gives a new value,
        ``release()`` resigns. Sent as a text value: printable ASCII, a
        space or '%' escaped (``%20``, ``%25``), any other character as
        '?', cut at 128 bytes as sent (never inside an escape); None or
        "": none. A reentry with a value replaces the lease's, one
        without keeps it; the lease keeps it for a RECLAIM. Every acquire sends
        a request id of its own (``req=``, to a server of 0.4.0 or later),
        the same when its LOCK is sent again after a drop or a fail-over:
        a grant whose reply was lost is then given back to it, not taken
        for another process's hold. Raises LockTimeout (Deadlock when
        waiting would close a cycle of owners; HeldByOwner, at once, if
        another process of this owner holds the lock), LimitMismatch,
        UpgradeDeadlock, Denied, Unavailable, ConnectionLost.

        redis-py's ``blocking=False`` is ``wait=0`` and
        ``blocking_timeout=t`` is ``wait=t`` (either raises LockTimeout
        rather than returning False); its ``timeout=`` (the lease's
        length) is ``ttl=`` here, and refused with a TypeError saying so.
        Durations are seconds or ``datetime.timedelta``."""
        w = _api.wait_of(wait, blocking, blocking_timeout, timeout)
        a = lock_args(
            name, ttl, w, mode, limit, max_hold, renew, on_lost, on_at_risk, warn, delay,
            notify_waiters, value,
        )
        at = _route.Attempt(NEVER if a.wait_ms < 0 else now_ms() + a.wait_ms)
        first: Moved | None = None
        if self._router is None:
            try:
                return self._lock_here(a, at)
            except Moved as e:
                if not self._promote():
                    raise
                first = e
        def on(leg: Client) -> Lease:
            self._gather([name], leg)
            return leg._lock_here(a, at)

        return self._routed(name, on, first)

    def _lock_here(self, a: _api.LockArgs, at: _route.Attempt | None = None) -> Lease:
        """lock() on this client's own connection. at: the acquire as
        sent before (a redirect sends it again with the wait left and
        the same request id)."""
        start = now_ms()
        if at is None:
            at = _route.Attempt(NEVER if a.wait_ms < 0 else start + a.wait_ms)
        wait_end = at.wait_end
        if at.sent and a.wait_ms > 0 and wait_end <= start:
            raise _route.no_wait_left(a.name)
        at.sent += 1
        with self._mu:
            self._usable()
            t = self._core.take_turn(a.name)
            if not t.ready:
                t.waker = threading.Event()
        if not t.ready:
            self._wait_turn(t, a.wait_ms, wait_end)
        granted = False
        try:
            with self._mu:
                now = now_ms()
                wait_ms = a.wait_ms if a.wait_ms <= 0 else max(wait_end - now, 1.0)
                q = self._core.lock_request(a.name, a.ttl_ms, wait_ms, a.shared, a.limit, now)
                q.reqid = at.reqid or q.reqid
                at.reqid = q.reqid
                q.opts = dict(a.opts, ticket=t)
            try:
                ls: LeaseState = self._call(q)
            finally:
                at.reqid = q.reqid  # the core may have taken a new one
            granted = True
        finally:
            if not granted:
                with self._mu:
                    self._core.give_turn(t)  # the lease keeps it otherwise
        lease = Lease(self, ls)
        with self._mu:
            ls.handle = lease
            if ls.lost is not None:  # lost before we had a handle
                self.lost(ls)
            elif ls.contended_due:  # others wait, said before we had one
                self.contended(ls)
                self._wake()  # the thread runs the callback
        # (the thread that read the grant set its timers after it)
        return lease

    def lock_all(
        self,
        names: list[str],
        ttl: Seconds | None = None,
        wait: Seconds | None = None,
        *,
        max_hold: Seconds | None = _UNSET,
        renew: bool = _UNSET,
        on_lost: Callable[..., Any] | None = None,
        on_at_risk: Callable[..., Any] | None = None,
    ) -> Leases:
        """Acquire several locks at once, all or none: one request names
        them all (``LOCK a b c``, dlockd 0.4.0), each taken exclusive for
        a lease of `ttl` seconds, waiting up to `wait` seconds (None: for
        ever; 0: try once) for the last of them. Returns :class:`Leases`,
        one ordinary :class:`Lease` per name in byte order of the names
        -- each renewed, lost (``on_lost``) and released on its own;
        ``leases.release()`` or the end of ``with c.lock_all(...) as
        leases`` gives them all back.

        The server takes the names in byte order, each in its own FIFO
        queue, holding those it has while it waits for the next (so two
        multi-locks never wait for each other in a cycle); the caller
        hears only the end: all granted, or none held (those it took are
        given back when it fails, times out or is given up). 1 to 64
        distinct names (one is ``lock(name)``), the request line within
        1024 bytes (ValueError otherwise, nothing sent). A multi-lock
        takes new leases only: a name this client (or another process of
        its owner) holds already raises HeldByOwner (code
        ``ALREADY_HELD``) at once, whatever the wait. A server takes one
        multi-lock at a time per connection: those of other threads of
        this client wait their turn here, within their wait. The acquire
        sends a request id of its own (``req=``, as ``lock()``), so that a
        multi-lock sent again after a drop or a fail-over gets back the
        leases it was granted.

        Raises LockTimeout (``code`` ``BUSY`` for a try that found one
        held; ``EXPIRED`` when a lock it had taken ended while it waited
        for the others), Deadlock (waiting for one of them would close a
        cycle of owners), HeldByOwner, LimitMismatch (one is a
        semaphore), LimitReached, Denied, Unavailable, ConnectionLost."""
        a = lock_all_args(names, ttl, wait, max_hold, renew, on_lost, on_at_risk)
        at = _route.Attempt(NEVER if a.wait_ms < 0 else now_ms() + a.wait_ms)
        first: Moved | None = None
        if self._router is None:
            try:
                return self._lock_all_any(a, at)
            except Moved as e:
                if not self._promote():
                    raise
                first = e
        # the partition of the first name (in byte order, as the server
        # names a multi-lock); names of several partitions are refused
        # by the server (BAD_ARG)
        def on(leg: Client) -> Leases:
            self._gather(a.names, leg)
            return leg._lock_all_any(a, at)

        return self._routed(a.names[0], on, first)

    def _lock_all_any(self, a: _api.LockAllArgs, at: _route.Attempt) -> Leases:
        """lock_all() on this client's own connection: one name is lock()."""
        if len(a.names) == 1:
            one = _api.LockArgs(a.names[0], a.ttl_ms, a.wait_ms, False, 0, a.opts)
            return Leases([self._lock_here(one, at)])
        return self._lock_all_here(a, at)

    def _lock_all_here(self, a: _api.LockAllArgs, at: _route.Attempt) -> Leases:
        """lock_all() of several names on this client's own connection
        (at: as _lock_here's)."""
        start = now_ms()
        wait_end = at.wait_end
        if at.sent and a.wait_ms > 0 and wait_end <= start:
            raise _route.no_wait_left(a.names[0])
        at.sent += 1
        waker = threading.Event()
        with self._mu:
            self._usable()
            ts = [self._core.take_turn(n) for n in a.names]
            for t in ts:
                t.waker = waker
        granted = False
        try:
            self._wait_turns(ts, waker, a.wait_ms, wait_end)
            with self._mu:
                now = now_ms()
                wait_ms = a.wait_ms if a.wait_ms <= 0 else max(wait_end - now, 1.0)
                q = self._core.lockall_request(a.names, a.ttl_ms, wait_ms, now)
                q.reqid = at.reqid or q.reqid
                at.reqid = q.reqid
                q.opts = dict(a.opts, tickets={t.name: t for t in ts})
            try:
                lss: list[LeaseState] = self._call(q)
            finally:
                at.reqid = q.reqid
            granted = True
        finally:
            if not granted:
                with self._mu:
                    for t in ts:
                        self._core.give_turn(t)  # the leases keep them otherwise
        leases = [Lease(self, ls) for ls in lss]
        with self._mu:
            for ls, lease in zip(lss, leases):
                ls.handle = lease
                if ls.lost is not None:  # lost before we had a handle
                    self.lost(ls)
        return Leases(leases)

    def rwlock(self, name: str) -> RWLock:
        """A read/write lock: ``.read()`` shared, ``.write()`` exclusive."""
        return RWLock(self, name)

    def semaphore(self, name: str, n: int) -> Semaphore:
        """A semaphore of n permits: ``.acquire()`` takes one."""
        return Semaphore(self, name, n)

    def check(self, name: str, token: int) -> float:
        """Whether `token` holds `name` now (any owner may ask): the
        seconds its lease has left at the server; LockLost if it does not
        (``err.text`` names the current token)."""
        _api.wire.check_name(name)
        return self._by_name(
            name,
            lambda: float(self._call(self._core.simple_request("CHECK", name, int(token)))),
            lambda leg: leg.check(name, token),
        )

    def status(self, name: str) -> Status:
        """The lock as the server sees it (its first holder)."""
        _api.wire.check_name(name)
        return self._by_name(
            name,
            lambda: self._call(self._core.simple_request("STATUS", name)),
            lambda leg: leg.status(name),
        )

    def holders(self, name: str) -> Holders:
        """Every holder and waiter of `name`."""
        _api.wire.check_name(name)
        return self._by_name(
            name,
            lambda: self._call(self._core.simple_request("HOLDERS", name)),
            lambda leg: leg.holders(name),
        )

    def locks(
        self,
        prefix: str | None = None,
        *,
        after: str | None = None,
        limit: int | None = None,
        by_waiters: bool = False,
    ) -> LocksPage:
        """One page of the server's locks (see PROTOCOL.md, LOCKS); of a
        partitioned service, those of the first connection's partition."""
        e = _locks_extra(prefix, after, limit, by_waiters)
        return self._call(self._core.simple_request("LOCKS", **e))

    def stats(self) -> dict[str, str]:
        """The server's STATS (needs the admin right with a users file); of a
        partitioned service, the first connection's daemon's."""
        return self._call(self._core.simple_request("STATS"))

    def ping(self) -> None:
        self._call(self._core.simple_request("PING"))

    def break_lease(self, name: str, token: int, reason: str) -> None:
        """End another owner's lease (an operator's tool: its holder is
        told, the next waiter granted). `reason`: one word, audited.
        LockLost if `token` holds nothing."""
        _api.wire.check_name(name)
        _api.wire.check_word(reason, "reason", _api.wire.REASON_MAX)
        self._by_name(
            name,
            lambda: self._call(self._core.simple_request("BREAK", name, int(token), reason=reason)),
            lambda leg: leg.break_lease(name, token, reason),
        )

    def watch(self, *patterns: str) -> Watch:
        """Watch locks one does not hold: every change of the holders of
        a lock a pattern matches (a name, or a prefix followed by ``*``;
        ``"*"``: every lock), whoever made it, as :class:`WatchEvent`
        values. ``for ev in c.watch("jobs/*"):`` blocks for each event and
        ends when the client closes, the watch is closed, or the loop
        ends (``break``: the watch is closed with it). The watch is
        answered before this returns: Denied (no read right),
        LimitReached (256 watches a connection), Unavailable. After a
        reconnect the client watches again (a ``resumed`` event per
        pattern; ``refused`` if the server no longer lets it).

        Of a partitioned service, a name is watched at its partition's
        daemon and a prefix at the first connection's (it sees that
        partition's locks only); a watch of several of them is one
        watch on each, their events read as one."""
        if not patterns:
            raise ValueError("watch: give at least one pattern")
        for p in patterns:
            _api.wire.check_name(p, "pattern")
        first: Moved | None = None
        if self._router is None:
            try:
                return self._watch_here(list(patterns))
            except Moved as e:
                # a name of another partition: the service is partitioned
                if not self._promote():
                    raise
                first = e
        if self._router is not None:
            prefixes, names = _route.watch_split(dict.fromkeys(patterns))
            if names and not prefixes and len(names) == 1:
                return self._routed(names[0], lambda leg: leg.watch(names[0]), first)
            if names:
                subs: list[Watch] = []
                try:
                    if prefixes:
                        subs.append(self._watch_here(prefixes))
                    for n in names:
                        subs.append(self._routed(n, lambda leg: leg.watch(n)))
                except BaseException:
                    for w in subs:
                        w.close()
                    raise
                return _Watches(subs)
        return self._watch_here(list(patterns))

    def _watch_here(self, patterns: list[str]) -> Watch:
        """watch() on this client's own connection."""
        with self._mu:
            self._usable()
            w = self._core.watch_open(list(dict.fromkeys(patterns)))
            w.waker = threading.Event()
        watch = Watch(self, w)
        try:
            for p in w.patterns:
                with self._mu:
                    q = self._core.watch_request(p, now_ms())
                self._call(q)
        except BaseException:
            watch.close()
            raise
        with self._mu:
            self._core.watch_started(w)
        return watch

    def close(self, release: bool = True) -> None:
        """Give back the leases still held (each UNLOCK sent at once and
        awaited for at most a second, never longer than request_timeout:
        a server that is down or slow is left to end them by their TTL),
        end the watches, stop the thread and close the connection.
        ``release=False`` keeps the leases held until their TTL runs out
        (for a process that hands them over, or to test a crash). Either
        way a ``with`` block of a lease still open then ends with
        LockLost (reason ``CLOSED``). A partitioned service's client
        closes the client of each partition so; a lease whose UNLOCK is
        answered MOVED (its slot moved meanwhile) is released at its new
        partition first, as ``lease.release()`` does."""
        if os.getpid() != self._pid:
            return
        sent: list[tuple[Client, list[Req]]] = []
        if release and not self._is_leg and self._router is not None:
            with self._rmu:
                clients = [*self._legs.values(), self]
            sent = [(c, c._send_unlocks()) for c in clients]
            for c, qs in sent:
                c._await_unlocks(qs)
            self._follow_unlocks(sent)
        with self._rmu:
            self._rclosed = True
            legs, self._legs = list(self._legs.values()), {}
        for leg in legs:
            qs = next((qs for c, qs in sent if c is leg), None)
            if qs is None:
                leg.close(release)
            else:
                leg._close_own(release, qs)
        self._close_own(release, next((qs for c, qs in sent if c is self), None))

    def _send_unlocks(self) -> list[Req]:
        """close(): the UNLOCK of every lease still held, sent now (a
        server down or slow is left to end them by their TTL)."""
        qs: list[Req] = []
        with self._mu:
            if self._core.closing:
                return qs
            if self._core.state == UP and self._core.session_ok:
                now = now_ms()
                for ls in list(self._core.leases):
                    if not ls.live() or not ls.owned:
                        continue
                    q = self._core.release_request(ls, now)
                    if q is None:
                        continue
                    q.waker = threading.Event()
                    q.deadline = now + min(CLOSE_RELEASE_MS, self._o.request_timeout_ms)
                    self._core.submit(q, now)
                    qs.append(q)
                self._flush()
        return qs

    def _await_unlocks(self, qs: list[Req]) -> None:
        """The answers of _send_unlocks, each awaited until its deadline."""
        if qs and self._thread is not threading.current_thread():
            for q in qs:
                while not q.done:
                    left = q.deadline - now_ms()
                    if left <= 0:
                        break
                    q.waker.wait(min(left / 1000.0, CLOCK_STEP))

    def _follow_unlocks(self, sent: list[tuple[Client, list[Req]]]) -> None:
        """close() of a router: the UNLOCKs answered MOVED (the lease's
        slot moved meanwhile) leave the lease held; it is released at its
        new partition (Lease.release follows it), within request_timeout."""
        for c, qs in sent:
            for q in list(qs):
                ls = q.lease
                if ls is None or not q.done or not isinstance(q.error, Moved):
                    continue
                qs.remove(q)
                with c._mu:
                    c._core.release_over(ls, q)
                if ls.handle is not None:
                    try:
                        ls.handle.release()
                    except DlockError:
                        pass  # left to end by its TTL
                    ls.handle.lost.set()  # as every lease at close

    def _close_own(self, release: bool, qs: list[Req] | None) -> None:
        """close() of this client's own connection; qs: the UNLOCKs sent
        already (_send_unlocks), else sent now if release."""
        if qs is None:
            qs = self._send_unlocks() if release else []
            self._await_unlocks(qs)
        with self._mu:
            if self._core.closing:
                return
            for q in qs:
                if not q.done:
                    self._core.abandon(q)
            self._core.close()
            for q in qs:
                if q.lease is not None:
                    if q.done and q.error is None:
                        self._core.released(q.lease)
                    q.lease.unlocking = False
            for q in qs:
                if q.lease is not None and q.lease.handle is not None:
                    q.lease.handle.lost.set()
            for ls in self._core.leases:
                if ls.handle is not None:
                    ls.handle.lost.set()
        self._wake()
        if self._thread is not threading.current_thread():
            self._thread.join()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # ---- routing (a partitioned service) ----------------------------------

    def _discover(self) -> None:
        """The first connect is made: read the partition map once. Epoch
        0 (or a daemon that does not know MAP) leaves the client as it
        always was; otherwise it routes."""
        try:
            m = _route.map_reply(self._read_map())
        except DlockError as e:
            if e.code == "UNKNOWN_COMMAND":
                return  # a daemon older than partitions: it serves every name
            self.close(release=False)
            if isinstance(e, LockTimeout):
                raise Unavailable(f"no answer to MAP: {e}") from None
            raise
        if m is not None:
            self._router = _route.Routes(m, now_ms())

    def _read_map(self) -> Any:
        """MAP on this client's connection: (epoch, lines)."""
        return self._call(self._core.simple_request("MAP"))

    def _promote(self) -> bool:
        """A call of the unpartitioned client was answered MOVED: the
        daemon the first MAP found unpartitioned is a partitioned one
        that had not read its map yet (it says ``OK MAP 0 0`` then), or
        was not answered. Read MAP again: an epoch above 0 makes the
        client a router from now on. True if it routes (the call is then
        sent on through the router); False for a leg (its router follows
        the MOVED) or while the daemon still says no map."""
        if self._is_leg:
            return False
        if self._router is not None:
            return True  # made by another call meanwhile
        try:
            m = _route.map_reply(self._read_map())
        except DlockError:
            return False
        if m is None:
            return False
        with self._rmu:
            if self._rclosed:
                return False
            if self._router is None:
                self._router = _route.Routes(m, now_ms())
        return True

    def _by_name(self, name: str, here: Callable[[], Any], call: Callable[[Client], Any]) -> Any:
        """A call about `name`: here() on this client's connection while
        it is unpartitioned (a MOVED answer may make it a router:
        _promote), else call(leg) on the client of the name's partition."""
        first: Moved | None = None
        if self._router is None:
            try:
                return here()
            except Moved as e:
                if not self._promote():
                    raise
                first = e
        return self._routed(name, call, first)

    def _reread(self, via: Client) -> None:
        """Read the map through `via` (a leg, or this client's own
        connection) and keep it if it is newer; legs whose partition's
        addresses changed get the new list. A failure keeps the map."""
        rt = self._router
        if rt is None:
            return
        rt.read_at = now_ms()  # a failure too: at most once a second (_reread_for)
        try:
            m = _route.map_reply(via._read_map())
        except DlockError:
            return
        if m is None:
            return
        with self._rmu:
            changed = rt.adopt(m, now_ms())
            legs = [(self._legs[p], a) for p, a in changed.items() if p in self._legs]
        for leg, addrs in legs:
            leg._set_servers(addrs)

    def _set_servers(self, addrs: tuple[str, ...]) -> None:
        """A leg's partition has other daemons now: its next connection
        goes to them (the one up, if any, is kept while it lasts)."""
        try:
            new = _options.resolve(
                _options.parse_servers(",".join(addrs[: _options.SERVERS_MAX]))
            )
        except ValueError:
            return
        if not new:
            return
        with self._mu:
            core = self._core
            self._o.addresses = new
            core.naddrs = len(new)
            core.addr_i %= len(new)
            core.hint = core.failed_i = -1

    def _leg_of(self, pid: str, name: str) -> Client:
        """The client of partition pid, made on first use (its connect
        within connect_timeout: Unavailable otherwise, and the map is read
        again, at most once a second, in case it moved)."""
        rt = self._router
        assert rt is not None
        with self._rmu:
            if self._rclosed:
                raise ConnectionLost("the client is closed")
            leg = self._legs.get(pid)
            if leg is not None:
                return leg
            making = self._making.setdefault(pid, threading.Lock())
        with making:
            with self._rmu:
                leg = self._legs.get(pid)
                if leg is not None:
                    return leg
                addrs = rt.addrs_of(pid)
            if not addrs:
                addrs = self._reread_for(pid)
                if not addrs:
                    raise _route.no_address(name, pid)
            try:
                leg = self._new_leg(addrs)
            except Unavailable:
                again = self._reread_for(pid)
                if not again or again == addrs:
                    raise
                leg = self._new_leg(again)
            with self._rmu:
                if not self._rclosed:
                    self._legs[pid] = leg
                    return leg
            leg.close()
            raise ConnectionLost("the client is closed")

    def _new_leg(self, addrs: tuple[str, ...]) -> Client:
        o = _route.leg_options(self._o, addrs, self._core.owner, self._core.key)
        leg = Client(_leg=o)
        leg._parent = self
        return leg

    def _home(self) -> Client | None:
        """The client that routes this one's calls: a leg's router, or
        this client itself when it is not a leg (it may route, or come
        to: _promote)."""
        return self._parent if self._is_leg else self

    # ---- leases that follow their slot (PARTITION MOVE) -------------------

    def _rehome(self, ls: LeaseState, src: Client, e: Moved) -> Client:
        """Lease ls, of client src (a leg, or this client's own
        connection), was answered MOVED `e`: its slot went to another
        partition, the lease with it (same token). Move it to that
        partition's client (read the map first if e's is newer, or e does
        not say where; the leg made if need be): from now on its
        renewals and calls go there. Returns the client that has the
        lease (src if it did not move: nothing newer is known yet)."""
        if self._router is None and not self._promote():
            raise e
        rt = self._router
        assert rt is not None
        with self._moving:
            with src._mu:
                if ls.core is not src._core:  # moved (or released) meanwhile
                    h = ls.handle
                    return h._client if h is not None else src
            if e.epoch > rt.epoch or not e.partition:
                self._reread(src)  # the daemon that said it knows that map
            with self._rmu:
                tried = next((p for p, leg in self._legs.items() if leg is src), "")
                if _route.behind(rt, e, ls.name, tried):
                    return src  # it has not read the map that gives it the lease yet
                pid = rt.redirect(e, ls.name, tried)
            dst = self._leg_of(pid, ls.name)
            if dst is src:
                return src
            with src._mu:
                if not src._core.detach(ls):
                    h = ls.handle
                    return h._client if h is not None else src
                if ls.handle is not None:
                    ls.handle._client = dst
            with dst._mu:
                if dst._core.closing:
                    # the client closes meanwhile: the lease is as its others
                    if ls.lost is None and not ls.released:
                        ls.lost = LostReason.CLOSED
                    if ls.handle is not None:
                        ls.handle.lost.set()
                else:
                    dst._core.attach(ls, now_ms())
            dst._wake()  # its thread renews it now
            return dst

    def _gather(self, names: list[str], dst: Client) -> None:
        """Before an acquire of `names` on dst, the client of their
        partition: a lease of one of them that another client of this
        router has -- its slot moved, and no answer told that client yet
        -- moves to dst first (the map says where the server has it), so
        that the acquire waits its turn behind it there, as within one
        client (the server would grant it as a reentry)."""
        if self._router is None or dst._core.closing:
            return
        with self._rmu:
            others = [c for c in (self, *self._legs.values()) if c is not dst]
        # a glance without the locks (a dict's "in" is atomic): almost
        # always nothing, and no client's lock taken
        todo = [c for c in others if any(n in c._core.turns for n in names)]
        if not todo:
            return
        with self._moving:
            for c in todo:
                with c._mu:
                    mine = [ls for ls in c._core.leases if ls.name in names]
                    mine = [ls for ls in mine if c._core.detach(ls)]
                    for ls in mine:
                        if ls.handle is not None:
                            ls.handle._client = dst
                if mine:
                    with dst._mu:
                        for ls in mine:
                            if dst._core.closing:
                                if ls.lost is None:
                                    ls.lost = LostReason.CLOSED
                                if ls.handle is not None:
                                    ls.handle.lost.set()
                            else:
                                dst._core.attach(ls, now_ms())
                    dst._wake()

    def _rehome_bg(self, src: Client, ls: LeaseState, e: Moved) -> None:
        """A renewal of ls was answered MOVED (src's hook): _rehome on the
        mover thread (it reads the map, makes a leg: calls that the
        threads of the clients involved answer). One that fails leaves
        the lease where it was, renewed again soon (answered MOVED again,
        it is moved again); so does a partition behind the map."""
        behind = False
        try:
            behind = self._rehome(ls, src, e) is src
        except Exception:  # noqa: BLE001 -- any failure: renewed again where it is
            pass
        finally:
            with src._mu:
                if ls.moving and ls.core is src._core:
                    ls.moving = False
                    if behind:
                        ls.moves = max(ls.moves - 1, 0)  # not a move
                    ls.renew_at = now_ms() + move_retry_ms(ls.ttl)
            src._wake()

    def _reread_for(self, pid: str) -> tuple[str, ...]:
        """Partition pid's addresses after reading the map again through
        this client's connection, if the last read is a second old."""
        rt = self._router
        assert rt is not None
        if now_ms() - rt.read_at >= _route.MAP_REREAD_MS:
            self._reread(self)
        with self._rmu:
            return rt.addrs_of(pid)

    def _routed(self, name: str, call: Callable[[Client], Any], first: Moved | None = None) -> Any:
        """call(leg) on the client of the partition that serves `name`,
        following MOVED (at most MOVED_MAX redirects, then Moved). first:
        the MOVED this client's own connection answered the call while
        it was unpartitioned (_promote): the first redirect."""
        self._usable()
        rt = self._router
        assert rt is not None
        moves = 0
        if first is not None:
            moves = 1
            if first.epoch > rt.epoch:
                self._reread(self)  # the daemon that said it knows that map
            with self._rmu:
                pid = rt.redirect(first, name, "")
        else:
            pid = rt.target(name)
            if pid is None:
                self._reread_for("")
                pid = rt.target(name)
                if pid is None:
                    raise _route.no_partition(name, rt.map)
        since = 0.0
        while True:
            leg = self._leg_of(pid, name)
            try:
                return call(leg)
            except Moved as e:
                with self._rmu:
                    stale = _route.behind(rt, e, name, pid)
                if stale and self._pause_stale(since):
                    since = since or now_ms()
                    continue  # the same partition, again: it reads the map soon
                moves += 1
                if moves > _route.MOVED_MAX:
                    raise _route.too_many(name, e) from None
                if e.epoch > rt.epoch or not e.partition:
                    # the daemon that said it knows that map (a
                    # multi-lock's wait that ended MOVED does not say
                    # where: the map does)
                    self._reread(leg)
                with self._rmu:
                    pid = rt.redirect(e, name, pid)
            except Unavailable as e:
                if _route.in_move(e) and self._pause_stale(since):
                    since = since or now_ms()
                    continue  # its slot is on its way here: milliseconds
                raise

    @staticmethod
    def _pause_stale(since: float) -> bool:
        """A partition behind the map, or a slot on its way between two
        (since: when the call first met it; 0: now): pause, True to ask
        again; False when it has lasted STALE_MAX_MS."""
        if since and now_ms() - since >= _route.STALE_MAX_MS:
            return False
        time.sleep(_route.STALE_PAUSE_MS / 1000.0)
        return True

    # ---- calls and waiting ---------------------------------------------

    def _usable(self) -> None:
        if self._core.forked or os.getpid() != self._pid:
            raise ConnectionLost("this client belongs to the process that made it (fork)")
        if self._core.closing:
            raise ConnectionLost("the client is closed")

    def _call(self, q: Req, finish: Callable[[], None] | None = None) -> Any:
        """Submit q and wait for its outcome, until q.deadline (which a
        QUEUED answer moves). On timeout or interruption q is given up
        (the core cleans up what it still brings); `finish` runs, under
        the lock, however the wait ends."""
        q.waker = threading.Event()
        with self._mu:
            try:
                self._usable()
            except DlockError:
                if finish:
                    finish()
                raise
            self._core.submit(q, now_ms())
            self._flush()
        try:
            while not q.done:
                left = q.deadline - now_ms()
                if left <= 0:
                    with self._mu:
                        if not q.done:
                            self._core.abandon(q)
                            raise LockTimeout(f"no reply to {q.op} within request_timeout")
                    break
                q.waker.wait(min(left / 1000.0, CLOCK_STEP))
        except BaseException:
            with self._mu:
                if not q.done:
                    self._core.abandon(q)
                if finish:
                    finish()
            raise
        if finish:
            with self._mu:
                finish()
        if q.error is not None:
            raise q.error
        return q.result

    def _wait_turn(self, t: Ticket, wait_ms: float, wait_end: float) -> None:
        """Another acquisition of this client holds the name: wait for our
        turn within the wait."""
        try:
            while True:
                with self._mu:
                    if t.ready:
                        return
                    if self._core.closing:
                        self._core.give_turn(t)
                        raise ConnectionLost("the client is closed")
                    left = wait_end - now_ms()
                    if wait_ms == 0 or left <= 0:
                        self._core.give_turn(t)
                        raise LockTimeout(
                            f"{t.name!r} is held by another lease of this client"
                        )
                t.waker.wait(min(left / 1000.0, CLOCK_STEP))
        except BaseException:
            with self._mu:
                if not t.ready:
                    self._core.give_turn(t)
            raise

    def _wait_turns(
        self, ts: list[Ticket], waker: threading.Event, wait_ms: float, wait_end: float
    ) -> None:
        """A multi-lock's turns: every name's, within the wait; one of the
        names held by a lease of this client is HeldByOwner at once (the
        server would refuse it: ALREADY_HELD)."""
        while True:
            with self._mu:
                waker.clear()
                if self._core.closing:
                    raise ConnectionLost("the client is closed")
                for t in ts:
                    held = self._core.holding(t.name)
                    if held is not None:
                        raise HeldByOwner(
                            f"{t.name} is held by this client (lease {held.token}): "
                            "a multi-lock takes new leases only",
                            code="ALREADY_HELD",
                        )
                waiting = [t for t in ts if not t.ready]
                if not waiting:
                    return
                left = wait_end - now_ms()
                if wait_ms == 0 or left <= 0:
                    raise LockTimeout(
                        f"{waiting[0].name!r} is held by another lease of this client"
                    )
            waker.wait(min(left / 1000.0, CLOCK_STEP))

    # ---- the core's hooks (called with _mu held) ------------------------

    def done(self, q: Req) -> None:
        if q.waker is not None:
            q.waker.set()

    def turn(self, t: Ticket) -> None:
        if t.waker is not None:
            t.waker.set()

    def lost(self, ls: LeaseState) -> None:
        lease = ls.handle
        if lease is None:
            return
        lease.lost.set()
        self._callbacks.append((_api.log_lost, (ls,)))
        for cb in (ls.on_lost, self._o.on_lost):
            if cb is not None:
                self._callbacks.append((cb, (lease, ls.lost)))

    def watch_event(self, w: WatchState) -> None:
        if w.waker is not None:
            w.waker.set()

    def at_risk(self, ls: LeaseState) -> None:
        lease = ls.handle
        if lease is None:
            return
        for cb in (ls.on_at_risk, self._o.on_at_risk):
            if cb is not None:
                self._callbacks.append((cb, (lease,)))

    def contended(self, ls: LeaseState) -> None:
        lease = ls.handle
        ls.contended_due = False
        if lease is None or self._o.on_contended is None:
            return
        self._callbacks.append((self._o.on_contended, (lease, ls.waiters)))

    def moved(self, ls: LeaseState, err: Moved) -> bool:
        """A renewal of ls was answered MOVED: the router moves the lease
        to the client of its new partition, on its mover thread."""
        home = self._home()
        if home is None or self._core.closing or self._core.forked:
            return False
        with home._rmu:
            home._to_move.append((self, ls, err))
            if home._mover is None:
                home._mover = threading.Thread(
                    target=home._mover_run, name="dlockd-move", daemon=True
                )
                home._mover.start()
        return True

    def _mover_run(self) -> None:
        """The mover thread: the leases queued by moved(), one at a time
        (_rehome_bg); it ends when none is left."""
        while True:
            with self._rmu:
                if not self._to_move:
                    self._mover = None
                    return
                src, ls, err = self._to_move.popleft()
            self._rehome_bg(src, ls, err)

    # ---- the thread ----------------------------------------------------

    def _wake(self) -> None:
        try:
            os.write(self._wake_w, b"x")
        except OSError:
            pass  # full: the thread is awake anyway

    def _flush(self) -> None:
        """Push the core's output to the socket without blocking; what the
        kernel does not take waits for the thread's EVENT_WRITE."""
        out = self._core.out
        if not out or self._sock is None or self._core.state != UP:
            return
        try:
            while out:
                n = self._sock.send(out)
                if n <= 0:
                    break
                del out[:n]
        except (BlockingIOError, ssl.SSLWantWriteError, ssl.SSLWantReadError):
            pass
        except OSError:
            self._drop()
            return
        if out:
            self._wake()

    def _drop(self) -> None:
        """Close the connection and tell the core."""
        self._close_sock()
        self._core.connection_lost(now_ms())
        self._notify_ready()

    def _close_sock(self) -> None:
        if self._sock is not None:
            try:
                self._sel.unregister(self._sock)
            except (KeyError, ValueError):
                pass
            try:
                self._sock.close()
            except OSError:
                pass
            self._sock = None
        self._hs = False

    def _notify_ready(self) -> None:
        if self._core.ready or self._core.fatal is not None or self._core.state == DEAD:
            self._ready.set()

    def _start_connect(self, now: float) -> None:
        i = self._core.connecting()
        a = self._o.addresses[i]
        try:
            s = socket.socket(a.family, socket.SOCK_STREAM)
            s.setblocking(False)
            if a.family != socket.AF_UNIX:
                s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        except OSError as e:
            self._core.connect_failed(now, str(e))
            return
        try:
            s.connect(a.sockaddr)
        except (BlockingIOError, InterruptedError):
            pass
        except OSError as e:
            s.close()
            self._core.connect_failed(now, f"{a.name}: {e.strerror or e}", e.errno in REFUSED)
            self._notify_ready()
            return
        self._sock = s
        self._connect_deadline = now + self._o.connect_timeout_ms
        self._sel.register(s, selectors.EVENT_WRITE)

    def _connect_done(self, now: float) -> None:
        s = self._sock
        assert s is not None
        err = s.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
        if err:
            why = f"{self._addr().name}: {os.strerror(err)}"
            self._fail_attempt(now, why, refused=err in REFUSED)
            return
        ctx = self._o.ssl_context
        if ctx is None:
            self._up(now)
            return
        a = self._addr()
        try:
            self._sock = ctx.wrap_socket(
                s,
                server_hostname=self._o.tls_server_name or a.host,
                do_handshake_on_connect=False,
            )
        except (ssl.SSLError, OSError) as e:
            self._sock = s
            self._fail_attempt(now, f"TLS: {e}", e)
            return
        self._sel.unregister(s)
        self._sel.register(self._sock, selectors.EVENT_READ)
        self._hs = True
        self._handshake(now)

    def _handshake(self, now: float) -> None:
        s = self._sock
        assert isinstance(s, ssl.SSLSocket)
        try:
            s.do_handshake()
        except ssl.SSLWantReadError:
            self._sel.modify(s, selectors.EVENT_READ)
            return
        except ssl.SSLWantWriteError:
            self._sel.modify(s, selectors.EVENT_WRITE)
            return
        except (ssl.SSLError, OSError) as e:
            self._fail_attempt(now, f"TLS: handshake: {e}", e)
            return
        self._hs = False
        self._up(now)

    def _up(self, now: float) -> None:
        self._connect_deadline = NEVER
        self._tls_error = None
        assert self._sock is not None
        self._sel.modify(self._sock, selectors.EVENT_READ)
        self._core.connected(now)
        self._flush()

    def _addr(self) -> _options.Address:
        return self._o.addresses[self._core.addr_i]

    def _fail_attempt(
        self, now: float, why: str, exc: Exception | None = None, refused: bool = False
    ) -> None:
        self._close_sock()
        self._core.connect_failed(now, why, refused)
        self._notify_ready()
        if isinstance(exc, ssl.SSLError) and not self._core.ready:
            # TLS refused on the first connection (a certificate or name
            # that does not verify): tell the caller once every server
            # was tried, rather than retrying until connect_timeout
            self._tls_error = exc
            self._tls_fails += 1
            if self._tls_fails >= len(self._o.addresses):
                self._ready.set()

    def _input(self, now: float) -> None:
        s = self._sock
        assert s is not None
        while True:
            try:
                data = s.recv(READ_SIZE)
            except (BlockingIOError, ssl.SSLWantReadError, ssl.SSLWantWriteError):
                return
            except InterruptedError:
                continue
            except OSError:
                self._drop()
                return
            if not data:
                self._drop()
                return
            keep = self._core.data_received(data, now)
            if not keep or self._core.take_drop():
                self._drop()
                return
            self._notify_ready()
            if not (isinstance(s, ssl.SSLSocket) and s.pending()) and len(data) < READ_SIZE:
                return

    def _step(self) -> float:
        """One pass of the thread's work, with _mu held: the timeout of the
        next select (seconds)."""
        now = now_ms()
        core = self._core
        if core.state == DOWN and now >= core.reconnect_at:
            self._start_connect(now)
        if core.state == CONNECTING and now >= self._connect_deadline:
            self._fail_attempt(now, f"{self._addr().name}: connect timed out")
        nxt = core.tick(now)
        if core.take_drop():
            self._drop()
        self._flush()
        if self._sock is not None and core.state == UP:
            want = selectors.EVENT_READ | (selectors.EVENT_WRITE if core.out else 0)
            if self._sel.get_key(self._sock).events != want:
                self._sel.modify(self._sock, want)
        if core.state == DOWN:
            nxt = min(nxt, core.reconnect_at)
        if core.state == CONNECTING:
            nxt = min(nxt, self._connect_deadline)
        return max(0.0, min((nxt - now) / 1000.0, CLOCK_STEP))

    def _run(self) -> None:
        while True:
            with self._mu:
                if self._core.closing:
                    self._close_sock()
                    self._ready.set()
                    self._sel.close()
                    os.close(self._wake_r)
                    os.close(self._wake_w)
                    return
                timeout = self._step()
                self._notify_ready()
            while self._callbacks:
                cb, args = self._callbacks.popleft()
                try:
                    cb(*args)
                except Exception:  # the application's; must not kill us
                    import traceback

                    traceback.print_exc()
            try:
                events = self._sel.select(timeout)
            except (OSError, ValueError):
                events = []
            with self._mu:
                if self._core.closing:
                    continue
                now = now_ms()
                for key, mask in events:
                    if key.fd == self._wake_r:
                        try:
                            while os.read(self._wake_r, 512):
                                pass
                        except OSError:
                            pass
                        continue
                    if self._sock is None or key.fileobj is not self._sock:
                        continue
                    if self._core.state == CONNECTING and not self._hs:
                        self._connect_done(now)
                    elif self._hs:
                        self._handshake(now)
                    else:
                        if mask & selectors.EVENT_WRITE:
                            self._flush()
                        if mask & selectors.EVENT_READ and self._sock is not None:
                            self._input(now)

    # ---- fork ----------------------------------------------------------

    def _after_fork(self) -> None:
        """In the child: the parent's lock may be held by a thread that does
        not exist here; the leases are not ours."""
        self._mu = threading.Lock()
        self._rmu = threading.Lock()
        self._moving = threading.Lock()
        self._to_move.clear()
        self._mover = None
        self._making = {}
        self._core.after_fork()
        if self._sock is not None:
            try:
                self._sock.close()
            except OSError:
                pass
            self._sock = None


def _locks_extra(
    prefix: str | None, after: str | None, limit: int | None, by_waiters: bool
) -> dict[str, Any]:
    if prefix:
        _api.wire.check_name(prefix, "prefix")
    if after:
        if by_waiters:
            raise ValueError("after= does not apply with by_waiters")
        _api.wire.check_name(after, "after")
    if limit is not None and not 1 <= int(limit) <= _api.wire.PAGE_MAX:
        raise ValueError(f"limit out of range: 1 to {_api.wire.PAGE_MAX}")
    return {"prefix": prefix, "after": after, "limit": limit, "by_waiters": by_waiters}


