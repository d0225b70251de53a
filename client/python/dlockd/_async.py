# SPDX-License-Identifier: MIT
"""dlockd.AsyncClient: the core driven by an asyncio event loop.

Everything runs on the loop, so the core needs no lock. The connection is
an asyncio Protocol whose ``data_received`` feeds the core directly; a
request is written by the coroutine that makes it and completed by a
Future. One timer handle (re-armed after every change, never further
than CLOCK_STEP ahead: the loop's clock stops during a suspend,
CLOCK_BOOTTIME does not) runs renewals, lost guards and reconnects; a
connect runs as a task of its own so that the timer keeps firing while a
daemon does not answer.

Cancellation: a task cancelled while it acquires gives the request up
(a grant that comes later is released, a queued wait cancelled); one
cancelled while it releases leaves the UNLOCK to finish on its own (the
token is kept until the server answers, across reconnects).
"""

from __future__ import annotations

import asyncio
import collections.abc
import inspect
import os
import socket
import ssl
from typing import Any, AsyncIterator, Callable, Generator

from . import _api
from . import _options
from . import _route
from ._api import _UNSET, LeasesView, LeaseView, lock_all_args, lock_args
from ._core import (
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
from ._sync import CLOCK_STEP, CLOSE_RELEASE_MS, REFUSED, _locks_extra
from ._types import Holders, LocksPage, LostReason, Status, WatchEvent, lost_why
from ._wire import Seconds


class AsyncLease(LeaseView):
    """One hold of a lock, as ``await AsyncClient.lock()`` returns it.

    ``lost`` is an asyncio.Event set when the lease is lost; ``async with``
    a lease releases it at the end of the block and raises LockLost if it
    was lost meanwhile. ``async with c.lock(...)`` also cancels its task
    at the loss (``cancel_on_loss``, on by default there), so the block
    stops where it is and ends with LockLost. A loss is logged at once
    (logger ``"dlockd"``, WARNING).

    Of a partitioned service, a lease survives a ``PARTITION MOVE`` of its
    name's slot (same token): as :class:`dlockd.Lease`, the first request
    about it answered ``MOVED`` moves it to the new partition's client.
    """

    def __init__(self, client: AsyncClient, ls: LeaseState) -> None:
        self._client = client  # the client that has it (a partition's, re-homed on a move)
        self._ls = ls
        self.lost = asyncio.Event()
        self._cancel: asyncio.Task[Any] | None = None  # cancel_on_loss
        self._cancelled_by_loss = False

    async def _follow(self, call: Callable[[AsyncClient], Any]) -> Any:
        """As Lease._follow: await call(client) on the client that has
        the lease now; MOVED moves the lease and calls again there, at
        most MOVED_MAX times (then Moved); while its slot is on its way,
        the call is made again soon, within STALE_MAX_MS."""
        moves = 0
        since = 0.0
        while True:
            c = self._client
            try:
                return await call(c)
            except Unavailable as e:
                home = c._home()
                if home is None or home._router is None and not isinstance(e, Moved):
                    raise
                if isinstance(e, Moved):
                    moves += 1
                    if moves > _route.MOVED_MAX:
                        raise _route.too_many(self.name, e) from None
                    if await home._rehome(self._ls, c, e) is not c:
                        continue
                    moves -= 1  # not moved: its partition is behind the map
                elif not _route.in_move(e):
                    raise
                since = since or now_ms()
                if now_ms() - since >= _route.STALE_MAX_MS:
                    raise
                await asyncio.sleep(_route.STALE_PAUSE_MS / 1000.0)

    def _usable_lease(self) -> None:
        """LockLost for a lease lost or released."""
        if self._ls.lost is not None or self._ls.released:
            why = lost_why(self._ls.lost, self._ls.broken_by) if self._ls.lost else ""
            raise LockLost(
                f"the lease of {self.name!r} is " + (f"lost: {why}" if why else "released")
            )

    async def check(self) -> float:
        """The seconds this token's lease has left at the server;
        LockLost if it no longer holds the lock."""
        return float(await self._follow(
            lambda c: c._call(c._core.simple_request("CHECK", self.name, self.token))
        ))  # fmt: skip

    async def refresh(self, ttl: Seconds | None = None) -> float:
        """Extend the lease now to ``ttl`` seconds (default: its TTL);
        returns the TTL granted. LockLost if it is gone."""
        ttl_ms = float(_api.wire.ms_of(ttl, "ttl")) if ttl is not None else None

        async def once(c: AsyncClient) -> float:
            self._usable_lease()
            return float(await c._call(c._core.refresh_request(self._ls, ttl_ms, now_ms())))

        return float(await self._follow(once))

    async def proclaim(self, value: str) -> None:
        """As :meth:`dlockd.Lease.proclaim`: the lease's new value (a
        REFRESH for its TTL with value=). ValueError for an empty value;
        LockLost if the lease is gone."""
        v = _api.value_arg(value)

        async def once(c: AsyncClient) -> None:
            self._usable_lease()
            await c._call(c._core.proclaim_request(self._ls, v, now_ms()))

        await self._follow(once)

    async def extend(self, additional_time: Seconds, replace_ttl: bool = False) -> float:
        """redis-py's ``extend``: refresh now so that ``additional_time``
        more seconds remain than the lease has left (``replace_ttl``:
        exactly that). The new length is what renewals ask for from then
        on. Returns the TTL granted; LockLost if the lease is gone."""
        add = _api.wire.seconds_of(additional_time, "additional_time")
        return await self.refresh(add if replace_ttl else self.remaining() + add)

    async def locked(self) -> bool:
        """redis-py's ``await lock.locked()``: whether anyone holds the
        lock now (the server says)."""
        c = self._client
        return (await (c._home() or c).status(self.name)).held

    async def release(self) -> None:
        """Give the hold back. Cancellation-safe: a task cancelled here
        leaves the UNLOCK to complete (sent again after a reconnect until
        the server answers). NotHolder if the server no longer had the
        lease. An UNLOCK answered MOVED (the lease's slot went to another
        partition) is sent again there."""
        try:
            await self._follow(self._release_once)
        except DlockError as e:
            if e.code == "NOT_HOLDER":
                if self._ls.lost is None:
                    self._ls.lost = LostReason.REJECTED
                    self.lost.set()
                raise
            if isinstance(e, LockTimeout):
                return
            raise

    async def _release_once(self, c: AsyncClient) -> None:
        """The UNLOCK on client c; one answered MOVED leaves the lease
        held, to follow its slot (_follow)."""
        q = c._core.release_request(self._ls, now_ms())
        if q is None:
            return
        await c._call(q, finish=lambda: c._core.release_over(self._ls, q), shield=True)

    async def __aenter__(self) -> AsyncLease:
        return self

    async def __aexit__(self, et: Any, ev: Any, tb: Any) -> None:
        await _exit(self, et, ev)


async def _exit(lease: AsyncLease, et: Any, ev: Any) -> None:
    """The end of an ``async with``: release; a cancellation that the
    lease's loss caused becomes LockLost."""
    lease._cancel = None
    if not lease._ls.owned:
        return
    try:
        await lease.release()
    except DlockError:
        if et is None and lease._ls.lost is None:
            raise
    if lease._cancelled_by_loss and et is not None and issubclass(et, asyncio.CancelledError):
        task = asyncio.current_task()
        if task is not None and hasattr(task, "uncancel"):
            task.uncancel()
        raise _api.lost_error(lease._ls, cancelled=True) from ev
    if et is None and lease._ls.lost is not None:
        raise _api.lost_error(lease._ls)


class _Pending(collections.abc.Coroutine):  # type: ignore[type-arg]
    """An acquire that runs when first awaited (or sent to, as a task
    does): the coroutine protocol over ``_acquire()``, which each kind
    of acquire defines."""

    _coro: Any = None

    def _acquire(self, scoped: bool = False) -> Any:
        raise NotImplementedError

    def _inner(self) -> Any:
        if self._coro is None:
            self._coro = self._acquire()
        return self._coro

    def __await__(self) -> Generator[Any, None, Any]:
        return self._inner().__await__()

    def send(self, value: Any) -> Any:
        return self._inner().send(value)

    def throw(self, *exc: Any) -> Any:
        return self._inner().throw(*exc)

    def close(self) -> None:
        if self._coro is not None:
            self._coro.close()


class _Acquire(_Pending):
    """What ``AsyncClient.lock()`` returns: await it (or make it a task)
    for the lease, or use it in ``async with`` (which releases at the
    end)."""

    def __init__(
        self, client: AsyncClient, args: _api.LockArgs, cancel_on_loss: bool | None
    ) -> None:
        self._c = client
        self._a = args
        self._cancel_on_loss = cancel_on_loss
        self._lease: AsyncLease | None = None
        self._coro: Any = None

    async def _acquire(self, scoped: bool = False) -> AsyncLease:
        lease = await self._c._acquire(self._a, None)
        cancel = self._cancel_on_loss
        if cancel is None:
            cancel = scoped  # the default: within ``async with`` only
        if cancel:
            lease._cancel = asyncio.current_task()
            if lease._ls.lost is not None:
                self._c.lost(lease._ls)
        return lease

    async def __aenter__(self) -> AsyncLease:
        self._lease = await self._acquire(scoped=True)
        return self._lease

    async def __aexit__(self, et: Any, ev: Any, tb: Any) -> None:
        assert self._lease is not None
        await _exit(self._lease, et, ev)


class AsyncLeases(LeasesView):
    """The leases of a multi-lock, as ``await AsyncClient.lock_all()``
    returns them: a sequence of :class:`AsyncLease` in the byte order of
    the names (also ``leases[name]``), each an ordinary lease.
    ``await leases.release()`` gives them all back; ``async with
    c.lock_all(...) as leases`` releases them at the end of the block,
    which is cancelled when one of them is lost (``cancel_on_loss``) and
    ends with LockLost."""

    def __init__(self, leases: list[AsyncLease]) -> None:
        self._leases = leases

    async def release(self) -> None:
        """Release every lease (in the order of the names), all of them
        even if one fails; then raises the first error."""
        first: DlockError | None = None
        for lease in self._leases:
            try:
                await lease.release()
            except DlockError as e:
                first = first or e
        if first is not None:
            raise first

    async def __aenter__(self) -> AsyncLeases:
        return self

    async def __aexit__(self, et: Any, ev: Any, tb: Any) -> None:
        await _exit_all(self, et, ev)


async def _exit_all(leases: AsyncLeases, et: Any, ev: Any) -> None:
    """The end of an ``async with`` of a multi-lock's leases: release
    them all; a cancellation that a loss caused becomes LockLost."""
    by_loss = 0
    for lease in leases:
        lease._cancel = None
        by_loss += lease._cancelled_by_loss
    owned = [lease for lease in leases if lease._ls.owned]
    try:
        await AsyncLeases(owned).release()
    except LockLost:
        pass
    except DlockError:
        if et is None and leases.first_lost() is None:
            raise
    lost = leases.first_lost()
    if by_loss and et is not None and issubclass(et, asyncio.CancelledError):
        task = asyncio.current_task()
        if task is not None and hasattr(task, "uncancel"):
            for _ in range(by_loss):
                task.uncancel()
        raise _api.lost_error(lost._ls, cancelled=True) from ev
    if et is None and lost is not None and lost._ls.owned:
        raise _api.lost_error(lost._ls)


class _AcquireAll(_Pending):
    """What ``AsyncClient.lock_all()`` returns: await it for the leases,
    or use it in ``async with`` (which releases them all at the end)."""

    def __init__(
        self, client: AsyncClient, args: _api.LockAllArgs, cancel_on_loss: bool | None
    ) -> None:
        self._c = client
        self._a = args
        self._cancel_on_loss = cancel_on_loss
        self._leases: AsyncLeases | None = None
        self._coro: Any = None

    async def _acquire(self, scoped: bool = False) -> AsyncLeases:
        leases = await self._c._acquire_all(self._a, None)
        cancel = self._cancel_on_loss
        if cancel is None:
            cancel = scoped  # the default: within ``async with`` only
        if cancel:
            task = asyncio.current_task()
            for lease in leases:
                lease._cancel = task
            for lease in leases:
                if lease._ls.lost is not None:
                    self._c.lost(lease._ls)
        return leases

    async def __aenter__(self) -> AsyncLeases:
        self._leases = await self._acquire(scoped=True)
        return self._leases

    async def __aexit__(self, et: Any, ev: Any, tb: Any) -> None:
        assert self._leases is not None
        await _exit_all(self._leases, et, ev)


class AsyncRWLock:
    """A read/write lock: ``read()`` shared, ``write()`` exclusive."""

    def __init__(self, client: AsyncClient, name: str) -> None:
        self._c = client
        self.name = _api.wire.check_name(name)

    def read(self, ttl: Seconds | None = None, wait: Seconds | None = None, **kw: Any) -> _Acquire:
        return self._c.lock(self.name, ttl, wait, mode="shared", **kw)

    def write(self, ttl: Seconds | None = None, wait: Seconds | None = None, **kw: Any) -> _Acquire:
        return self._c.lock(self.name, ttl, wait, **kw)


class AsyncSemaphore:
    """A semaphore of ``n`` permits; ``acquire()`` takes one."""

    def __init__(self, client: AsyncClient, name: str, n: int) -> None:
        self._c = client
        self.name = _api.wire.check_name(name)
        self.n = n

    def acquire(
        self, ttl: Seconds | None = None, wait: Seconds | None = None, **kw: Any
    ) -> _Acquire:
        return self._c.lock(self.name, ttl, wait, limit=self.n, **kw)


class _Proto(asyncio.Protocol):
    def __init__(self, client: AsyncClient) -> None:
        self.c = client
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        self.c._data(self, data)

    def connection_lost(self, exc: Exception | None) -> None:
        self.c._lost(self)


class _Wait:
    """A caller's wait for a request: its future and timeout handle."""

    __slots__ = ("fut", "timer")

    def __init__(self, fut: asyncio.Future[Any]) -> None:
        self.fut = fut
        self.timer: asyncio.TimerHandle | None = None


class AsyncWatch:
    """What ``AsyncClient.watch()`` returns: ``async for ev in
    c.watch("jobs/*")`` (ends when the watch or the client is closed;
    leaving the loop closes the watch), ``w = await c.watch(...)`` (the
    watch answered, then ``await w.get(timeout)``), or ``async with
    c.watch(...) as w``. ``close()`` stops watching.

    Of a partitioned service, a name is watched at its partition's
    daemon and a prefix at the first connection's (that partition's
    locks only); a watch of several is one on each, their events read
    as one (in order per daemon)."""

    def __init__(self, client: AsyncClient, patterns: list[str]) -> None:
        self._c = client
        self._patterns = patterns
        self._w: WatchState | None = None
        self._closed = False
        # a partitioned service's watch over several daemons: a watch on
        # each, which tell this one of their events (_waker)
        self._subs: list[AsyncWatch] | None = None
        self._waker: asyncio.Event | None = None
        self._next = 0

    @property
    def patterns(self) -> list[str]:
        if self._subs is not None:
            return [p for sub in self._subs for p in sub.patterns]
        return list(self._w.patterns if self._w is not None else self._patterns)

    @property
    def closed(self) -> bool:
        if self._subs is not None:
            return self._closed or all(sub.closed for sub in self._subs)
        return self._closed or (self._w is not None and self._w.closed)

    async def start(self) -> AsyncWatch:
        """Send the WATCHes and await their answers (once; awaiting the
        watch, ``async with`` and ``async for`` do it): Denied,
        LimitReached, Unavailable."""
        if self._w is not None or self._subs is not None:
            return self
        if self._closed:
            raise ConnectionLost("the watch is closed")
        c = self._c
        await c._ensure_connected()
        first: Moved | None = None
        if c._router is None:
            try:
                return await self._start_here()
            except Moved as e:
                # a name of another partition: the service is partitioned
                if not await c._promote():
                    raise
                first = e
                self._c, self._w, self._closed = c, None, False
        # a partitioned service: a name at its partition, prefixes on the
        # first connection
        prefixes, names = _route.watch_split(self._patterns)
        if not names:
            return await self._start_here()
        if not prefixes and len(names) == 1:

            async def on(leg: AsyncClient) -> AsyncWatch:
                self._c, self._w, self._closed = leg, None, False
                return await self._start_here()

            return await c._aroute(names[0], on, first)
        subs: list[AsyncWatch] = []
        try:
            if prefixes:
                subs.append(AsyncWatch(c, prefixes))
                await subs[-1]._start_here()
            for n in names:
                subs.append(AsyncWatch(c, [n]))
                await subs[-1].start()
        except BaseException:
            for sub in subs:
                sub.close()
            raise
        self._waker = asyncio.Event()
        for sub in subs:
            assert sub._w is not None
            sub._w.waker = self._waker
        self._subs = subs
        if self._closed:  # closed meanwhile
            self.close()
        return self

    async def _start_here(self) -> AsyncWatch:
        c = self._c
        await c._ensure_connected()
        c._usable()
        w = c._core.watch_open(self._patterns)
        w.waker = asyncio.Event()
        self._w = w
        try:
            for p in w.patterns:
                await c._call(c._core.watch_request(p, now_ms()))
        except BaseException:
            self.close()
            raise
        c._core.watch_started(w)
        return self

    def __await__(self) -> Generator[Any, None, AsyncWatch]:
        return self.start().__await__()

    async def get(self, timeout: Seconds | None = None) -> WatchEvent | None:
        """The next event, waiting up to ``timeout`` seconds (None: until
        one comes); None when the time ran out, or once the watch ended
        and its last events were taken."""
        if self._w is None and self._subs is None:
            await self.start()
        if self._subs is not None:
            return await self._get_merged(timeout)
        w = self._w
        assert w is not None
        t = None if timeout is None else _api.wire.seconds_of(timeout, "timeout")
        end = NEVER if t is None else now_ms() + t * 1000.0
        while True:
            ev = self._c._core.watch_take(w)
            if ev is not None or w.closed:
                return ev
            w.waker.clear()
            left = end - now_ms()
            if left <= 0:
                return None
            try:
                await asyncio.wait_for(w.waker.wait(), min(left / 1000.0, CLOCK_STEP))
            except asyncio.TimeoutError:
                pass

    async def _get_merged(self, timeout: Seconds | None) -> WatchEvent | None:
        subs, waker = self._subs, self._waker
        assert subs is not None and waker is not None
        t = None if timeout is None else _api.wire.seconds_of(timeout, "timeout")
        end = NEVER if t is None else now_ms() + t * 1000.0
        n = len(subs)
        while True:
            waker.clear()
            ended = 0
            for k in range(n):
                sub = subs[(self._next + k) % n]
                assert sub._w is not None
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
            try:
                await asyncio.wait_for(waker.wait(), min(left / 1000.0, CLOCK_STEP))
            except asyncio.TimeoutError:
                pass

    async def _events(self) -> AsyncIterator[WatchEvent]:
        try:
            while True:
                ev = await self.get()
                if ev is None:
                    return
                yield ev
        finally:
            self.close()

    def __aiter__(self) -> AsyncIterator[WatchEvent]:
        return self._events()

    def close(self) -> None:
        """Stop watching (UNWATCH what no other watch of the client
        watches); the iteration ends."""
        self._closed = True
        if self._subs is not None:
            for sub in self._subs:
                sub.close()
            if self._waker is not None:
                self._waker.set()
            return
        w = self._w
        if w is None:
            return
        c = self._c
        if not w.closed and not c._core.forked:
            c._core.watch_close(w)
            c._flush()
        w.closed = True
        w.waker.set()

    async def __aenter__(self) -> AsyncWatch:
        return await self.start()

    async def __aexit__(self, *exc: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<AsyncWatch {' '.join(self.patterns)}{' closed' if self.closed else ''}>"


class AsyncClient:
    """The asyncio face of the client: the same arguments as
    :class:`dlockd.Client`. It connects on first use (as redis-py's
    asyncio client does), or explicitly with ``await c.connect()`` or
    ``async with AsyncClient(...) as c``; a first connect that fails
    raises (Unavailable, ...) and the next use tries again. ``await
    c.close()`` (and the end of ``async with``) gives back the leases
    still held, unless ``close(release=False)``. The callbacks (on_lost,
    on_at_risk, on_contended) run on the loop; one that returns an
    awaitable is run as a task.

    A partitioned service: as :class:`dlockd.Client` -- the map is read at
    the first connect (and again on a MOVED while it said no map), the
    calls about names go to a client of their
    partition (an AsyncClient made on first use, connected by that
    use), MOVED is followed, the calls without a name stay on the first
    connection (its partition only). A lease follows its name's slot when
    it moves to another partition (``PARTITION MOVE``: same token), and
    a LOCK that waits then is sent on with the wait it has left."""

    def __init__(
        self,
        servers: str | list[str] | None = None,
        *,
        _leg: _options.Options | None = None,
        **kw: Any,
    ) -> None:
        # _leg: the options of a partition's client (a router's leg): no
        # MAP of its own
        self._o = _leg if _leg is not None else _options.build(servers, kw)
        self._is_leg = _leg is not None
        self._router: _route.Routes | None = None
        self._legs: dict[str, AsyncClient] = {}  # partition id -> its client
        self._rclosed = False
        # a leg's router (set by _leg_of); a router's lock over the moves
        # of leases between its clients (_rehome; made on the loop)
        self._parent: AsyncClient | None = None
        self._moving: asyncio.Lock | None = None
        self._movers: set[asyncio.Task[None]] = set()
        self._core = Core(self._o, self)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._proto: _Proto | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._timer_at = NEVER
        self._connect_task: asyncio.Task[None] | None = None
        self._ready: asyncio.Future[None] | None = None
        self._tls_error: Exception | None = None
        self._tls_fails = 0
        self._pid = os.getpid()
        self._connecting: asyncio.Future[None] | None = None
        self._addrs0 = self._o.addresses  # as given, resolved at each first connect
        self._user_closed = False
        _api.register(self)

    async def _ensure_connected(self) -> bool:
        """Connect on first use; concurrent first uses share one connect
        (and its outcome). True if this call waited for it."""
        if self._core.closing:
            return False
        if self._connecting is None:
            if self._loop is not None:
                return False  # connected (or reconnecting on its own)
            self._connecting = asyncio.ensure_future(self._connect_first())
        fut = self._connecting
        try:
            await asyncio.shield(fut)
        finally:
            if fut.done() and self._connecting is fut:
                self._connecting = None
        return True

    async def connect(self) -> AsyncClient:
        """Connect (the first server that is active) within
        connect_timeout. Raises Unavailable, Denied or ssl.SSLError; the
        client may then be used (or connected) again. Not needed: the
        first call connects."""
        if self._core.closing:
            raise ConnectionLost("the client is closed")
        await self._ensure_connected()
        return self

    async def _connect_first(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._o.addresses = await self._loop.run_in_executor(
            None, _options.resolve, self._addrs0
        )
        if not self._o.addresses:
            raise Unavailable("no server address resolves")
        self._core.naddrs = len(self._o.addresses)
        self._ready = self._loop.create_future()
        self._schedule()
        try:
            await asyncio.wait_for(
                asyncio.shield(self._ready), self._o.connect_timeout_ms / 1000.0
            )
        except asyncio.TimeoutError:
            pass
        if not self._core.ready:
            why = self._core.last_error
            fatal = self._core.fatal
            tls_error = self._tls_error
            self._reset()
            if isinstance(tls_error, ssl.SSLError):
                raise tls_error
            raise fatal or Unavailable("cannot connect to dlockd" + (f": {why}" if why else ""))
        if not self._is_leg:
            await self._discover()

    async def _discover(self) -> None:
        """The first connect is made: read the partition map once (see
        Client._discover). A failure is the first connect's."""
        try:
            m = _route.map_reply(await self._read_map(first=True))
        except DlockError as e:
            if e.code == "UNKNOWN_COMMAND":
                return  # a daemon older than partitions: it serves every name
            self._reset()
            if isinstance(e, LockTimeout):
                raise Unavailable(f"no answer to MAP: {e}") from None
            raise
        if m is not None:
            self._router = _route.Routes(m, now_ms())

    def _reset(self) -> None:
        """A first connect failed: back to a client never connected (a
        new core: nothing was granted, nothing waits), so that the next
        use tries again."""
        old = self._core
        old.close()
        if self._timer is not None:
            self._timer.cancel()
        if self._connect_task is not None:
            self._connect_task.cancel()
        if self._proto is not None and self._proto.transport is not None:
            self._proto.transport.close()
        self._core = Core(self._o, self)
        self._o.addresses = self._addrs0
        if self._user_closed:
            self._core.close()  # close() came meanwhile: it stays closed
        self._loop = None
        self._proto = None
        self._timer = None
        self._timer_at = NEVER
        self._connect_task = None
        self._ready = None
        self._tls_error = None
        self._tls_fails = 0

    async def __aenter__(self) -> AsyncClient:
        return await self.connect()

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()

    @property
    def owner(self) -> str:
        return self._core.owner

    @property
    def owner_key(self) -> str:
        return self._core.key

    @property
    def cluster(self) -> str:
        return self._core.cluster

    @property
    def partitioned(self) -> bool:
        """True once the first connect (or a MOVED after it) found a
        partitioned service."""
        return self._router is not None

    @property
    def map_epoch(self) -> int:
        """The epoch of the newest partition map read (0: not
        partitioned, or not connected yet)."""
        return self._router.epoch if self._router is not None else 0

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
        cancel_on_loss: bool | None = None,
        warn: Seconds | None = None,
        delay: Seconds | None = None,
        notify_waiters: bool = False,
        value: str | None = None,
        blocking: bool = _UNSET,
        blocking_timeout: Seconds | None = _UNSET,
        timeout: Any = _UNSET,
    ) -> _Acquire:
        """As :meth:`dlockd.Client.lock`: ``lease = await c.lock(...)`` or
        ``async with c.lock(...) as lease``. ``cancel_on_loss``: the task
        that acquired is cancelled when the lease is lost, and an ``async
        with`` block then ends with LockLost. By default (None) it is on
        within ``async with c.lock(...)`` and off for a plain ``await``
        (whose lease outlives any block: watch ``lease.lost`` or pass
        ``on_lost``); True or False says it for both. ``notify_waiters``:
        the client's ``on_contended(lease, waiters)`` is called (on the
        loop) when the server says others wait for the lease, and
        ``lease.waiters`` says the last count. ``value``: what the lease
        says to whoever looks at the lock (an elected leader's address;
        ``await lease.proclaim(v)`` changes it)."""
        wait = _api.wait_of(wait, blocking, blocking_timeout, timeout)
        a = lock_args(
            name, ttl, wait, mode, limit, max_hold, renew, on_lost, on_at_risk, warn, delay,
            notify_waiters, value,
        )
        return _Acquire(self, a, cancel_on_loss)

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
        cancel_on_loss: bool | None = None,
    ) -> _AcquireAll:
        """As :meth:`dlockd.Client.lock_all`: several locks at once, all or
        none -- ``leases = await c.lock_all([...])`` or ``async with
        c.lock_all([...]) as leases`` (:class:`AsyncLeases`, one
        :class:`AsyncLease` per name in byte order). A task cancelled
        while it waits gives the multi-lock up (``CANCEL <first>``:
        nothing is held). ``cancel_on_loss`` as for ``lock()``: the loss
        of any of the leases cancels the task."""
        a = lock_all_args(names, ttl, wait, max_hold, renew, on_lost, on_at_risk)
        return _AcquireAll(self, a, cancel_on_loss)

    def watch(self, *patterns: str) -> AsyncWatch:
        """As :meth:`dlockd.Client.watch`: ``async for ev in
        c.watch("jobs/*")``, or ``w = await c.watch(...)`` then ``await
        w.get()``, or ``async with c.watch(...) as w``."""
        if not patterns:
            raise ValueError("watch: give at least one pattern")
        for p in patterns:
            _api.wire.check_name(p, "pattern")
        return AsyncWatch(self, list(dict.fromkeys(patterns)))

    def rwlock(self, name: str) -> AsyncRWLock:
        return AsyncRWLock(self, name)

    def semaphore(self, name: str, n: int) -> AsyncSemaphore:
        return AsyncSemaphore(self, name, n)

    async def check(self, name: str, token: int) -> float:
        _api.wire.check_name(name)

        async def here() -> float:
            return float(await self._call(self._core.simple_request("CHECK", name, int(token))))

        return await self._by_name(name, here, lambda leg: leg.check(name, token))

    async def status(self, name: str) -> Status:
        _api.wire.check_name(name)
        return await self._by_name(
            name,
            lambda: self._call(self._core.simple_request("STATUS", name)),
            lambda leg: leg.status(name),
        )

    async def holders(self, name: str) -> Holders:
        _api.wire.check_name(name)
        return await self._by_name(
            name,
            lambda: self._call(self._core.simple_request("HOLDERS", name)),
            lambda leg: leg.holders(name),
        )

    async def locks(
        self,
        prefix: str | None = None,
        *,
        after: str | None = None,
        limit: int | None = None,
        by_waiters: bool = False,
    ) -> LocksPage:
        e = _locks_extra(prefix, after, limit, by_waiters)
        return await self._call(self._core.simple_request("LOCKS", **e))

    async def stats(self) -> dict[str, str]:
        return await self._call(self._core.simple_request("STATS"))

    async def ping(self) -> None:
        await self._call(self._core.simple_request("PING"))

    async def break_lease(self, name: str, token: int, reason: str) -> None:
        _api.wire.check_name(name)
        _api.wire.check_word(reason, "reason", _api.wire.REASON_MAX)
        await self._by_name(
            name,
            lambda: self._call(self._core.simple_request("BREAK", name, int(token), reason=reason)),
            lambda leg: leg.break_lease(name, token, reason),
        )

    async def close(self, release: bool = True) -> None:
        """Give back the leases still held (each UNLOCK awaited for at most
        a second, never longer than request_timeout: a server down or slow
        is left to end them by their TTL), end the watches, close the
        connection. ``release=False`` keeps the leases held until their
        TTL runs out. A lease whose UNLOCK is answered MOVED (its slot
        moved meanwhile) is released at its new partition first."""
        self._user_closed = True
        if os.getpid() != self._pid or self._core.closing:
            return
        for t in list(self._movers):
            t.cancel()  # a lease being moved now is as the others
        sent: list[tuple[AsyncClient, list[Req]]] = []
        if release and not self._is_leg and self._router is not None:
            sent = [(c, c._send_unlocks()) for c in [*self._legs.values(), self]]
            await self._await_unlocks([q for _, qs in sent for q in qs])
            await self._follow_unlocks(sent)
        self._rclosed = True
        legs, self._legs = list(self._legs.values()), {}
        if legs:
            await asyncio.gather(
                *(leg._close_own(release, next((qs for c, qs in sent if c is leg), None))
                  for leg in legs),
                return_exceptions=True,
            )  # fmt: skip
        await self._close_own(release, next((qs for c, qs in sent if c is self), None))

    def _send_unlocks(self) -> list[Req]:
        """close(): the UNLOCK of every lease still held, sent now."""
        core = self._core
        qs: list[Req] = []
        if self._loop is not None and core.state == UP and core.session_ok and not core.closing:
            now = now_ms()
            for ls in list(core.leases):
                if not ls.live() or not ls.owned:
                    continue
                q = core.release_request(ls, now)
                if q is None:
                    continue
                q.waker = _Wait(self._loop.create_future())
                core.submit(q, now)
                qs.append(q)
            self._flush()
        return qs

    async def _await_unlocks(self, qs: list[Req]) -> None:
        """The answers of _send_unlocks: for at most a second (never
        longer than request_timeout)."""
        if qs:
            bound = min(CLOSE_RELEASE_MS, self._o.request_timeout_ms) / 1000.0
            await asyncio.wait([q.waker.fut for q in qs], timeout=bound)

    async def _follow_unlocks(self, sent: list[tuple[AsyncClient, list[Req]]]) -> None:
        """As Client._follow_unlocks: a lease whose UNLOCK was answered
        MOVED is released at its new partition (AsyncLease.release)."""
        for c, qs in sent:
            for q in list(qs):
                ls = q.lease
                if ls is None or not q.done or not isinstance(q.error, Moved):
                    continue
                qs.remove(q)
                c._core.release_over(ls, q)
                if ls.handle is not None:
                    try:
                        await ls.handle.release()
                    except DlockError:
                        pass  # left to end by its TTL
                    ls.handle.lost.set()  # as every lease at close

    async def _close_own(self, release: bool, qs: list[Req] | None) -> None:
        """close() of this client's own connection; qs: the UNLOCKs sent
        already (_send_unlocks), else sent now if release."""
        self._user_closed = True
        if os.getpid() != self._pid or self._core.closing:
            return
        core = self._core
        if qs is None:
            qs = self._send_unlocks() if release else []
            await self._await_unlocks(qs)
        if core.closing:
            return
        for q in qs:
            if not q.done:
                core.abandon(q)
        core.close()
        for q in qs:
            if q.lease is not None:
                if q.done and q.error is None:
                    core.released(q.lease)
                q.lease.unlocking = False
                if q.lease.handle is not None:
                    q.lease.handle.lost.set()
        for ls in core.leases:
            if ls.handle is not None:
                ls.handle.lost.set()
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._connect_task is not None:
            self._connect_task.cancel()
        if self._proto is not None and self._proto.transport is not None:
            self._proto.transport.close()
        self._proto = None
        if self._ready is not None and not self._ready.done():
            self._ready.set_result(None)

    # ---- routing (a partitioned service) ----------------------------------

    async def _routing(self) -> bool:
        """Connected (the first call connects): True if the calls about
        names are routed."""
        await self._ensure_connected()
        return self._router is not None

    async def _read_map(self, first: bool = False) -> Any:
        """MAP on this client's connection: (epoch, lines)."""
        return await self._call(self._core.simple_request("MAP"), first=first)

    async def _promote(self) -> bool:
        """As Client._promote: a call of the unpartitioned client was
        answered MOVED; MAP read again, an epoch above 0 makes the client
        a router from now on. True if it routes; False for a leg, or
        while the daemon still says no map."""
        if self._is_leg:
            return False
        if self._router is not None:
            return True  # made by another call meanwhile
        try:
            m = _route.map_reply(await self._read_map())
        except DlockError:
            return False
        if m is None or self._rclosed:
            return False
        if self._router is None:
            self._router = _route.Routes(m, now_ms())
        return True

    async def _by_name(
        self, name: str, here: Callable[[], Any], call: Callable[[AsyncClient], Any]
    ) -> Any:
        """A call about `name` (the first call connects): await here() on
        this client's connection while it is unpartitioned (a MOVED
        answer may make it a router: _promote), else await call(leg) on
        the client of the name's partition."""
        first: Moved | None = None
        if not await self._routing():
            try:
                return await here()
            except Moved as e:
                if not await self._promote():
                    raise
                first = e
        return await self._aroute(name, call, first)

    async def _reread(self, via: AsyncClient) -> None:
        """As Client._reread: the map through `via`, kept if newer; the
        legs whose partition moved get the new addresses."""
        rt = self._router
        if rt is None:
            return
        rt.read_at = now_ms()  # a failure too: at most once a second (_reread_for)
        try:
            m = _route.map_reply(await via._read_map())
        except DlockError:
            return
        if m is None:
            return
        changed = rt.adopt(m, now_ms())
        for pid, addrs in changed.items():
            leg = self._legs.get(pid)
            if leg is not None:
                await leg._set_servers(addrs)

    async def _reread_for(self, pid: str) -> tuple[str, ...]:
        """Partition pid's addresses, the map read again through the first
        connection if the last read is a second old."""
        rt = self._router
        assert rt is not None
        if now_ms() - rt.read_at >= _route.MAP_REREAD_MS:
            await self._reread(self)
        return rt.addrs_of(pid)

    async def _set_servers(self, addrs: tuple[str, ...]) -> None:
        """A leg's partition has other daemons now: its next connection
        (or first connect) goes to them."""
        try:
            parsed = _options.parse_servers(",".join(addrs[: _options.SERVERS_MAX]))
        except ValueError:
            return
        self._addrs0 = parsed
        if self._loop is None:
            return  # resolved at the first connect
        new = await self._loop.run_in_executor(None, _options.resolve, parsed)
        if not new or self._loop is None:
            return
        core = self._core
        self._o.addresses = new
        core.naddrs = len(new)
        core.addr_i %= len(new)
        core.hint = core.failed_i = -1

    async def _leg_of(self, pid: str, name: str) -> AsyncClient:
        """The client of partition pid, made on first use (it connects
        with the call it is made for)."""
        rt = self._router
        assert rt is not None
        if self._rclosed:
            raise ConnectionLost("the client is closed")
        leg = self._legs.get(pid)
        if leg is not None:
            return leg
        addrs = rt.addrs_of(pid) or await self._reread_for(pid)
        if not addrs:
            raise _route.no_address(name, pid)
        if self._rclosed:
            raise ConnectionLost("the client is closed")
        leg = self._legs.get(pid)  # made meanwhile
        if leg is None:
            o = _route.leg_options(self._o, addrs, self._core.owner, self._core.key)
            leg = self._legs[pid] = AsyncClient(_leg=o)
            leg._parent = self
        return leg

    def _home(self) -> AsyncClient | None:
        """The client that routes this one's calls (Client._home)."""
        return self._parent if self._is_leg else self

    # ---- leases that follow their slot (PARTITION MOVE) -------------------

    async def _rehome(self, ls: LeaseState, src: AsyncClient, e: Moved) -> AsyncClient:
        """As Client._rehome: lease ls of client src was answered MOVED
        e; move it to the client of the partition it went to (the map
        read first if e's is newer or does not say where), which renews
        it from now on. Returns the client that has the lease."""
        if self._router is None and not await self._promote():
            raise e
        rt = self._router
        assert rt is not None
        if self._moving is None:
            self._moving = asyncio.Lock()
        async with self._moving:
            if ls.core is not src._core:  # moved (or released) meanwhile
                return ls.handle._client if ls.handle is not None else src
            if e.epoch > rt.epoch or not e.partition:
                await self._reread(src)  # the daemon that said it knows that map
            tried = next((p for p, leg in self._legs.items() if leg is src), "")
            if _route.behind(rt, e, ls.name, tried):
                return src  # it has not read the map that gives it the lease yet
            pid = rt.redirect(e, ls.name, tried)
            dst = await self._leg_of(pid, ls.name)
            if dst is src:
                return src
            await dst._ensure_connected()  # a leg made now connects
            dst._usable()
            if not src._core.detach(ls):
                return ls.handle._client if ls.handle is not None else src
            if ls.handle is not None:
                ls.handle._client = dst
            dst._core.attach(ls, now_ms())
            dst._schedule()  # renewed now
            src._schedule()
            return dst

    def _gather(self, names: list[str], dst: AsyncClient) -> None:
        """As Client._gather: a lease of one of `names` that another
        client of this router has moves to dst (their partition's client)
        before an acquire there, which then waits its turn behind it."""
        if self._router is None or dst._core.closing:
            return
        for c in (self, *self._legs.values()):
            if c is dst or not any(n in c._core.turns for n in names):
                continue
            mine = [ls for ls in c._core.leases if ls.name in names and c._core.detach(ls)]
            for ls in mine:
                if ls.handle is not None:
                    ls.handle._client = dst
                dst._core.attach(ls, now_ms())
            if mine:
                dst._schedule()

    async def _rehome_bg(self, src: AsyncClient, ls: LeaseState, e: Moved) -> None:
        """A renewal of ls was answered MOVED (src's hook): _rehome as a
        task; one that fails leaves the lease where it was, renewed again
        soon (so does a partition behind the map)."""
        behind = False
        try:
            behind = await self._rehome(ls, src, e) is src
        except Exception:  # noqa: BLE001 -- any failure: renewed again where it is
            pass
        finally:
            if ls.moving and ls.core is src._core:
                ls.moving = False
                if behind:
                    ls.moves = max(ls.moves - 1, 0)  # not a move
                ls.renew_at = now_ms() + move_retry_ms(ls.ttl)
                src._schedule()

    async def _aroute(
        self, name: str, call: Callable[[AsyncClient], Any], first: Moved | None = None
    ) -> Any:
        """await call(leg) on the client of the partition that serves
        `name`, following MOVED (at most MOVED_MAX redirects, then Moved);
        a leg whose first connect fails has the map read again (at most
        once a second) and tries its partition's new addresses once.
        first: the MOVED this client's own connection answered the call
        while it was unpartitioned (_promote): the first redirect."""
        self._usable()
        rt = self._router
        assert rt is not None
        moves = 0
        if first is not None:
            moves = 1
            if first.epoch > rt.epoch:
                await self._reread(self)  # the daemon that said it knows that map
            pid = rt.redirect(first, name, "")
        else:
            pid = rt.target(name)
            if pid is None:
                await self._reread_for("")
                pid = rt.target(name)
                if pid is None:
                    raise _route.no_partition(name, rt.map)
        retried = False
        since = 0.0
        while True:
            leg = await self._leg_of(pid, name)
            try:
                return await call(leg)
            except Moved as e:
                if _route.behind(rt, e, name, pid) and await self._pause_stale(since):
                    since = since or now_ms()
                    continue  # the same partition, again: it reads the map soon
                moves += 1
                if moves > _route.MOVED_MAX:
                    raise _route.too_many(name, e) from None
                if e.epoch > rt.epoch or not e.partition:
                    # the daemon that said it knows that map (a
                    # multi-lock's wait that ended MOVED does not say
                    # where: the map does)
                    await self._reread(leg)
                pid = rt.redirect(e, name, pid)
            except Unavailable as e:
                if _route.in_move(e) and await self._pause_stale(since):
                    since = since or now_ms()
                    continue  # its slot is on its way here: milliseconds
                if retried or leg._core.ready or leg._loop is not None:
                    raise
                retried = True
                addrs = rt.addrs_of(pid)
                again = await self._reread_for(pid)
                if not again or again == addrs:
                    raise

    @staticmethod
    async def _pause_stale(since: float) -> bool:
        """As Client._pause_stale: pause, True to ask again; False once
        it has lasted STALE_MAX_MS."""
        if since and now_ms() - since >= _route.STALE_MAX_MS:
            return False
        await asyncio.sleep(_route.STALE_PAUSE_MS / 1000.0)
        return True

    # ---- acquiring and calls ---------------------------------------------

    def _usable(self) -> None:
        if self._core.forked or os.getpid() != self._pid:
            raise ConnectionLost("this client belongs to the process that made it (fork)")
        if self._core.closing or self._loop is None:
            raise ConnectionLost("the client is closed" if self._core.closing else "not connected")

    async def _acquire(self, a: _api.LockArgs, at: _route.Attempt | None) -> AsyncLease:
        """The acquire; at: as sent before (a router's redirect: sent
        again with the wait left and the same request id)."""
        if at is None:
            at = _route.Attempt(NEVER if a.wait_ms < 0 else now_ms() + a.wait_ms)
        await self._ensure_connected()
        first: Moved | None = None
        if self._router is None:
            try:
                return await self._acquire_here(a, at)
            except Moved as e:
                if not await self._promote():
                    raise
                first = e
        async def on(leg: AsyncClient) -> AsyncLease:
            self._gather([a.name], leg)
            return await leg._acquire(a, at)

        return await self._aroute(a.name, on, first)

    async def _acquire_here(self, a: _api.LockArgs, at: _route.Attempt) -> AsyncLease:
        """_acquire on this client's own connection."""
        self._usable()
        assert self._loop is not None
        start = now_ms()
        wait_end = at.wait_end
        if at.sent and a.wait_ms > 0 and wait_end <= start:
            raise _route.no_wait_left(a.name)
        at.sent += 1
        t = self._core.take_turn(a.name)
        granted = False
        try:
            if not t.ready:
                await self._wait_turn(t, a.wait_ms, wait_end)
            now = now_ms()
            wait_ms = a.wait_ms if a.wait_ms <= 0 else max(wait_end - now, 1.0)
            q = self._core.lock_request(a.name, a.ttl_ms, wait_ms, a.shared, a.limit, now)
            q.reqid = at.reqid or q.reqid
            at.reqid = q.reqid
            q.opts = dict(a.opts, ticket=t)
            try:
                ls: LeaseState = await self._call(q)
            finally:
                at.reqid = q.reqid  # the core may have taken a new one
            granted = True
        finally:
            if not granted:
                self._core.give_turn(t)
        lease = AsyncLease(self, ls)
        ls.handle = lease
        if ls.lost is not None:
            self.lost(ls)
        elif ls.contended_due:  # others wait, said before it had a handle
            self.contended(ls)
        self._schedule()
        return lease

    async def _acquire_all(
        self, a: _api.LockAllArgs, at: _route.Attempt | None
    ) -> AsyncLeases:
        if at is None:
            at = _route.Attempt(NEVER if a.wait_ms < 0 else now_ms() + a.wait_ms)
        if len(a.names) == 1:
            one = _api.LockArgs(a.names[0], a.ttl_ms, a.wait_ms, False, 0, a.opts)
            return AsyncLeases([await self._acquire(one, at)])
        await self._ensure_connected()
        first: Moved | None = None
        if self._router is None:
            try:
                return await self._acquire_all_here(a, at)
            except Moved as e:
                if not await self._promote():
                    raise
                first = e
        # the partition of the first name (byte order); names of several
        # partitions are refused by the server (BAD_ARG)
        async def on(leg: AsyncClient) -> AsyncLeases:
            self._gather(a.names, leg)
            return await leg._acquire_all(a, at)

        return await self._aroute(a.names[0], on, first)

    async def _acquire_all_here(self, a: _api.LockAllArgs, at: _route.Attempt) -> AsyncLeases:
        """_acquire_all of several names on this client's own connection."""
        self._usable()
        assert self._loop is not None
        start = now_ms()
        wait_end = at.wait_end
        if at.sent and a.wait_ms > 0 and wait_end <= start:
            raise _route.no_wait_left(a.names[0])
        at.sent += 1
        ts = [self._core.take_turn(n) for n in a.names]
        granted = False
        try:
            await self._wait_turns(ts, a.wait_ms, wait_end)
            now = now_ms()
            wait_ms = a.wait_ms if a.wait_ms <= 0 else max(wait_end - now, 1.0)
            q = self._core.lockall_request(a.names, a.ttl_ms, wait_ms, now)
            q.reqid = at.reqid or q.reqid
            at.reqid = q.reqid
            q.opts = dict(a.opts, tickets={t.name: t for t in ts})
            try:
                lss: list[LeaseState] = await self._call(q)
            finally:
                at.reqid = q.reqid
            granted = True
        finally:
            if not granted:
                for t in ts:
                    self._core.give_turn(t)
        leases = [AsyncLease(self, ls) for ls in lss]
        for ls, lease in zip(lss, leases):
            ls.handle = lease
            if ls.lost is not None:
                self.lost(ls)
        self._schedule()
        return AsyncLeases(leases)

    async def _wait_turns(self, ts: list[Ticket], wait_ms: float, wait_end: float) -> None:
        """As Client._wait_turns: every name's turn within the wait;
        HeldByOwner for a name a lease of this client holds."""
        assert self._loop is not None
        while True:
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
                raise LockTimeout(f"{waiting[0].name!r} is held by another lease of this client")
            if self._core.closing:
                raise ConnectionLost("the client is closed")
            fut = self._loop.create_future()
            for t in waiting:
                t.waker = fut
            try:
                await asyncio.wait_for(fut, min(left / 1000.0, CLOCK_STEP))
            except asyncio.TimeoutError:
                pass

    async def _wait_turn(self, t: Ticket, wait_ms: float, wait_end: float) -> None:
        assert self._loop is not None
        while not t.ready:
            left = wait_end - now_ms()
            if wait_ms == 0 or left <= 0:
                raise LockTimeout(f"{t.name!r} is held by another lease of this client")
            if self._core.closing:
                raise ConnectionLost("the client is closed")
            fut = self._loop.create_future()
            t.waker = fut
            try:
                await asyncio.wait_for(fut, min(left / 1000.0, CLOCK_STEP))
            except asyncio.TimeoutError:
                pass

    async def _call(
        self,
        q: Req,
        finish: Callable[[], None] | None = None,
        shield: bool = False,
        first: bool = False,
    ) -> Any:
        """Submit q and await its outcome until q.deadline. A cancelled
        caller gives q up, unless `shield` (a release: it goes on);
        `finish` runs however the request ends. `first`: a request of the
        first connect itself (MAP), which does not wait for it."""
        if not first and await self._ensure_connected():  # the first call connects
            q.deadline = now_ms() + self._o.request_timeout_ms
        try:
            self._usable()
        except DlockError:
            if finish:
                finish()
            raise
        assert self._loop is not None
        w = _Wait(self._loop.create_future())
        q.waker = w
        if finish is not None:
            w.fut.add_done_callback(lambda _f: finish())
        self._core.submit(q, now_ms())
        self._flush()
        if not q.done:
            self._arm(q)
        elif not w.fut.done():
            self.done(q)
        try:
            return await (asyncio.shield(w.fut) if shield else w.fut)
        except asyncio.CancelledError:
            if not shield and not q.done:
                self._core.abandon(q)
                if w.timer is not None:
                    w.timer.cancel()
            raise

    def _arm(self, q: Req) -> None:
        """Check q's deadline (moved by a QUEUED answer) in steps."""
        w: _Wait = q.waker
        w.timer = None
        if q.done or w.fut.done():
            return
        left = q.deadline - now_ms()
        if left <= 0:
            self._core.abandon(q)
            w.fut.set_exception(LockTimeout(f"no reply to {q.op} within request_timeout"))
            return
        assert self._loop is not None
        w.timer = self._loop.call_later(min(left / 1000.0, CLOCK_STEP), self._arm, q)

    # ---- the core's hooks ------------------------------------------------

    def done(self, q: Req) -> None:
        w = q.waker
        if w is None:
            return
        if w.timer is not None:
            w.timer.cancel()
            w.timer = None
        if w.fut.done():
            return
        if q.error is not None:
            w.fut.set_exception(q.error)
        else:
            w.fut.set_result(q.result)

    def turn(self, t: Ticket) -> None:
        if t.waker is not None and not t.waker.done():
            t.waker.set_result(None)

    def lost(self, ls: LeaseState) -> None:
        lease = ls.handle
        if lease is None:
            return
        lease.lost.set()
        _api.log_lost(ls)
        if lease._cancel is not None and not lease._cancel.done():
            lease._cancelled_by_loss = True
            lease._cancel.cancel(f"the lease of {ls.name!r} was lost")
        for cb in (ls.on_lost, self._o.on_lost):
            if cb is not None:
                self._callback(cb, lease, ls.lost)

    def watch_event(self, w: WatchState) -> None:
        if w.waker is not None:
            w.waker.set()

    def at_risk(self, ls: LeaseState) -> None:
        if ls.handle is None:
            return
        for cb in (ls.on_at_risk, self._o.on_at_risk):
            if cb is not None:
                self._callback(cb, ls.handle)

    def contended(self, ls: LeaseState) -> None:
        ls.contended_due = False
        if ls.handle is None or self._o.on_contended is None:
            return
        self._callback(self._o.on_contended, ls.handle, ls.waiters)

    def moved(self, ls: LeaseState, err: Moved) -> bool:
        """A renewal of ls was answered MOVED: the router moves the lease
        to the client of its new partition (a task on the loop)."""
        home = self._home()
        if home is None or self._loop is None or self._core.closing or self._core.forked:
            return False
        task = self._loop.create_task(home._rehome_bg(self, ls, err))
        home._movers.add(task)
        task.add_done_callback(home._movers.discard)
        return True

    def _callback(self, cb: Callable[..., Any], *args: Any) -> None:
        def run() -> None:
            r = cb(*args)
            if inspect.isawaitable(r):
                asyncio.ensure_future(r)

        assert self._loop is not None
        self._loop.call_soon(run)

    # ---- connection and timers ---------------------------------------------

    def _flush(self) -> None:
        out = self._core.out
        if out and self._proto is not None and self._proto.transport is not None and self._core.state == UP:
            self._proto.transport.write(bytes(out))
            out.clear()

    def _schedule(self) -> None:
        """Run the core's timers, start a connect when one is due, and arm
        the timer for the next deadline."""
        if self._loop is None or self._core.closing:
            return
        now = now_ms()
        core = self._core
        if core.state == DOWN and now >= core.reconnect_at and self._connect_task is None:
            self._connect_task = self._loop.create_task(self._connect(core.connecting()))
        nxt = core.tick(now)
        if core.take_drop():
            self._drop()
        self._flush()
        if core.state == DOWN:
            nxt = min(nxt, core.reconnect_at)
        at = min(nxt, now + CLOCK_STEP * 1000.0)
        if self._timer is not None:
            if self._timer_at <= at:
                return
            self._timer.cancel()
        self._timer_at = at
        self._timer = self._loop.call_later(max(0.0, (at - now) / 1000.0), self._on_timer)

    def _on_timer(self) -> None:
        self._timer = None
        self._timer_at = NEVER
        self._schedule()

    async def _connect(self, i: int) -> None:
        assert self._loop is not None
        a = self._o.addresses[i]
        loop = self._loop
        ctx = self._o.ssl_context
        timeout = self._o.connect_timeout_ms / 1000.0
        sock = None
        try:
            sock = socket.socket(a.family, socket.SOCK_STREAM)
            sock.setblocking(False)
            if a.family != socket.AF_UNIX:
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            await asyncio.wait_for(loop.sock_connect(sock, a.sockaddr), timeout)
            kw: dict[str, Any] = {}
            if ctx is not None:
                kw = dict(
                    ssl=ctx,
                    server_hostname=self._o.tls_server_name or a.host,
                    ssl_handshake_timeout=timeout,
                )
            if a.family == socket.AF_UNIX:
                _, proto = await loop.create_unix_connection(lambda: _Proto(self), sock=sock)
            else:
                _, proto = await loop.create_connection(lambda: _Proto(self), sock=sock, **kw)
        except asyncio.CancelledError:
            if sock is not None:
                sock.close()
            raise
        except (OSError, asyncio.TimeoutError, ssl.SSLError) as e:
            if sock is not None:
                sock.close()
            self._connect_task = None
            why = f"{a.name}: {'connect timed out' if isinstance(e, asyncio.TimeoutError) else e}"
            refused = isinstance(e, OSError) and e.errno in REFUSED
            self._core.connect_failed(now_ms(), why, refused)
            self._note_ready()
            if isinstance(e, ssl.SSLError) and not self._core.ready:
                self._tls_error = e
                self._tls_fails += 1
                if self._tls_fails >= len(self._o.addresses) and self._ready and not self._ready.done():
                    self._ready.set_result(None)
            self._schedule()
            return
        self._connect_task = None
        if self._core.closing:
            proto.transport.close()  # type: ignore[union-attr]
            return
        self._proto = proto  # type: ignore[assignment]
        self._tls_error = None
        self._core.connected(now_ms())
        self._flush()
        self._schedule()

    def _data(self, proto: _Proto, data: bytes) -> None:
        if proto is not self._proto:
            return
        keep = self._core.data_received(data, now_ms())
        if not keep or self._core.take_drop():
            self._drop()
        else:
            self._flush()
        self._note_ready()
        self._schedule()

    def _drop(self) -> None:
        p, self._proto = self._proto, None
        if p is not None and p.transport is not None:
            p.transport.abort()
        self._core.connection_lost(now_ms())

    def _lost(self, proto: _Proto) -> None:
        if proto is not self._proto:
            return
        self._proto = None
        self._core.connection_lost(now_ms())
        self._note_ready()
        self._schedule()

    def _note_ready(self) -> None:
        c = self._core
        if (c.ready or c.fatal is not None or c.state == DEAD) and self._ready and not self._ready.done():
            self._ready.set_result(None)

    def _after_fork(self) -> None:
        self._core.after_fork()
        self._proto = None
        self._timer = None
        self._connect_task = None
